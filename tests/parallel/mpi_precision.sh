#!/usr/bin/env bash
# train.precision = bf16 (compute/gemm.h) on every layout, and checkpoints that stay
# precision-free:
#   - dp = 2, pp = 2, cp = 2 (ring, all-gather and Ulysses), cp = 4 (hybrid 2 x 2 and
#     double ring 2 x 2) and CAD on 2 ranks, all bf16, match the bf16 single-process run
#     for 6 SGD steps within the bf16 bounds below;
#   - context parallelism and CAD send K and V (Ulysses: Q, K, V, O, dO) in bf16, the
#     pipeline its activations and gradients (the bytes below);
#   - a bf16 run is not the fp32 run (its losses differ beyond fp32's bounds);
#   - an fp32 checkpoint resumes in bf16 and a bf16 checkpoint resumes in fp32.
#
# The bounds (loss 1e-3, parameters 6e-3, instead of fp32's 1e-6 / 1e-5; see
# compare_runs.py for those): two layouts compute float32 sums in another order, so a
# value differs by at most about n u = 1.5e-5 of its terms' magnitudes (n <= 256, u =
# 2^-24). Rounded to bf16 (spacing 2^-8 = 3.9e-3), such a value lands on the other side
# of a rounding boundary with probability at most 1.5e-5 / 3.9e-3 = 4e-3, and then moves
# by up to 3.9e-3 of itself; a sum of such operands moves by about sqrt(4e-3) x 3.9e-3 =
# 2.5e-4 of its terms' magnitudes. A bf16 run rounds the results of such sums again
# before the next ones (Q, K and V in the attention kernel; the MLP's gate and up before
# SwiGLU): a value off by 2.5e-4 flips with probability 2.5e-4 / 3.9e-3 = 0.064, and the
# sums after it move by about sqrt(0.064) x 3.9e-3 = 1e-3. That bounds the loss; the
# gradients too, and SGD adds them up: six updates, each below the tensor's largest
# magnitude at the tests' learning rates (compare_runs.py), each off by up to 1e-3 of it,
# give 6e-3 for the parameters.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

MODEL="$(model_keys 64 96 2 4 2) --data.seq_len 256
  --data.max_doc_len 256 --train.threads 1 --train.warmup_steps 3 $SGD"
BF16=(--train.precision bf16)
SIX=(--train.steps 6)
BOUND="1e-3 6e-3"

run_train one 0 "${SIX[@]}" --train.micro_batches 2 "${BF16[@]}"
grep -q "precision bf16 (linear layers" one.log || { cat one.log; echo "FAIL: the log does not say bf16"; exit 1; }
run_train one_fp32 0 "${SIX[@]}" --train.micro_batches 2
if compare "bf16 vs fp32 (must differ)" one one_fp32 > differ.txt; then
  cat differ.txt
  echo "FAIL: the bf16 run is within fp32's bounds of the fp32 run"
  exit 1
fi
echo "ok   bf16 differs from fp32 beyond fp32's bounds"

run_train dp2 2 "${SIX[@]}" --train.micro_batches 1 "${BF16[@]}"
compare "bf16 dp=2 vs one process" dp2 one $BOUND
# A bf16 pipeline sends the residual stream and its gradient in bf16 (the bytes below):
# the second stage's input moves by at most 2^-9 = 2e-3 of each value, so the sums after
# it by at most 2e-3 of their terms' magnitudes (not the flip probabilities above: every
# value moves), which bounds the loss; each gradient, rounded once more on its way back,
# by 2e-3 + 2e-3 + the 1e-3 above = 5e-3 of the largest magnitude, and six SGD updates
# give 3e-2 for the parameters.
run_train pp2 2 "${SIX[@]}" --parallel.pp 2 --train.micro_batches 2 "${BF16[@]}"
compare "bf16 pp=2 vs one process" pp2 one 2e-3 3e-2
run_train pp2_fp32 2 "${SIX[@]}" --parallel.pp 2 --train.micro_batches 2
/usr/bin/python3 - <<'PY'
import json
def sent(run):
    return [json.loads(line)["pipeline_bytes_sent"] for line in open(f"{run}/metrics.jsonl")]
