#!/usr/bin/env bash
# lct eval --grads-out must agree with an independent float64 PyTorch implementation
# (scripts/reference_llama.py) on loss and every parameter gradient, rtol 3e-5, on
# packed documents of mixed lengths (including 1-token documents and lengths that
# straddle the attention tiles), for GQA and MHA, tied and untied heads, and on a
# checkpoint written by `lct train`. The tolerance, from the arithmetic: a gradient is
# an fp32 sum over the batch's tokens at the end of the backward chain (the norm weights'
# and the embedding's over all T = 443 tokens of mixed.h5), and fp32 summation of n terms
# is within gamma_n ~ n u = 443 x 2^-24 = 2.6e-5 of the terms' magnitudes in any order;
# norm-wise, errors of random sign stay well inside it (measured up to 1.0e-5, on the first
# layer's norm of the random-weight checkpoint, whose weights of std 1 amplify the
# products' last bits through three layers). A wrong formula moves gradients by far more.
#
# bf16 (lct eval --precision bf16, i.e. train.precision = bf16: every linear layer's
# products and every block product of core attention round their operands to bf16,
# unit roundoff u = 2^-8, and sum in fp32):
#   - against the reference emulating that arithmetic (--bf16: the same products of
#     bf16-rounded operands, summed in float64, and the same rounded values where lct
#     stores or reads them in bf16), on every checkpoint: every tensor within 3e-2, and
#     at most half as far from lct as the plain float64 reference is (the emulation must
#     explain most of bf16's deviation). They cannot agree to fp32's 3e-5: lct's float32
#     values upstream of each rounding differ from float64 in the last bits, which now
#     and then puts an operand on the other side of a bf16 rounding boundary (a 2^-8
#     change), and the random-weight checkpoints (std about 1) amplify that through the
#     layers, the more the more rounding points a path has: 0.6-2.1 % measured, the most
#     on DCA, whose Q is rounded before and after its rotation (their bf16 error against
#     float64 is 8-18 %; the emulation without those roundings is 5.7 % from lct there).
#     A product computed otherwise (an operand left unrounded, a wrong transpose) moves
#     gradients by the bf16 error itself. And the plain float64 reference at fp32's
#     3e-5 must fail: bf16 is really applied.
#   - against the plain float64 reference, every tensor within 5e-2 on the checkpoints
#     that lct trains from its own init (weights of std 0.02, causal and DCA, packed
#     documents).
#
# The reference runs in two processes, not one per step (torch's import costs seconds):
# every checkpoint and batch it makes, then every comparison, each a --jobs file
# (scripts/reference_llama.py), between them every lct run; the checks then read the
# comparisons' outputs in the order they were queued.
set -euo pipefail
LCT=$1
REF=$2
if ! /usr/bin/python3 -c "import torch, h5py" 2>/dev/null; then
  echo "reference_gradients: needs python3-torch and python3-h5py; run scripts/setup.sh --python" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# queue FILE OUT ARGS...: a run of the reference in the jobs file FILE of its phase, its
# output to OUT and its exit code to OUT.rc
queue() { local file=$1; shift; printf '%q ' "$@" >> "$file"; echo >> "$file"; }
run_jobs() {  # file: one process for the file's jobs
  [ -s "$1" ] || return 0
  /usr/bin/python3 "$REF" --jobs "$1" || { echo "FAIL: reference --jobs $1"; exit 1; }
}
rc_of() { cat "$1.rc"; }
make_ref() {  # the reference makes a checkpoint or batch (first phase): args of reference_llama.py
  queue make.jobs "make_$((++made)).txt" "$@"
}
made=0
VERIFY=()  # the checks of the comparisons, run after the comparisons' phase

check() {  # name checkpoint batch
  "$LCT" eval --checkpoint "$2" --batch-file "$3" --grads-out "$1.grads.h5"
  queue compare.jobs "$1.compare.txt" --checkpoint "$2" --batch-file "$3" --compare "$1.grads.h5" --rtol 3e-5
  VERIFY+=("verify_check $1")
}
verify_check() {
  [ "$(rc_of "$1.compare.txt")" = 0 ] || { cat "$1.compare.txt"; echo "FAIL: $1"; exit 1; }
  echo "$1: $(tail -1 "$1.compare.txt")"
}

