#!/usr/bin/env bash
# Ranks on different hosts (scripts/cluster.sh: network-namespace hosts with their own
# hostnames, talking TCP through a bridge; skipped with cluster.sh's line where
# namespaces cannot be made):
#   - dp = 2 across two hosts equals one process (compare_runs.py's float32 bounds);
#   - pp = 2, cp = 2 (ring and Ulysses), CAD dp = 2 (causal and DCA) and dp = 2 x pp = 2
#     (two ranks per host) across hosts equal the same ranks on one host bit for bit:
#     only the transport differs;
#   - a host that cannot see checkpoint.dir, or runs another lct binary or config, is
#     refused at start-up with one line naming it;
#   - killing every process of one host mid-run ends the job on every host within 60 s
#     with a line naming the lost host and its ranks; the last checkpoint loads, and
#     resuming from it on another number of hosts ends bit for bit where the
#     uninterrupted run ends;
#   - the namespaces are gone after cluster.sh ends: normally, after a failed command,
#     and after Ctrl-C (SIGINT) mid-run.
set -euo pipefail
LCT=$1
SRC=$2
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers
CLUSTER=(bash "$SRC/scripts/cluster.sh")

if ! out=$("${CLUSTER[@]}" --hosts 2 -- true 2>&1); then
  if grep -q "cannot make network namespaces here" <<< "$out"; then
    echo "SKIP: $out"
    exit 77
  fi
  echo "$out"; echo "FAIL: cluster.sh could not run 'true' on two hosts"; exit 1
fi

MODEL="$TINY_MODEL --data.seq_len 256 --data.max_doc_len 256 --train.warmup_steps 3"

# on_cluster DIR HOSTS RANKS_PER_HOST ARGS...: lct train with MODEL across namespace hosts
on_cluster() {
  local dir=$1 hosts=$2 rph=$3
  shift 3
  timeout 300 "${CLUSTER[@]}" --hosts "$hosts" --ranks-per-host "$rph" -- \
    "$LCT" train $MODEL --checkpoint.dir "$dir" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; echo "FAIL: run $dir"; exit 1; }
}
no_namespaces_left() {  # what, name (a regular expression): its namespaces are gone
  local left
  left=$(ip netns list | grep -E "^$2-" || true)
  [[ -z $left ]] || { echo "FAIL: $1: namespaces left: $left"; exit 1; }
}

# --- equal to one process / to one host ----------------------------------------------
run_train dp1 0 --train.micro_batches 4 --train.steps 8 $SGD
on_cluster hosts_dp2 2 1 --train.micro_batches 2 --train.steps 8 $SGD
grep -q "hosts: 2, node1 (rank 0), node2 (rank 1)" hosts_dp2.log || { cat hosts_dp2.log; echo "FAIL: no host line"; exit 1; }
compare "dp=2 on two hosts vs one process" hosts_dp2 dp1