a, b = sent("pp2"), sent("pp2_fp32")
# each rank sends T x C values per micro-batch: activations forward (stage 0), gradients
# back (stage 1); 2 micro-batches of 256 tokens, C = 64; mean over the two ranks
assert a == [2 * 256 * 64 * 2] * 6 and b == [2 * 256 * 64 * 4] * 6, (a, b)
print(f"ok   pp=2: bf16 sends half of fp32's pipeline bytes ({a[0]:.0f} vs {b[0]:.0f} per rank and step)")
PY
grep -q "pipe 0.06 MiB sent/rank" pp2.log || { grep "step" pp2.log | head -3; echo "FAIL: the log does not give the pipeline's bytes"; exit 1; }
run_train cp2 2 "${SIX[@]}" --parallel.cp 2 --train.micro_batches 2 "${BF16[@]}"
compare "bf16 cp=2 ring vs one process" cp2 one $BOUND
run_train cp2ag 2 "${SIX[@]}" --parallel.cp 2 --parallel.cp_comm allgather --train.micro_batches 2 "${BF16[@]}"
compare "bf16 cp=2 all-gather vs one process" cp2ag one $BOUND
run_train cp2u 2 "${SIX[@]}" --parallel.cp 2 --parallel.cp_comm ulysses --train.micro_batches 2 "${BF16[@]}"
compare "bf16 cp=2 Ulysses vs one process" cp2u one $BOUND
run_train cp4h 4 "${SIX[@]}" --parallel.cp 4 --parallel.cp_comm hybrid --train.micro_batches 2 "${BF16[@]}"
compare "bf16 cp=4 hybrid 2 x 2 vs one process" cp4h one $BOUND
run_train cp4d 4 "${SIX[@]}" --parallel.cp 4 --parallel.cp_comm double_ring --train.micro_batches 2 "${BF16[@]}"
compare "bf16 cp=4 double ring 2 x 2 vs one process" cp4d one $BOUND

# K and V travel in bf16 in a bf16 run; dK/dV stay fp32. Per layer, with r the K + V
# elements of the rows a rank's peer reads of it and a those it reads of the peer, at
# cp = 2 the ring and the all-gather both send r forward, r again backward, and the
# dK/dV of a back (fp32: 4r + 4r + 4a bytes; bf16: 2r + 2r + 4a): the bf16 run saves
# exactly half of the K and V bytes, 4r, a multiple of 4 x K + V's row width
# (2 x 2 KV heads x 16), and sends more than half of fp32's. (mpi_step_model checks
# every rank's bytes against the simulator's exact count.)
# Ulysses (4 heads, 2 KV heads, head dim 16, over 2 ranks) sends per row to the other
# rank: Q, K, V (64 elements) forward and O + LSE (34, fp32) back; Q, K, V, O, dO (128)
# + LSE (2, fp32) backward and dQ, dK, dV (64, fp32) back: fp32 4 x 292 = 1168 bytes,
# bf16 2 x 192 + 4 x 100 = 784, 49/73 of it.
run_train cp2_fp32 2 "${SIX[@]}" --parallel.cp 2 --train.micro_batches 2
run_train cp2ag_fp32 2 "${SIX[@]}" --parallel.cp 2 --parallel.cp_comm allgather --train.micro_batches 2
run_train cp2u_fp32 2 "${SIX[@]}" --parallel.cp 2 --parallel.cp_comm ulysses --train.micro_batches 2
/usr/bin/python3 - <<'PY'
import json
def sent(run):
    return [json.loads(line)["exchange_bytes_sent"] for line in open(f"{run}/metrics.jsonl")]
