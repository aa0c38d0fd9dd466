#!/usr/bin/env bash
# An address-space limit (ulimit -v; issue 87 finding 6). OpenBLAS 0.3.21 maps a 128 MiB
# buffer for each thread it runs (in its constructor, before main) and for each thread
# that calls a product, and retries a mapping that fails forever, ignoring SIGTERM: under
# `ulimit -v 300000` a tiny training run passed lct's memory check and then spun, and at
# 200000 `lct --help` hung before main. Now a limit lct cannot start under is one line and
# exit 1 before any library runs (src/main.cpp's .preinit_array, src/util/machine.h);
# above it lct maps the threads' buffers, stacks and arenas where it sets its threads
# (fewer threads when their count is automatic, one line when a count given does not
# fit), and the memory checks set the address space mapped against the limit. So at any
# limit lct runs, or stops with one line, within seconds: never a hang. (The sanitizer
# build reserves terabytes of shadow memory and cannot run under ulimit -v: skipped.)
set -uo pipefail
LCT=$1
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), fail, model_keys
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
if [[ -n ${LCT_SANITIZED:-} ]]; then
  echo "skip: the sanitizer build cannot run under ulimit -v"
  exit 0
fi

# limited KIB ARGS...: lct ARGS under ulimit -v KIB, killed after 60 s (a spin ignores
# SIGTERM: its exit code is then 137); sets rc, and err to stderr without warning lines
limited() {
  local kib=$1
  shift
  local all
  all=$( (ulimit -v "$kib"; exec timeout -s KILL 60 "$LCT" "$@") 2>&1 >/dev/null)
  rc=$?
  err=$(grep -v '^lct: warning: ' <<< "$all")
}
# ended_cleanly LABEL: the last run trained (exit 0) or stopped with one "lct: error:" line
# that names the address space or the memory (never a std::bad_alloc or another failure
# the limit caused after the checks)
cause='address-space limit|not enough memory|threads need about'
ended_cleanly() {
  if [[ $rc -eq 0 ]]; then
    return 0
  elif [[ $rc -eq 1 && $(grep -c . <<< "$err") -eq 1 && $err == "lct: error: "* && $err =~ $cause ]]; then
    return 0
  fi
  fail "$1: exit $rc (137: killed after 60 s), '$err'"
  return 1
}

TINY=($(model_keys 32 48 2 4 2) --data.seq_len 256 --train.steps 2 --checkpoint.every 0)
# (the machine's measurements cached first, as every run below reads them)
"$LCT" train "${TINY[@]}" --checkpoint.dir warm > /dev/null 2>&1 || fail "a tiny run without a limit"

# below what lct needs to start: one line naming the limit and the need, exit 1, at once
refusal='^lct: error: the address-space limit \(ulimit -v\) of [0-9.]+ MiB is below the ([0-9.]+) MiB lct needs to start with ([0-9]+) thread'
for kib in 200000 300000; do
  for args in "--help" "train ${TINY[*]} --checkpoint.dir below_$kib"; do
    start_s=$(date +%s)
    # shellcheck disable=SC2086
    limited "$kib" $args
    if [[ $rc -eq 1 && $(grep -c . <<< "$err") -eq 1 && $err =~ $refusal ]] && (( $(date +%s) - start_s < 10 )) &&
       [[ ! -e below_$kib ]]; then
      need=${BASH_REMATCH[1]} threads=${BASH_REMATCH[2]}
      echo "ok   ulimit -v $kib, lct ${args%% *}: refused before the libraries start ($need MiB needed, $threads threads)"
    else
      fail "ulimit -v $kib, lct ${args%% *}: exit $rc, '$err'"
    fi
  done
done
[[ -n ${need:-} ]] || { echo "address_space: no start-up figure, $failures failures"; exit 1; }
kib_of() { /usr/bin/python3 -c "import sys; print(int(float(sys.argv[1]) * 1024))" "$1"; }
start_kib=$(kib_of "$need")

# just below the figure: the same refusal; just above: lct starts (any other outcome is
# the command's own)
limited $((start_kib - 1024)) --help
[[ $rc -eq 1 && $err == *"lct needs to start"* ]] && echo "ok   1 MiB below the start-up figure: refused" \
  || fail "1 MiB below the start-up figure: exit $rc, '$err'"
