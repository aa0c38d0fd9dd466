#!/usr/bin/env bash
# Every numeric option of configs/default.toml set in turn to +-1e39, 1e-50, nan, inf, 0,
# -1 and 2^63 (a tiny model, 2 steps): each run is refused (exit 1, one "lct: error"
# line) or trains and leaves a checkpoint that `lct inspect` passes (finite parameters,
# checksums); never another exit code (a crash or abort), never exit 0 with a
# non-finite checkpoint. A run still training after 20 s (a value that asks for a very
# long run) is stopped with SIGTERM and must leave a checkpoint that passes as well.
set -uo pipefail
LCT=$1
ROOT=$2
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
BASE=($(model_keys 32 32 2 2 1) --data.seq_len 64
      --data.max_doc_len 64 --train.steps 2 --train.threads 1 --checkpoint.every 0
      --attention.dca_chunk_size 32 --attention.dca_local_size 8)
keys=$(awk '/^\[/ {gsub(/[\[\]]/, ""); s = $0} /^[a-z_0-9]+ = -?[0-9.e+-]+$/ {print s "." $1}' "$ROOT/configs/default.toml")
values="1e39 -1e39 1e-50 nan inf 0 -1 9223372036854775808"
failures=0 runs=0 refused=0 trained=0
for key in $keys; do
  for value in $values; do
    runs=$((runs + 1))
    dir="run_${runs}"
    # the base settings less the key under test (an option may be given once)
    args=()
    for ((i = 0; i < ${#BASE[@]}; i += 2)); do
      [ "${BASE[i]}" = "--$key" ] || args+=("${BASE[i]}" "${BASE[i + 1]}")
    done
    timeout --preserve-status -s TERM 20 "$LCT" train "${args[@]}" --checkpoint.dir "$dir" "--$key" "$value" \
      > "$dir.out" 2> "$dir.err"
    rc=$?
    case $rc in
      1)
        if [ "$(grep -c "lct: error" "$dir.err")" != 1 ]; then
          echo "FAIL: --$key $value: exit 1 without exactly one error line"; cat "$dir.err"; failures=$((failures + 1))
        elif ! grep -q -- "$key\|--$key\|not enough memory\|must be\|checkpoint\|parallel\|data\." "$dir.err"; then
          echo "FAIL: --$key $value: the error does not say what is wrong: $(cat "$dir.err")"; failures=$((failures + 1))
        fi
        refused=$((refused + 1)) ;;
      0|143)
        ckpt=$(ls "$dir"/step_*.h5 2>/dev/null | tail -1)
        if [ -z "$ckpt" ]; then
          echo "FAIL: --$key $value: exit $rc and no checkpoint"; failures=$((failures + 1))
        elif ! "$LCT" inspect "$ckpt" > "$dir.inspect" 2>&1; then
          echo "FAIL: --$key $value: exit $rc with a checkpoint lct inspect rejects:"
          grep -E "NON-FINITE|failed|error" "$dir.inspect" | head -3; failures=$((failures + 1))
        fi
        trained=$((trained + 1)) ;;
      *)
        echo "FAIL: --$key $value: exit $rc"; tail -3 "$dir.err"; failures=$((failures + 1)) ;;
    esac
    rm -rf "$dir" "$dir".*
  done
done
echo "fuzz_options: $runs runs over $(echo "$keys" | wc -w) numeric options: $refused refused, $trained trained"
if [ "$failures" -ne 0 ]; then echo "fuzz_options: $failures failures"; exit 1; fi
echo "fuzz_options: all passed"