from fractions import Fraction
for bf16, fp32 in (("cp2", "cp2_fp32"), ("cp2ag", "cp2ag_fp32")):
    a, b = sent(bf16), sent(fp32)
    row = 2 * 2 * 16  # K + V elements of a row
    assert all(0 < x < y < 2 * x and (y - x) % (4 * row) == 0 for x, y in zip(a, b)), (bf16, a, fp32, b)
    print(f"ok   {bf16}: bf16 sends {a[0] / b[0]:.3f} of fp32's bytes ({a[0]} vs {b[0]} per step), K and V at half")
ratio = Fraction(49, 73)
a, b = sent("cp2u"), sent("cp2u_fp32")
assert all(x > 0 and x * ratio.denominator == y * ratio.numerator for x, y in zip(a, b)), ("cp2u", a, "cp2u_fp32", b)
print(f"ok   cp2u: bf16 sends {float(ratio):.3f} of fp32's bytes ({a[0]} vs {b[0]} per step)")
PY
run_train cad2 2 "${SIX[@]}" --attention.placement cad --attention.cad_profile pairs --train.micro_batches 1 "${BF16[@]}"
compare "bf16 CAD dp=2 vs one process" cad2 one $BOUND

# CAD carries Q, K, V, O and dO in bf16 in a bf16 run (the LSE and the gradients, dQ,
# dK and dV, stay fp32). With the same plans in both precisions (rank speeds not
# learnt), every row a message carries saves half the bytes of those arrays: per step
# the bf16 run sends fewer bytes, and the difference is a whole number of bf16 halves
# of rows (a multiple of 2 x the smaller width, kvd = KV x hd = 2 x 16).
CAD_SAME_PLANS=(--attention.placement cad --attention.cad_profile pairs --attention.cad_rank_speeds false
  --train.micro_batches 1)
run_train cad2_fixed 2 "${SIX[@]}" "${CAD_SAME_PLANS[@]}" "${BF16[@]}"
run_train cad2_fixed_fp32 2 "${SIX[@]}" "${CAD_SAME_PLANS[@]}"
/usr/bin/python3 - <<'PY'
import json
def sent(run):
    return [json.loads(line)["exchange_bytes_sent"] for line in open(f"{run}/metrics.jsonl")]
a, b = sent("cad2_fixed"), sent("cad2_fixed_fp32")
kvd = 2 * 16
# (a step whose plan moves nothing sends nothing in either)
assert all((x == y == 0) or (0 < x < y and (y - x) % (2 * kvd) == 0) for x, y in zip(a, b)), (a, b)
assert sum(a) > 0, a
print(f"ok   CAD: bf16 sends {sum(a) / sum(b):.3f} of fp32's bytes ({sum(a):.0f} vs {sum(b):.0f} over 6 steps), "
      f"Q, K, V, O and dO at half")
PY

# checkpoints are precision-free: resume across precisions, both ways
run_train fp32_ckpt 0 --train.steps 3 --checkpoint.every 3
run_train fp32_ckpt 0 "${SIX[@]}" --train.resume fp32_ckpt/step_00000003.h5 "${BF16[@]}"
grep -q "resuming with train.precision = bf16 (checkpoint had fp32)" fp32_ckpt.log \
  || { cat fp32_ckpt.log; echo "FAIL: resume in bf16 does not say so"; exit 1; }
grep -q "resumed at step 3" fp32_ckpt.log || { cat fp32_ckpt.log; echo "FAIL: no resume"; exit 1; }
run_train bf16_ckpt 0 --train.steps 3 --checkpoint.every 3 "${BF16[@]}"
run_train bf16_ckpt 0 "${SIX[@]}" --train.resume bf16_ckpt/step_00000003.h5
grep -q "resuming with train.precision = fp32 (checkpoint had bf16)" bf16_ckpt.log \
  || { cat bf16_ckpt.log; echo "FAIL: resume in fp32 does not say so"; exit 1; }
for run in fp32_ckpt bf16_ckpt; do
  [ "$(wc -l < $run/metrics.jsonl)" = 6 ] || { echo "FAIL: the resumed run $run did not reach step 6"; exit 1; }
done
echo "ok   fp32 checkpoints resume in bf16 and bf16 checkpoints in fp32"
echo "mpi_precision: all checks passed"
