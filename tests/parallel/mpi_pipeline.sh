#!/usr/bin/env bash
# Pipeline parallelism over MPI against the single-process run on the same data:
#   - pp = 2 and pp = 4, and dp = 2 x pp = 2, with 1, 4 and 8 micro-batches, causal and
#     DCA attention, untied and tied embeddings: 10 SGD steps, losses and parameters
#     within compare_runs.py's float32 bounds of the single process;
#   - AdamW (eps 1e-8) under dp = 2 x pp = 2 against dp = 2 alone, untied: the pipeline
#     adds no rounding of its own, so the two agree bit for bit (AdamW against one process
#     would amplify the dp sum's last-bit differences of near-zero gradients, see
#     compare_runs.py);
#   - GPipe equals 1F1B; uneven stages (parallel.pp_layers) are exact too;
#   - a pp = 2 checkpoint resumes under pp = 1 and dp = 2, and a pp = 1 one under pp = 2,
#     ending equal to the uninterrupted single-process run;
#   - invalid layouts: one error line, clean exit, no hang; a killed stage ends the job.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

# 4 layers (pp = 4 gets one each)
MODEL="$(model_keys 32 48 4 4 2) $SEQ128_DCA --train.threads 1 --train.warmup_steps 3"

train() {  # dir ranks micro_batches steps [extra args]
  local dir=$1 np=$2 mb=$3 steps=$4
  shift 4
  run_train "$dir" "$np" --train.micro_batches "$mb" --train.steps "$steps" "$@"
}

for kernel in causal dca; do
  for tied in false true; do
    opts="$SGD --attention.kernel $kernel --model.tie_word_embeddings $tied"
    tag="${kernel}_tied_$tied"
    # causal, tied: the runs keep step 5 too, which the checkpoint moves below resume
    [ "$tag" = causal_tied_true ] && opts="$opts --checkpoint.every 5"
    for m in 1 4 8; do
      # (m and 2m overlap between the loop's rounds: a reference is trained once)
      [ -d "ref_${tag}_m$m" ] || train "ref_${tag}_m$m" 0 "$m" 10 $opts
      [ -d "ref_${tag}_m$((2 * m))" ] || train "ref_${tag}_m$((2 * m))" 0 "$((2 * m))" 10 $opts
      train "pp2_${tag}_m$m" 2 "$m" 10 $opts --parallel.pp 2
      compare "pp=2 m=$m $kernel tied=$tied" "pp2_${tag}_m$m" "ref_${tag}_m$m"
      train "pp4_${tag}_m$m" 4 "$m" 10 $opts --parallel.pp 4
      compare "pp=4 m=$m $kernel tied=$tied" "pp4_${tag}_m$m" "ref_${tag}_m$m"
      train "dp2pp2_${tag}_m$m" 4 "$m" 10 $opts --parallel.pp 2 --parallel.dp 2
      compare "dp=2 x pp=2 m=$m $kernel tied=$tied vs one process" "dp2pp2_${tag}_m$m" "ref_${tag}_m$((2 * m))"
    done
  done
  # AdamW: dp = 2 x pp = 2 against dp = 2 alone, the same sums in the same order (untied:
  # a tied embedding's gradient adds the head's part from the last stage in another order)
  train "adam_dp2pp2_$kernel" 4 4 10 --attention.kernel "$kernel" --parallel.pp 2 --parallel.dp 2
  train "adam_dp2_$kernel" 2 4 10 --attention.kernel "$kernel" --parallel.dp 2
  compare "AdamW dp=2 x pp=2 $kernel vs dp=2" "adam_dp2pp2_$kernel" "adam_dp2_$kernel" 0 0
done
grep -q "pipeline: 4 stages (layers 0-0, 1-1, 2-2, 3-3), schedule 1f1b" pp4_causal_tied_false_m8.log
grep -q "bubble .* | theory 27.3%" pp4_causal_tied_false_m8.log   # (4-1)/(8+4-1)
grep -q '"bubble_theoretical"' pp2_causal_tied_false_m4/metrics.jsonl
h5ls pp2_causal_tied_false_m4/step_00000010.h5/metrics | grep -q bubble_fraction

# GPipe gives the same result as 1F1B, and holds all m micro-batches on stage 0
train gpipe4 4 8 10 $SGD --parallel.pp 4 --parallel.pp_schedule gpipe --model.tie_word_embeddings true
compare "pp=4 m=8 gpipe vs single process" gpipe4 ref_causal_tied_true_m8
compare "pp=4 m=8 gpipe vs 1f1b" gpipe4 pp4_causal_tied_true_m8 0 0
# uneven stages
train uneven 2 4 10 $SGD --parallel.pp 2 --parallel.pp_layers "[1, 3]" --attention.kernel dca
grep -q "pipeline: 2 stages (layers 0-0, 1-3)" uneven.log
compare "pp=2 layers [1, 3] dca" uneven ref_dca_tied_false_m4

# checkpoints move between layouts (step 5 of 10 of the pp = 2 and the one-process run
# above, causal and tied; the same 4 sequences per step)
pp_ck=pp2_causal_tied_true_m4 one_ck=ref_causal_tied_true_m4
mkdir -p to_pp1 to_dp2 && cp $pp_ck/step_00000005.h5 to_pp1/ && cp $pp_ck/step_00000005.h5 to_dp2/
train to_pp1 0 4 10 $SGD --train.resume auto --model.tie_word_embeddings true
compare "pp=2 checkpoint resumed under pp=1" to_pp1 ref_causal_tied_true_m4
train to_dp2 2 2 10 $SGD --train.resume auto --parallel.dp 2 --model.tie_word_embeddings true
compare "pp=2 checkpoint resumed under dp=2" to_dp2 ref_causal_tied_true_m4
mkdir -p to_pp2 && cp $one_ck/step_00000005.h5 to_pp2/
train to_pp2 2 4 10 $SGD --train.resume auto --parallel.pp 2 --model.tie_word_embeddings true
compare "pp=1 checkpoint resumed under pp=2" to_pp2 ref_causal_tied_true_m4

# invalid layouts: one message (from rank 0), non-zero exit, quickly
expect_layout_error 3 "parallel.pp = 3 must divide model.num_hidden_layers = 4" --parallel.pp 3
expect_layout_error 2 "parallel.pp_layers has 3 entries but parallel.pp = 2" --parallel.pp 2 --parallel.pp_layers "[1, 1, 2]"
expect_layout_error 2 "parallel.pp_layers sums to 5 but model.num_hidden_layers = 4" --parallel.pp 2 --parallel.pp_layers "[2, 3]"
expect_layout_error 2 "parallel.pp_schedule: unknown pipeline schedule 'zigzag'" --parallel.pp 2 --parallel.pp_schedule zigzag

# a rank killed mid-run ends the job with a message, within seconds
expect_job_ends_when_a_rank_dies 2 --parallel.pp 2 --train.micro_batches 4
echo "mpi_pipeline: all passed"
