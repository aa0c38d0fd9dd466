#!/usr/bin/env bash
# issue 87: a SIGTERM that arrives while lct train writes a periodic checkpoint stops the
# run right after that checkpoint: no further step is trained, the checkpoint is complete
# (lct inspect verifies it), no temporary is left, the exit is 143, and the run resumes
# from it to the uninterrupted run's final loss. The signal arrives while the checkpoint's
# temporary (step_*.h5.lct-XXXXXX) exists: the run is frozen (SIGSTOP) once it appears,
# signalled, and let go (SIGCONT). (Before, the ranks agreed on the stop flag only in the
# next step's all-reduce: the run trained one more whole step, then checkpointed again.)
set -euo pipefail
LCT=$1
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
source "$(dirname "$0")/signal_common.sh"     # signal_mid_write, no_temporaries (and nullglob)

# The default model (3M parameters: 36 MB checkpoints with AdamW's moments) on 256-token
# sequences, a checkpoint every step: its write is a good part of each step.
steps=6
args=(--data.seq_len 256 --train.steps $steps --train.warmup_steps 2 --train.threads 1)
"$LCT" train "${args[@]}" --checkpoint.every 0 --checkpoint.dir full > full.log 2>&1 || { cat full.log; fail "uninterrupted run"; }

signal_mid_write TERM "run/step_*.h5.lct-*" run.log "$LCT" train "${args[@]}" --checkpoint.every 1 --checkpoint.dir run
[[ -n $caught ]] || { cat run.log; fail "no checkpoint's temporary caught (rc $rc)"; }
name=$(basename "$caught")
n=$((10#${name:5:8}))  # step_XXXXXXXX.h5.lct-...
ckpt=run/$(printf "step_%08d.h5" "$n")
((n < steps)) || fail "only the final checkpoint's write was caught (step $n)"
[[ $rc -eq 143 ]] || { cat run.log; fail "exit $rc after SIGTERM (want 143)"; }
grep -q "stopped by signal 15 after step $n; checkpoint: $ckpt\$" run.log ||
  { cat run.log; fail "SIGTERM during the write of checkpoint $n did not stop the run right after it"; }
rows=$(wc -l < run/metrics.jsonl)
[[ $rows -eq $n ]] || fail "metrics.jsonl has $rows rows: a step after the checkpoint of step $n was trained"
written=(run/step_*.h5)
((${#written[@]} > 0)) || fail "no checkpoint in run/"
[[ ${written[-1]} == "$ckpt" ]] || fail "newest checkpoint is ${written[-1]}, want $ckpt"
no_temporaries "run/*.lct-*" "train after SIGTERM"
"$LCT" inspect "$ckpt" > inspect.txt || { cat inspect.txt; fail "$ckpt does not verify"; }
echo "ok   SIGTERM during the write of $name -> stopped after step $n at $ckpt (exit 143), $rows metrics rows"

"$LCT" train "${args[@]}" --checkpoint.every 1 --checkpoint.dir run --train.resume auto > resume.log 2>&1 ||
  { cat resume.log; fail "resume"; }
grep -q "resumed at step $n (" resume.log || { cat resume.log; fail "did not resume at step $n"; }
last_loss() { "$LCT" inspect --json "$1" | /usr/bin/python3 -c "import json,sys; print(repr(json.load(sys.stdin)['metrics']['last_loss']))"; }
final=$(printf "step_%08d.h5" "$steps")
a=$(last_loss "full/$final")
b=$(last_loss "run/$final")
[[ "$a" == "$b" ]] || fail "final loss $b after the stop and resume != $a uninterrupted"
[[ $(wc -l < run/metrics.jsonl) -eq $steps ]] || fail "metrics.jsonl does not have $steps rows after the resume"
echo "ok   resumed from step $n: final loss $a, as the uninterrupted run"
echo "signal_checkpoint: all passed"