same_as_one_host() {  # label, ranks per host, args: two hosts against one, bit for bit
  local label=$1 rph=$2
  shift 2
  local name=${label//[^a-z0-9]/_}
  run_train "one_$name" $(( 2 * rph )) "$@"
  on_cluster "two_$name" 2 "$rph" "$@"
  compare "$label: two hosts vs one host" "two_$name" "one_$name" 0 0
}
same_as_one_host "dp=2 adamw" 1 --train.micro_batches 2 --train.steps 6
same_as_one_host "pp=2" 1 --parallel.pp 2 --train.micro_batches 4 --train.steps 6
same_as_one_host "cp=2 ring" 1 --parallel.cp 2 --parallel.cp_comm ring --train.micro_batches 2 --train.steps 6
same_as_one_host "cp=2 ulysses" 1 --parallel.cp 2 --parallel.cp_comm ulysses --train.micro_batches 2 --train.steps 6
# (CAD's plan from the pair count and equal rank speeds: a timed cost model would give
# each run its own plan, and another order of sums)
CAD="--attention.placement cad --attention.cad_profile pairs --attention.cad_rank_speeds false"
same_as_one_host "cad dp=2" 1 $CAD --train.micro_batches 2 --train.steps 6
same_as_one_host "cad dp=2 dca" 1 $CAD --attention.kernel dca --attention.dca_chunk_size 64 \
  --attention.dca_local_size 8 --train.micro_batches 2 --train.steps 6
same_as_one_host "dp=2 x pp=2, 2 ranks per host" 2 --parallel.pp 2 --train.micro_batches 4 --train.steps 6

# --- refused at start-up: a host that sees other files -------------------------------
# expect_refused LABEL MESSAGE CLUSTER-ARGS... -- LCT-ARGS...: one error line, exit 1,
# within 60 s
expect_refused() {
  local label=$1 msg=$2 cargs=() out rc=0 start
  shift 2
  while [[ $1 != -- ]]; do cargs+=("$1"); shift; done
  shift
  start=$(date +%s)
  out=$(timeout 120 "${CLUSTER[@]}" --hosts 2 "${cargs[@]}" -- "$LCT" train $MODEL --train.steps 3 "$@" 2>&1) || rc=$?
  if [[ $rc -ne 1 ]] || (( $(date +%s) - start > 60 )); then
    echo "$out"; echo "FAIL: $label: exit $rc after $(( $(date +%s) - start )) s (want 1, within 60 s)"; exit 1
  fi
  grep -qF -- "$msg" <<< "$out" || { echo "$out"; echo "FAIL: $label: missing '$msg'"; exit 1; }
  [[ $(grep -c "lct: error" <<< "$out") -eq 1 ]] || { echo "$out"; echo "FAIL: $label: not one error line"; exit 1; }
  echo "ok   $label: $(grep "lct: error" <<< "$out")"
}
mkdir -p shared elsewhere
expect_refused "checkpoint.dir not shared" "checkpoint.dir 'shared' on rank 1 (node2) is not the folder rank 0 (node1) writes" \
  --bind "node2:$work/elsewhere:$work/shared" -- --checkpoint.dir shared
[[ -z $(ls -A elsewhere) ]] || { echo "FAIL: the refused run wrote into node2's folder"; exit 1; }
cp "$LCT" lct_other && printf 'x' >> lct_other  # another build: a different binary that still runs
expect_refused "another lct binary" "ranks disagree: lct binary = " \
  --bind "node2:$work/lct_other:$LCT" -- --checkpoint.dir other_binary
printf '[train]\nseed = 5\n' > cfg.toml
printf '[train]\nseed = 6\n' > cfg_other.toml
expect_refused "another config file" "ranks disagree: train.seed = 5 on rank 0 (node1) but 6 on rank 1 (node2)" \
  --bind "node2:$work/cfg_other.toml:$work/cfg.toml" -- --config cfg.toml --checkpoint.dir other_config

# --- a host dies mid-run ---------------------------------------------------------------
# (1024-token sequences: steps long enough that the kill lands mid-run)
FAULT_MODEL="$TINY_MODEL --data.seq_len 1024 --data.max_doc_len 1024 --train.warmup_steps 3"
FAULT=(--train.micro_batches 2 --train.steps 60 --checkpoint.every 4 --checkpoint.keep 2)
MODEL=$FAULT_MODEL on_cluster full 2 1 "${FAULT[@]}"
"${CLUSTER[@]}" --name lctkill --hosts 2 -- "$LCT" train $FAULT_MODEL "${FAULT[@]}" --checkpoint.dir "$work/killed" > killed.log 2>&1 &
launcher=$!
for _ in $(seq 600); do [[ -f killed/metrics.jsonl && $(wc -l < killed/metrics.jsonl) -ge 10 ]] && break; sleep 0.05; done
[[ $(wc -l < killed/metrics.jsonl) -lt 60 ]] || { echo "FAIL: the run ended before the kill"; exit 1; }
start=$(date +%s)
victims=$(ip netns pids lctkill-node2)
[[ -n $victims ]] || { cat killed.log; echo "FAIL: no process on node2"; exit 1; }
kill -KILL $victims
rc=0
timeout 60 tail --pid="$launcher" -f /dev/null || { echo "FAIL: job still running 60 s after node2 died"; kill -KILL $launcher; exit 1; }
wait "$launcher" || rc=$?
took=$(( $(date +%s) - start ))
[[ $rc -ne 0 ]] || { cat killed.log; echo "FAIL: exit 0 after a host died"; exit 1; }
line=$(grep "cluster.sh: lost host node2 (rank 1)" killed.log) || { cat killed.log; echo "FAIL: no line naming the lost host"; exit 1; }
pgrep -f -- "checkpoint.dir $work/killed" > /dev/null && { echo "FAIL: a rank survived"; exit 1; }
no_namespaces_left "host killed" lctkill
echo "ok   node2 killed: every rank gone in ${took} s, exit $rc; $line"
ckpt=$(ls "$work"/killed/step_*.h5 | tail -1)  # absolute, as lct logs it
[[ $line == *"last checkpoint written: $ckpt" ]] || { echo "FAIL: the line names another checkpoint than $ckpt"; exit 1; }
"$LCT" inspect "$ckpt" > /dev/null || { echo "FAIL: $ckpt does not load"; exit 1; }
ls killed/*.lct-* 2> /dev/null && { echo "FAIL: temporary file left"; exit 1; }
# resume on one host (two ranks there): the same ranks, so bit for bit the full run
timeout 300 $MPIRUN -np 2 "$LCT" train $FAULT_MODEL "${FAULT[@]}" --checkpoint.dir "$work/killed" --train.resume auto > resumed.log 2>&1 \
  || { cat resumed.log; echo "FAIL: resume"; exit 1; }
at=$((10#$(basename "$ckpt" .h5 | tr -dc 0-9)))
grep -q "resumed at step $at" resumed.log || { cat resumed.log; echo "FAIL: not resumed from $ckpt"; exit 1; }
compare "resumed on one host after node2 died vs uninterrupted on two" killed full 0 0

# --- nothing left behind ----------------------------------------------------------------
no_namespaces_left "normal end" "lct[0-9]+"
rc=0
"${CLUSTER[@]}" --name lctfail --hosts 2 -- "$LCT" train --no-such-option > fail.log 2>&1 || rc=$?
[[ $rc -ne 0 ]] || { echo "FAIL: a failing command exited 0 through cluster.sh"; exit 1; }
no_namespaces_left "failed command" lctfail
# Ctrl-C: SIGINT to the job's whole process group, as a terminal sends it (job control
# gives the background job a group of its own, and keeps SIGINT from being ignored there).
# interrupt NAME TIMES: a long run on 2 hosts, SIGINT TIMES times 0.1 s apart once it
# steps (issue 54 cause 3: a second Ctrl-C during teardown killed it halfway); exit 130,
# and nothing left: namespaces, ranks, the state folder
mkdir -p state
interrupt() {
  local name=$1 times=$2 rc=0 i
  set -m
  TMPDIR=$work/state "${CLUSTER[@]}" --name "$name" --hosts 2 -- "$LCT" train $MODEL --train.steps 100000 \
    --checkpoint.every 0 --checkpoint.dir "$work/run_$name" > "$name.log" 2>&1 &
  launcher=$!
  set +m
  for _ in $(seq 600); do grep -q "^step" "$name.log" 2> /dev/null && break; sleep 0.05; done
  for ((i = 0; i < times; ++i)); do kill -INT -- -$launcher 2> /dev/null || true; sleep 0.1; done
  timeout 30 tail --pid="$launcher" -f /dev/null || { echo "FAIL: cluster.sh still running 30 s after $times SIGINT"; exit 1; }
  wait "$launcher" || rc=$?
  [[ $rc -eq 130 ]] || { cat "$name.log"; echo "FAIL: exit $rc after $times SIGINT (want 130)"; exit 1; }
  no_namespaces_left "$times SIGINT" "$name"
  pgrep -f -- "checkpoint.dir $work/run_$name" > /dev/null && { echo "FAIL: a rank survived $times SIGINT"; exit 1; }
  [[ -z $(ls -A state) ]] || { echo "FAIL: cluster.sh left its state folder after $times SIGINT"; exit 1; }
}
interrupt lctint 1
interrupt lctint2 2
# killed outright (SIGKILL: no teardown at all): the next run removes what it left, by
# the pid and namespaces its state folder records
TMPDIR=$work/state "${CLUSTER[@]}" --name lctkill --hosts 2 -- "$LCT" train $MODEL --train.steps 100000 --checkpoint.every 0 \
  --checkpoint.dir "$work/killed9" > killed9.log 2>&1 &
launcher=$!
for _ in $(seq 600); do grep -q "^step" killed9.log 2> /dev/null && break; sleep 0.05; done
kill -KILL "$launcher"
wait "$launcher" 2> /dev/null || true
[[ $(ip netns list) == *lctkill-* ]] || { echo "FAIL: SIGKILL test: no namespaces were left to clean"; exit 1; }
out=$(TMPDIR=$work/state "${CLUSTER[@]}" --name lctafter --hosts 2 -- true 2>&1) \
  || { echo "$out"; echo "FAIL: the run after a killed one"; exit 1; }
[[ $out == *"cluster.sh: removed what an earlier run (pid $launcher) left: lctkill-switch"* ]] \
  || { echo "$out"; echo "FAIL: the next run did not name what it removed"; exit 1; }
no_namespaces_left "a run killed with SIGKILL, after the next run" lctkill
pgrep -f -- "checkpoint.dir $work/killed9" > /dev/null && { echo "FAIL: a rank of the killed run survived the next run"; exit 1; }
[[ -z $(ls -A state) ]] || { echo "FAIL: the killed run's state folder is still there"; exit 1; }
echo "ok   namespaces and processes gone after a normal end, a failed command, SIGINT, SIGINT twice, and SIGKILL (by the next run)"
echo "mpi_multihost: all passed"