bf16_eval() {  # name checkpoint batch
  "$LCT" eval --precision bf16 --checkpoint "$2" --batch-file "$3" --grads-out "$1.bf16.h5" > "$1.bf16.txt"
  grep -q "| precision bf16 (" "$1.bf16.txt" || { cat "$1.bf16.txt"; echo "FAIL: $1: eval does not say bf16"; exit 1; }
}
worst_rel() { grep -o 'rel=[0-9.e+-]*' "$1" | cut -d= -f2 | sort -g | tail -1; }
check_bf16() {  # name checkpoint batch: the emulated bf16 arithmetic
  bf16_eval "$@"
  queue compare.jobs "$1.bf16.compare.txt" --bf16 --checkpoint "$2" --batch-file "$3" --compare "$1.bf16.h5" --rtol 3e-2
  queue compare.jobs "$1.fp64.txt" --checkpoint "$2" --batch-file "$3" --compare "$1.bf16.h5" --rtol 3e-5
  VERIFY+=("verify_bf16 $1")
}
verify_bf16() {
  [ "$(rc_of "$1.bf16.compare.txt")" = 0 ] \
    || { cat "$1.bf16.compare.txt"; echo "FAIL: $1 bf16 against the emulated reference"; exit 1; }
  if [ "$(rc_of "$1.fp64.txt")" = 0 ]; then
    echo "FAIL: $1: bf16 gradients are within fp32's tolerance of float64 (is bf16 applied?)"
    exit 1
  fi
  grep -q 'rel=' "$1.fp64.txt" || { cat "$1.fp64.txt"; echo "FAIL: $1: the float64 comparison did not run"; exit 1; }
  local emulated fp64
  emulated=$(worst_rel "$1.bf16.compare.txt")
  fp64=$(worst_rel "$1.fp64.txt")
  awk -v e="$emulated" -v f="$fp64" 'BEGIN { exit !(e <= f / 2) }' \
    || { echo "FAIL: $1: bf16 is $emulated from the emulation, not half its $fp64 from float64"; exit 1; }
  echo "bf16 $1: worst tensor $emulated against emulated bf16 (<= 3e-2 and <= half of), $fp64 against float64"
}
check_bf16_fp64() {  # name checkpoint batch: lct-initialised weights, float64 within 5e-2
  bf16_eval "$@"
  queue compare.jobs "$1.bf16.fp64.txt" --checkpoint "$2" --batch-file "$3" --compare "$1.bf16.h5" --rtol 5e-2
  VERIFY+=("verify_bf16_fp64 $1")
}
verify_bf16_fp64() {
  [ "$(rc_of "$1.bf16.fp64.txt")" = 0 ] || { cat "$1.bf16.fp64.txt"; echo "FAIL: $1 bf16 against float64"; exit 1; }
  echo "bf16 $1: worst tensor $(worst_rel "$1.bf16.fp64.txt") against float64 (<= 5e-2)"
}

# first phase: the reference's checkpoints and batches
make_ref --make-batch mixed.h5 --vocab-size 61 --lengths 7,1,33,2,129,200,70,1 --seed 3
make_ref --make-checkpoint gqa.h5 --vocab-size 61 --hidden-size 32 --intermediate-size 48 \
  --layers 2 --heads 4 --kv-heads 2 --seed 1
make_ref --make-checkpoint mqa_tied.h5 --vocab-size 61 --hidden-size 32 --intermediate-size 40 \
  --layers 3 --heads 4 --kv-heads 1 --rope-theta 500000 --rms-norm-eps 1e-6 --tie-word-embeddings --seed 2
make_ref --make-checkpoint mha.h5 --vocab-size 61 --hidden-size 24 --intermediate-size 32 \
  --layers 1 --heads 2 --kv-heads 2 --seed 4
make_ref --make-batch trained_batch.h5 --vocab-size 96 --lengths 150,3,90,1,64 --seed 5
make_ref --make-batch long.h5 --vocab-size 61 --lengths 100,1,70,37,2,150 --seed 7
make_ref --make-checkpoint dca.h5 --vocab-size 61 --hidden-size 32 --intermediate-size 48 \
  --layers 2 --heads 4 --kv-heads 2 --attention-kernel dca --dca-chunk-size 24 --dca-local-size 6 \
  --dca-mscale 1.1 --dca-mscale-original-length 16 --seed 3
make_ref --make-checkpoint dca_mqa.h5 --vocab-size 61 --hidden-size 32 --intermediate-size 40 \
  --layers 2 --heads 4 --kv-heads 1 --tie-word-embeddings --attention-kernel dca --dca-chunk-size 40 \
  --dca-local-size 8 --seed 6
