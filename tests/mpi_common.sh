# Shared by the MPI test scripts (sourced after `LCT=$1`): MPI settings for root and
# oversubscription, a scratch folder removed on exit (made the current directory), and
# helpers that expect MODEL (the scripts' common lct train arguments).
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=PASSIVE
# On one host OpenMPI selects ob1 over shared memory whatever it probes; naming them skips
# the probes of the transports it would reject (UCX, OFI, PSM2, openib, TCP): 0.63 s ->
# 0.42 s for 4 ranks of MPI_Init and MPI_Finalize here. scripts/cluster.sh names its own
# (TCP between hosts) on its command line, which overrides these.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
MPIRUN="mpirun --oversubscribe --bind-to none"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# OpenMPI's session folder in the scratch folder, not /tmp/ompi.HOST.UID, which every
# mpirun on the machine shares: two launched at once (ctest -j2 runs two MPI scripts)
# race to create and remove it ("mkdir ... /tmp/ompi.vm.0: File exists", orte_init fails)
export OMPI_MCA_orte_tmpdir_base=$work
# CAD's measured cost model is cached here, not in the user's cache (src/tune/cad_profile.h)
export LCT_CACHE_DIR=$work/cache

# The small model most layout tests train (2 layers, 4 query and 2 key/value heads),
# one thread per rank; scripts add their data and schedule.
TINY_MODEL="--model.hidden_size 32 --model.intermediate_size 48 --model.num_hidden_layers 2
  --model.num_attention_heads 4 --model.num_key_value_heads 2 --train.threads 1"

# compare LABEL RUN_A RUN_B [LOSS_RTOL PARAM_RTOL]: per-step losses and final parameters
compare() { /usr/bin/python3 "$HERE/compare_runs.py" "$@"; }

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
# once steps are logged, and requires the whole job to end with a message within 30 s
expect_job_ends_when_a_rank_dies() {
  local np=$1
  shift
  $MPIRUN -np "$np" "$LCT" train $MODEL --train.steps 100000 --checkpoint.dir killed "$@" > killed.log 2>&1 &
  local launcher=$!
  for _ in $(seq 100); do grep -q "step" killed.log 2>/dev/null && break; sleep 0.1; done
  local victim
  victim=$(pgrep -f "checkpoint.dir killed" | grep -v "^$launcher$" | while read -r p; do
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
