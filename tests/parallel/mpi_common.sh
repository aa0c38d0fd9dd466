# Shared by the MPI test scripts (sourced after `LCT=$1`): tests/script_common.sh (a
# scratch folder, the current directory; MPI's settings and MPIRUN), and helpers that
# expect MODEL (the scripts' common lct train arguments).
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../script_common.sh"  # $work (the current directory), MPI's settings, fail, model_keys
# The machine's measurements (fp32 GEMM choice per shape, CAD's cost model) are cached in
# the build's test cache that ctest names (tests/CMakeLists.txt), shared by the scripts
# (written atomically), so each shape is measured once per suite, not once per script;
# run by hand, a scratch cache, never the user's. mpi_cad.sh, which checks the first
# measurement, keeps its own.
export LCT_CACHE_DIR=${LCT_CACHE_DIR:-$work/cache}

# The small model most layout tests train (2 layers, 4 query and 2 key/value heads),
# one thread per rank; scripts add their data and schedule.
TINY_MODEL="$(model_keys 32 48 2 4 2) --train.threads 1"

# 128-token sequences of documents up to the whole sequence, DCA in chunks of 40 with a
# local window of 8 (32 new tokens a chunk), so DCA runs its intra, successive and inter
# parts on the longer documents
SEQ128_DCA="--data.seq_len 128 --data.max_doc_len 128 --attention.dca_chunk_size 40 --attention.dca_local_size 8"

# The layout comparisons' optimizer: SGD's parameters are linear in the gradients, so
# layouts that sum in another order stay within compare_runs.py's rounding bounds (with
# AdamW they would not); lr 0.3 falling to 0.03 keeps each update below the tensor's
# largest magnitude, as those bounds assume
SGD="--train.optimizer sgd --train.lr 0.3 --train.min_lr 0.03"

# compare LABEL RUN_A RUN_B [LOSS_RTOL PARAM_RTOL]: per-step losses and final parameters,
# its line printed, status 1 when they differ. One compare_runs.py --serve per shell
# answers every comparison (a Python start with numpy and h5py is about a third of a
# second; the scripts compare about 270 pairs); it ends when the script does (its stdin
# closes). A subshell, which cannot use its parent's, starts its own.
compare() {
  if [[ ${COMPARER_SHELL:-} != "$BASHPID" ]]; then
    coproc COMPARER { exec /usr/bin/python3 "$HERE/compare_runs.py" --serve; }
    COMPARER_SHELL=$BASHPID
  fi
  local line IFS=$'\t'
  printf '%s\n' "$*" >&"${COMPARER[1]}"
  IFS= read -r line <&"${COMPARER[0]}" || { echo "FAIL $1: compare_runs.py --serve ended"; return 1; }
  echo "$line"
  [[ $line == "ok "* ]]
}

# run_train DIR RANKS ARGS...: lct train with MODEL and ARGS into checkpoint.dir DIR, one
# process (RANKS = 0) or RANKS under mpirun; the log goes to DIR.log, shown on failure
run_train() {
  local dir=$1 np=$2
  shift 2
  local cmd=("$LCT" train $MODEL --checkpoint.dir "$dir" "$@")
  [ "$np" = 0 ] || cmd=(timeout 300 $MPIRUN -np "$np" "${cmd[@]}")
  "${cmd[@]}" > "$dir.log" 2>&1 || { cat "$dir.log"; echo "FAIL: run $dir"; exit 1; }
}

# expect_layout_error RANKS MESSAGE ARGS...: one error line (from rank 0), a non-zero
# exit, quickly
expect_layout_error() {
  local np=$1 msg=$2
  shift 2
  local out rc=0
  out=$(timeout 60 $MPIRUN -np "$np" "$LCT" train $MODEL --train.steps 1 --checkpoint.dir bad "$@" 2>&1) || rc=$?
  if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then echo "$out"; echo "FAIL: expected an error, rc=$rc"; exit 1; fi
  grep -q -- "$msg" <<< "$out" || { echo "$out"; echo "FAIL: missing '$msg'"; exit 1; }
  [ "$(echo "$out" | grep -c "lct: error")" = 1 ] || { echo "$out"; echo "FAIL: error not reported once"; exit 1; }
  echo "ok   layout error: $msg"
}

# expect_job_ends_when_a_rank_dies RANKS ARGS...: starts a long run, kill -9s one rank
# once steps are logged, and requires the whole job to end with a message within 30 s.
# Its ranks are found by their checkpoint folder's absolute path, which only this script's
# scratch folder holds: ctest -j2 runs another script's killed run beside it.
expect_job_ends_when_a_rank_dies() {
  local np=$1
  shift
  $MPIRUN -np "$np" "$LCT" train $MODEL --train.steps 100000 --checkpoint.dir "$work/killed" "$@" > killed.log 2>&1 &
  local launcher=$!
  for _ in $(seq 100); do grep -q "step" killed.log 2>/dev/null && break; sleep 0.1; done
  local victim
  victim=$(pgrep -f -- "checkpoint.dir $work/killed" | grep -v "^$launcher$" | while read -r p; do
    [ "$(ps -o comm= -p "$p")" = lct ] && echo "$p"; done | tail -1)
  [ -n "$victim" ] || { cat killed.log; echo "FAIL: no rank process found"; exit 1; }
  local start rc=0
  start=$(date +%s)
  kill -9 "$victim"
  timeout 30 tail --pid="$launcher" -f /dev/null || { echo "FAIL: job still running 30 s after a rank died"; kill -9 $launcher; exit 1; }
  wait "$launcher" || rc=$?
  [ "$rc" != 0 ] || { echo "FAIL: job exited 0 after a rank was killed"; exit 1; }
  grep -qiE "exited on signal|killed|aborted|terminated" killed.log || { cat killed.log; echo "FAIL: no message"; exit 1; }
  echo "ok   killed rank $victim: job ended in $(( $(date +%s) - start ))s with exit code $rc"
  rm -rf killed killed.log
}
