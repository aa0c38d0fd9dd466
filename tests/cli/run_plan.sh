#!/usr/bin/env bash
# The run plan end to end (src/train/run_plan.h):
#   1. lct train and lct simulate accept and refuse the same layouts: one list, each
#      layout given to `lct train --dry-run` under mpirun -np N and to
#      `lct simulate --ranks N` (analytic costs, so nothing is timed), and both must
#      agree on accept or refuse, with the same message when they refuse;
#   2. --dry-run prints what training runs: under CAD with pp = 2 the schedule is ticks
#      whatever parallel.pp_schedule says, and the log of a real run says the same;
#   3. --dry-run refuses data that training refuses (token ids beyond model.vocab_size).
LCT=$1
source "$(dirname "$0")/../parallel/mpi_common.sh"
MODEL="--model.hidden_size 32 --model.intermediate_size 64 --model.num_attention_heads 4
       --model.num_key_value_heads 2 --model.vocab_size 128 --data.seq_len 64 --data.max_doc_len 64
       --train.micro_batches 2"
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# verdict RANKS ARGS...: "ok" or the error line of each command
train_verdict() {
  local np=$1
  shift
  local out
  if out=$(timeout 60 $MPIRUN -np "$np" "$LCT" train --dry-run $MODEL --checkpoint.dir dry "$@" 2>&1); then
    echo ok
  else
    echo "$out" | grep "lct: error" | head -1 | sed 's/^lct: error: //'
  fi
}
simulate_verdict() {
  local np=$1
  shift
  local out
  if out=$("$LCT" simulate --ranks "$np" --steps 1 --tflops 1 $MODEL "$@" 2>&1); then
    echo ok
  else
    echo "$out" | grep "lct: error" | head -1 | sed "s/^lct: error: //; s/^lct simulate --ranks $np: //"
  fi
}

# RANKS|ARGS, accepted and refused alike
layouts=(
  "2|"
  "2|--parallel.pp 2"
  "2|--parallel.cp 2"
  "2|--attention.placement cad"
  "2|--attention.placement cad --attention.cad_pingpong true"
  "2|--attention.placement cad --parallel.pp 2"
  "2|--attention.placement cad --parallel.pp 2 --parallel.pp_schedule gpipe"
  "2|--attention.placement cad --parallel.cp 2"
  "2|--parallel.dp_balance packing"
  "4|--parallel.dp_balance packing --parallel.pp 2"
  "4|--parallel.pp 2 --parallel.cp 2"
  "4|--parallel.pp 2 --parallel.pp_layers [1,3]"
  "4|--attention.placement cad --parallel.pp 2 --parallel.pp_layers [1,3]"
  "2|--parallel.dp_balance packing --attention.placement cad"
  "2|--parallel.dp_balance packing --parallel.cp 2"
  "3|--parallel.dp 2"
  "3|--parallel.cp 3"
  "2|--parallel.pp 3"
  "2|--model.rope_scaling dynamic --model.rope_original_length 64 --parallel.cp 2"
  "2|--model.rope_scaling dynamic --model.rope_original_length 64 --parallel.dp 1 --parallel.cp -1"
)
accepted=0
refused=0
for entry in "${layouts[@]}"; do
  np=${entry%%|*}
  args=${entry#*|}
  # shellcheck disable=SC2086  # the layout's arguments are words
  t=$(train_verdict "$np" $args)
  # shellcheck disable=SC2086
  s=$(simulate_verdict "$np" $args)
  if [ "$t" != "$s" ]; then
    fail "-np $np $args: train says '$t', simulate says '$s'"
  else
    [ "$t" = ok ] && accepted=$((accepted + 1)) || refused=$((refused + 1))
    echo "ok   -np $np $args: both ${t:0:90}"
  fi
done
# the rule is checked on the resolved layout: parallel.cp = -1 inferred as 2 is refused too
for cp in 2 -1; do
  t=$(train_verdict 2 --model.rope_scaling dynamic --model.rope_original_length 64 --parallel.dp 1 --parallel.cp $cp)
  [[ $t == "model.rope_scaling = dynamic rebuilds RoPE"*"parallel.cp = 2"* ]] ||
    fail "dynamic RoPE at parallel.cp = $cp on 2 ranks: '$t'"
done
[ "$accepted" -ge 8 ] && [ "$refused" -ge 5 ] || fail "the list should hold both kinds: $accepted accepted, $refused refused"

# 2. --dry-run prints the schedule that runs
out=$($MPIRUN -np 2 "$LCT" train --dry-run $MODEL --checkpoint.dir dry --attention.placement cad \
      --parallel.pp 2 --parallel.pp_schedule 1f1b 2>&1) || fail "dry run failed: $out"
grep -q "attention placement cad (ping-pong nano-batches; attention.cad_pingpong = auto: on under pipeline ticks), pipeline schedule ticks: CAD with pp > 1 runs same-phase ticks (parallel.pp_schedule = 1f1b is not used)" <<< "$out" \
  || fail "--dry-run does not print the ticks schedule and the lanes that CAD with pp = 2 runs: $out"
run_train ran 2 --train.steps 1 --attention.placement cad --attention.cad_profile pairs --parallel.pp 2 \
  --parallel.pp_schedule 1f1b
grep -q "schedule ticks" ran.log || fail "the run's log does not name the ticks schedule"
grep -q "ping-pong nano-batches (attention.cad_pingpong = auto: on under pipeline ticks)" ran.log \
  || fail "the run's log does not name the lanes"
echo "ok   --dry-run and the run both name the ticks schedule and the ping-pong lanes under CAD with pp = 2"

# 3. the data is checked as training checks it
printf 'the data has bytes beyond 128: \xc3\xa9' > text.txt
for cmd in "train --dry-run" "train"; do
  # shellcheck disable=SC2086
  out=$(timeout 60 "$LCT" $cmd $MODEL --checkpoint.dir vocab_dry --data.source text --data.path text.txt 2>&1)
  rc=$?
  [ "$rc" = 1 ] && grep -q "model.vocab_size (128) is smaller than the data's vocabulary (256" <<< "$out" \
    || fail "lct $cmd does not refuse a vocabulary beyond model.vocab_size (rc $rc): $out"
done
[ ! -e vocab_dry ] || fail "a refused run left checkpoint.dir behind"
echo "ok   --dry-run and train both refuse text data beyond model.vocab_size"

[ "$failed" = 0 ] && echo "run plan: all checks passed"
exit "$failed"