limited $((start_kib + 1024)) --help
[[ $rc -eq 0 ]] && echo "ok   1 MiB above the start-up figure: lct --help runs" || fail "1 MiB above: exit $rc, '$err'"
# the refusal names the thread count that would fit, and with it lct starts
limited $((start_kib - 1024)) --help
fewer='or set OMP_NUM_THREADS=([0-9]+)'
if [[ $threads -gt 1 && $err =~ $fewer ]]; then
  fits=${BASH_REMATCH[1]}
  all=$( (ulimit -v $((start_kib - 1024)); OMP_NUM_THREADS=$fits exec timeout -s KILL 60 "$LCT" train "${TINY[@]}" \
         --checkpoint.dir fewer) 2>&1 >/dev/null)
  rc=$?
  err=$(grep -v '^lct: warning: ' <<< "$all")
  [[ $err != *"lct needs to start"* ]] && ended_cleanly "OMP_NUM_THREADS=$fits" \
    && echo "ok   OMP_NUM_THREADS=$fits, as the refusal says: lct starts (exit $rc)"
fi

# from the start-up figure up: every run trains or stops with one line, within seconds
# (one thread: the transition is some 200 MiB wide; it trains at the top)
trained=0 refused=0
for step in $(seq 0 20); do
  kib=$((start_kib + step * 24 * 1024))
  limited "$kib" train "${TINY[@]}" --train.threads 1 --checkpoint.dir "one_$kib"
  ended_cleanly "ulimit -v $kib, 1 thread" || continue
  [[ $rc -eq 0 ]] && trained=$((trained + 1)) || refused=$((refused + 1))
  last_rc=$rc
done
[[ $trained -ge 1 && ${last_rc:-1} -eq 0 ]] \
  && echo "ok   one thread, 21 limits from the start-up figure up by 24 MiB: $refused refused in one line, $trained trained" \
  || fail "one thread: $refused refused and $trained trained, the last with exit ${last_rc:-?} (want the largest limit to train)"
# the automatic thread count (fewer threads where the limit holds no more, with a warning)
trained=0 refused=0
for step in $(seq 0 10); do
  kib=$((start_kib + step * 64 * 1024))
  limited "$kib" train "${TINY[@]}" --checkpoint.dir "auto_$kib"
  ended_cleanly "ulimit -v $kib, automatic threads" || continue
  [[ $rc -eq 0 ]] && trained=$((trained + 1)) || refused=$((refused + 1))
done
echo "ok   automatic threads, 11 limits up by 64 MiB: $refused refused in one line, $trained trained"
# a thread count given that the limit does not hold: one line naming the threads
limited $((start_kib + 64 * 1024)) train "${TINY[@]}" --train.threads 6 --checkpoint.dir six
[[ $rc -eq 1 && $(grep -c . <<< "$err") -eq 1 && $err == "lct: error: 6 threads need about "*"ulimit -v"* && ! -e six ]] \
  && echo "ok   --train.threads 6 under the limit: refused in one line" || fail "--train.threads 6: exit $rc, '$err'"
# the other commands that run products: generate and eval start, then run or refuse
"$LCT" make-batch "${TINY[@]}" --out b.h5 > /dev/null 2>&1 || fail "make-batch"
ran_generate=0 ran_eval=0
for step in 0 2 4 8; do
  kib=$((start_kib + step * 32 * 1024))
  limited "$kib" generate --checkpoint warm/step_00000002.h5 --prompt "The pass key is " --max-new-tokens 8
  ended_cleanly "ulimit -v $kib, generate" && [[ $rc -eq 0 ]] && ran_generate=$((ran_generate + 1))
  limited "$kib" eval --checkpoint warm/step_00000002.h5 --batch-file b.h5
  ended_cleanly "ulimit -v $kib, eval" && [[ $rc -eq 0 ]] && ran_eval=$((ran_eval + 1))
done
# (the largest limit holds both: a check that refuses everything would pass the above)
[[ $ran_generate -ge 1 && $ran_eval -ge 1 ]] \
  && echo "ok   generate and eval at 4 limits above the start-up figure: each runs or stops with one line ($ran_generate and $ran_eval ran)" \
  || fail "generate ran under $ran_generate and eval under $ran_eval of 4 limits (want the largest to run)"

if [[ $failures -ne 0 ]]; then echo "address_space: $failures failures"; exit 1; fi
echo "address_space: all passed"