for scaling in "linear 4" "dynamic 2" "yarn 8"; do
  set -- $scaling
  make_ref --make-checkpoint "rope_$1.h5" --vocab-size 61 --hidden-size 32 --intermediate-size 48 \
    --layers 2 --heads 4 --kv-heads 2 --rope-scaling "$1" --rope-scaling-factor "$2" --rope-original-length 64 --seed 1
done
make_ref --make-checkpoint dca_yarn.h5 --vocab-size 61 --hidden-size 32 --intermediate-size 48 \
  --layers 2 --heads 4 --kv-heads 2 --attention-kernel dca --dca-chunk-size 24 --dca-local-size 6 \
  --rope-scaling yarn --rope-scaling-factor 4 --rope-original-length 32 --seed 3
for ls in "logn causal" "logn_beyond causal" "logn dca"; do
  set -- $ls
  kernel=()
  [ "$2" = dca ] && kernel=(--attention-kernel dca --dca-chunk-size 24 --dca-local-size 6)
  make_ref --make-checkpoint "ls_$1_$2.h5" --vocab-size 61 --hidden-size 32 --intermediate-size 48 \
    --layers 2 --heads 4 --kv-heads 2 "${kernel[@]}" --logit-scaling "$1" --logit-scaling-length 32 --seed 8
done
run_jobs make.jobs
for i in $(seq "$made"); do
  [ "$(rc_of "make_$i.txt")" = 0 ] || { cat "make_$i.txt"; echo "FAIL: the reference's job $i of make.jobs"; exit 1; }
done

# second phase: lct (its evaluations queue the comparisons)
check gqa gqa.h5 mixed.h5
check_bf16 gqa gqa.h5 mixed.h5
check mqa_tied mqa_tied.h5 mixed.h5
check mha mha.h5 mixed.h5
check_bf16 mha_tied mqa_tied.h5 mixed.h5

# a checkpoint written by the trainer itself (after a few AdamW steps)
"$LCT" train --model.vocab_size 96 --model.hidden_size 32 --model.intermediate_size 64 \
  --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2 \
  --data.seq_len 256 --data.max_doc_len 200 --train.steps 3 --checkpoint.dir trained > train.log
check trained trained/step_00000003.h5 trained_batch.h5
# Dual Chunk Attention on documents several times longer than C (C = 24, w = 6,
# chunks of 18 tokens), with both temperature terms, against the reference's dense DCA
# built from the explicit relative-position matrix
check dca dca.h5 long.h5
check_bf16 dca dca.h5 long.h5
check dca_mqa dca_mqa.h5 long.h5
# RoPE scaling (model.rope_scaling) against the reference's own frequencies: position
# interpolation, dynamic NTK (the batch's longest document, 200 tokens, is beyond the
# trained 64, so the base grows) and YaRN (head dim 8: its ramp keeps pair 0, blends
# pair 1 and interpolates pairs 2-3, and the logits carry its temperature), causal and
# under DCA
for scaling in "linear 4" "dynamic 2" "yarn 8"; do
  set -- $scaling
  check "rope_$1" "rope_$1.h5" mixed.h5
  # the same weights evaluated through eval's override of the plain checkpoint give the same loss
  want=$("$LCT" eval --checkpoint "rope_$1.h5" --batch-file mixed.h5 | cut -d'|' -f1)
  got=$("$LCT" eval --checkpoint gqa.h5 --batch-file mixed.h5 --model.rope_scaling "$1" \
        --model.rope_scaling_factor "$2" --model.rope_original_length 64 | cut -d'|' -f1)
  [[ "$want" == "$got" ]] || { echo "FAIL: eval --model.rope_scaling $1 gives '$got', the checkpoint '$want'"; exit 1; }
done
check dca_yarn dca_yarn.h5 long.h5
# and a DCA checkpoint written by the trainer
"$LCT" train --model.vocab_size 96 --model.hidden_size 32 --model.intermediate_size 64 \
  --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2 \
  --attention.kernel dca --attention.dca_chunk_size 30 --attention.dca_local_size 10 \
  --data.seq_len 256 --data.max_doc_len 200 --train.steps 3 --checkpoint.dir trained_dca > train_dca.log
check trained_dca trained_dca/step_00000003.h5 trained_batch.h5
# trained with position interpolation: the key works in training and is kept in the checkpoint
"$LCT" train --model.vocab_size 96 --model.hidden_size 32 --model.intermediate_size 64 \
  --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2 \
  --model.rope_scaling linear --model.rope_scaling_factor 2 \
  --data.seq_len 256 --data.max_doc_len 200 --train.steps 3 --checkpoint.dir trained_linear > train_linear.log
