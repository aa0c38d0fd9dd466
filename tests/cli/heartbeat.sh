#!/usr/bin/env bash
# Issue 57: a heartbeat inside long steps (train.heartbeat_s). With an interval far below
# the step time, rank 0 prints progress lines (phase, layer, micro-batch, share of the
# step's FLOPs, time in and to go) while each step runs, and the run's results are bit
# for bit those of the run without them (metrics.jsonl's losses and gradient norms, the
# final checkpoint's parameters); with 0 none is printed; a negative interval is one
# error line naming the key.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
# 2 layers over 2 micro-batches of 4,096 tokens: a step takes a tenth of a second or more
# anywhere, against an interval of 10 ms
args=($(model_keys 64 128 2 4 2) --data.seq_len 4096 --train.micro_batches 2 --train.steps 2 --train.threads 1
      --checkpoint.every 0)
"$LCT" train "${args[@]}" --train.heartbeat_s 0.01 --checkpoint.dir beat > beat.log 2>&1 || { cat beat.log; fail "run with a heartbeat"; }
"$LCT" train "${args[@]}" --train.heartbeat_s 0 --checkpoint.dir quiet > quiet.log 2>&1 || { cat quiet.log; fail "run without"; }
line='^step [12]: (starting|forward|recompute|backward|loss)(, layer [12] of 2)?(, micro-batch [12] of 2)? \| [0-9]+% of the step.s FLOPs \| [0-9.]+ (s|min|h) in(, about [0-9.]+ (s|min|h) to go)?$'
beats=$(grep -cE "$line" beat.log || true)
[[ $beats -ge 2 ]] || { cat beat.log; fail "$beats heartbeat lines in two steps of over 0.1 s at 0.01 s"; }
grep -qE "^step 1: (forward|backward), layer [12] of 2, micro-batch [12] of 2 \| [0-9]+% " beat.log \
  || { cat beat.log; fail "no line naming a layer and micro-batch"; }
# with train.heartbeat_s = 0, not one heartbeat line
[[ $(grep -cE '^step [0-9]+:' quiet.log || true) -eq 0 ]] || { cat quiet.log; fail "heartbeat lines with train.heartbeat_s = 0"; }
/usr/bin/python3 - <<'PY' || fail "results differ with a heartbeat"
import json, h5py, numpy as np
runs = [[json.loads(l) for l in open(f"{d}/metrics.jsonl")] for d in ("beat", "quiet")]
assert [(r["loss"], r["grad_norm"]) for r in runs[0]] == [(r["loss"], r["grad_norm"]) for r in runs[1]], runs
a, b = h5py.File("beat/step_00000002.h5", "r"), h5py.File("quiet/step_00000002.h5", "r")
names = []  # the parameters and optimizer state (config and metrics hold the folder and timings)
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n != "config" and not n.startswith("metrics") else None)
assert len(names) > 20 and all(np.array_equal(a[n][()], b[n][()]) for n in names), names
PY
echo "ok   $beats heartbeat lines in 2 steps; losses, gradient norms and parameters as without"
# under mpirun (whose ranks write to a pseudo-terminal) rank 0 prints plain lines, never
# the terminal's in-place rewrites, and the other ranks none
timeout 120 $MPIRUN -np 2 "$LCT" train "${args[@]}" --parallel.pp 2 --train.heartbeat_s 0.01 \
  --checkpoint.dir beat_pp > beat_pp.log 2>&1 || { cat beat_pp.log; fail "pp = 2 run with a heartbeat"; }
grep -qE "$line" beat_pp.log || { cat beat_pp.log; fail "no heartbeat line under mpirun"; }
! grep -q $'\r' beat_pp.log && ! grep -q $'\e' beat_pp.log || { cat -A beat_pp.log | head; fail "terminal rewrites under mpirun"; }
echo "ok   under mpirun: $(grep -cE "$line" beat_pp.log) plain heartbeat lines from rank 0"
err=$("$LCT" train "${args[@]}" --train.heartbeat_s -1 --checkpoint.dir bad 2>&1 >/dev/null) && fail "accepted -1"
[[ $err == *"train.heartbeat_s must be >= 0"* && $(grep -c . <<< "$err") -eq 1 && ! -e bad ]] || fail "-1: '$err'"
echo "ok   train.heartbeat_s = -1 refused in one line"
echo "heartbeat: all passed"