check trained_linear trained_linear/step_00000003.h5 trained_batch.h5
# Logit scaling (attention.logit_scaling): each query's logits times ln(n) / ln(L) (logn,
# below 1 short of L, above it beyond; the 200-token documents cross L = 32) or
# max(1, that) (logn_beyond), causal and under DCA, against the reference's own factors;
# and trained by lct with the key on (the factor in training's backward)
for ls in "logn causal" "logn_beyond causal" "logn dca"; do
  set -- $ls
  check "ls_$1_$2" "ls_$1_$2.h5" long.h5
done
"$LCT" train --model.vocab_size 96 --model.hidden_size 32 --model.intermediate_size 64 \
  --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2 \
  --attention.kernel dca --attention.dca_chunk_size 30 --attention.dca_local_size 10 \
  --attention.logit_scaling logn --attention.logit_scaling_length 64 \
  --data.seq_len 256 --data.max_doc_len 200 --train.steps 3 --checkpoint.dir trained_logn > train_logn.log
check trained_logn trained_logn/step_00000003.h5 trained_batch.h5
check_bf16_fp64 trained_logn trained_logn/step_00000003.h5 trained_batch.h5
# the key acts: the same weights evaluated without it give another loss
with=$("$LCT" eval --checkpoint trained_logn/step_00000003.h5 --batch-file trained_batch.h5 | cut -d'|' -f1)
without=$("$LCT" eval --checkpoint trained_logn/step_00000003.h5 --batch-file trained_batch.h5 \
  --attention.logit_scaling none | cut -d'|' -f1)
[ "$with" != "$without" ] || { echo "FAIL: attention.logit_scaling logn evaluates like none ($with)"; exit 1; }
check_bf16_fp64 trained trained/step_00000003.h5 trained_batch.h5
check_bf16_fp64 trained_dca trained_dca/step_00000003.h5 trained_batch.h5
check_bf16 trained_emulated trained/step_00000003.h5 trained_batch.h5
check_bf16 trained_dca_emulated trained_dca/step_00000003.h5 trained_batch.h5
# Attention masks (attention.mask) through the whole data path: a checkpoint trained by
# lct under each mask (3 AdamW steps) and a batch from lct make-batch under the same
# settings (the packer's prefix_lens or segment_ids, documents of the pretrain mix up to
# 200 tokens: shorter and longer than W, S, B and the prefixes, some cut at a sequence
# boundary), against the reference's dense masks written from the mask definitions and
# its own choice of trained targets (prefix_lm: none inside the prefix; shared_question:
# none across segments), fp32 at 3e-5 (the check above) and bf16 within 5e-2 of float64
MASK_RUN="--model.vocab_size 96 --model.hidden_size 32 --model.intermediate_size 64
  --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2
  --data.seq_len 256 --data.max_doc_len 200 --data.doc_lengths pretrain"
for mask in "sliding_window --attention.window 20" "sink_window --attention.window 16 --attention.sink_tokens 3" \
            "chunked --attention.block_size 24" "prefix_lm --data.prefix_fraction 0.3" \
            "shared_question --data.prefix_fraction 0.2 --data.answers_per_question 3" \
            "block_sparse --attention.block_size 16 --attention.top_blocks 2"; do
  name=mask_${mask%% *}
  "$LCT" train $MASK_RUN --attention.mask $mask --train.steps 3 --checkpoint.dir "$name" > "$name.log"
  "$LCT" make-batch $MASK_RUN --attention.mask $mask --sequences 2 --first 3 --out "$name.batch.h5" > /dev/null
  check "$name" "$name/step_00000003.h5" "$name.batch.h5"
  check_bf16_fp64 "$name" "$name/step_00000003.h5" "$name.batch.h5"
  # the mask really acts: evaluated as causal, the same weights and batch give another loss
  masked=$("$LCT" eval --checkpoint "$name/step_00000003.h5" --batch-file "$name.batch.h5" | cut -d'|' -f1)
  causal=$("$LCT" eval --checkpoint "$name/step_00000003.h5" --batch-file "$name.batch.h5" \
    --attention.mask causal | cut -d'|' -f1)
  [ "$masked" != "$causal" ] || { echo "FAIL: $name evaluates like causal ($masked)"; exit 1; }
done
# third phase: every comparison in one process, then their checks in the order queued
run_jobs compare.jobs
for v in "${VERIFY[@]}"; do $v; done
echo "reference_gradients: all passed"
