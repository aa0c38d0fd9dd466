#!/usr/bin/env bash
# Context parallelism over MPI against the single-process run on the same data:
#   - cp = 2 and cp = 4, every exchange (ring, all-gather, Ulysses; at cp = 4 also the
#     hybrid 2 x 2 and the double ring 2 x 2), zigzag and contiguous splits, causal and
#     DCA attention, on the `pretrain` length mix (many 1-token documents and documents
#     shorter than 2 cp) and on documents spanning the whole sequence; tied embeddings
#     for the new exchanges; and dp = 2 x cp = 2 and pp = 2 x cp = 2 (ring, all-gather
#     and Ulysses): 10 SGD steps, losses and parameters within compare_runs.py's float32
#     bounds of the single process. Ulysses at cp = 4 with 2 KV heads replicates each
#     KV head on two ranks;
#   - a checkpoint written under cp = 2 resumes under cp = 1 and the reverse, and one
#     written under Ulysses resumes under the ring and the reverse;
#   - invalid settings: one error line, clean exit; a killed rank ends the job.
#
# Optimizer: SGD, whose parameters are linear in the gradients. Context parallelism
# reorders every weight gradient's sum over tokens (a rank's rows are chunks of many
# documents) and merges attention over key blocks in another order, so no run of another
# layout computes the same sums in the same order; AdamW (eps 1e-8) would turn their
# last-bit differences in near-zero gradient elements into parameter differences no
# rounding bound contains (compare_runs.py), so it is not compared here.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

# DCA chunk 40 / local 8 (chunks of 32 tokens) on documents up to 128 tokens
MODEL="$(model_keys 32 48 2 4 2)
  --train.threads 1 --train.warmup_steps 3
  --attention.dca_chunk_size 40 --attention.dca_local_size 8"

train() {  # dir ranks steps [extra args]; MB micro-batches (default 2), SEQ tokens (128)
  local dir=$1 np=$2 steps=$3
  shift 3
  run_train "$dir" "$np" --train.steps "$steps" --train.micro_batches "${MB:-2}" \
    --data.seq_len "${SEQ:-128}" --data.max_doc_len "${SEQ:-128}" "$@"
}

for lengths in pretrain fixed; do
  for kernel in causal dca; do
    data="--data.doc_lengths $lengths --attention.kernel $kernel"
    # the default data and kernel also keep step 5, which the checkpoint moves below resume
    [ "$lengths/$kernel" = pretrain/causal ] && data="$data --checkpoint.every 5"
    ref="ref_${lengths}_$kernel"
    train "$ref" 0 10 $SGD $data
    for cp in 2 4; do
      comms="ring allgather ulysses"
      [ "$cp" = 4 ] && comms="$comms hybrid double_ring"
      for comm in $comms; do
        for split in zigzag contiguous; do
          [ "$lengths" = fixed ] && [ "$split" = contiguous ] && continue
          run="cp${cp}_${comm}_${split}_${lengths}_$kernel"
          train "$run" "$cp" 10 $SGD $data --parallel.dp 1 --parallel.cp "$cp" \
            --parallel.cp_comm "$comm" --parallel.cp_split "$split"
          compare "cp=$cp $comm $split, $lengths lengths, $kernel" "$run" "$ref"
        done
      done
    done
  done
done
# tied embeddings; and attention.logit_scaling, whose query factors follow in-document
# positions, which every shard knows (documents up to 128 tokens cross L = 48)
for variant in "tied|--model.tie_word_embeddings true|ulysses hybrid double_ring" \
               "logn|--attention.logit_scaling logn --attention.logit_scaling_length 48|ring ulysses double_ring"; do
  IFS='|' read -r name extra comms <<< "$variant"
  for kernel in causal dca; do
    data="--data.doc_lengths pretrain --attention.kernel $kernel $extra"
    train "ref_${name}_$kernel" 0 10 $SGD $data
    for comm in $comms; do
      train "cp4_${comm}_${name}_$kernel" 4 10 $SGD $data --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm "$comm"
      compare "cp=4 $comm, $name, $kernel" "cp4_${comm}_${name}_$kernel" "ref_${name}_$kernel"
    done
  done
done
# Beyond 2 x 2: at cp = 6 a double ring's neighbours differ in both directions (inner
# rings of 3, and 3 inner rings of 2), so a block, an outer block or an accumulator sent
# the wrong way would show; and with one KV head the hybrid 2 x 2 and Ulysses at cp = 4
# replicate it over the all-to-all group and sum its dK/dV back
SEQ=144 train ref_cp6 0 10 $SGD --attention.kernel dca
for inner in 2 3; do
  SEQ=144 train "cp6_double_ring_$inner" 6 10 $SGD --attention.kernel dca --parallel.dp 1 --parallel.cp 6 \
    --parallel.cp_comm double_ring --parallel.cp_inner_ring "$inner"
  compare "cp=6 double ring, inner rings of $inner, dca" "cp6_double_ring_$inner" ref_cp6
done
MODEL_KV2=$MODEL
MODEL=${MODEL/--model.num_key_value_heads 2/--model.num_key_value_heads 1}
train ref_kv1 0 10 $SGD --attention.kernel dca
for comm in hybrid ulysses; do
  train "cp4_${comm}_kv1" 4 10 $SGD --attention.kernel dca --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm "$comm"
  compare "cp=4 $comm, one KV head replicated, dca" "cp4_${comm}_kv1" ref_kv1
done
grep -q "heads 4/1" cp4_hybrid_kv1.log
MODEL=$MODEL_KV2
grep -q "exchange ulysses (all-to-all over the group" cp2_ulysses_zigzag_pretrain_causal.log
grep -q "exchange hybrid (all-to-all inside groups of 2, ring of 2 across them)" cp4_hybrid_zigzag_pretrain_dca.log
grep -q "exchange double_ring (inner rings of 2, outer ring of 2)" cp4_double_ring_zigzag_pretrain_dca.log
for comm in ulysses hybrid double_ring; do
  grep -q "MiB sent/rank | exposed" cp4_${comm}_zigzag_pretrain_causal.log
  grep -q '"exchange_bytes_sent"' cp4_${comm}_zigzag_pretrain_causal/metrics.jsonl
  grep -q '"exchange_bytes_per_layer":[1-9]' cp4_${comm}_zigzag_pretrain_causal/metrics.jsonl
  grep -q '"exchange_exposed_ms_per_layer"' cp4_${comm}_zigzag_pretrain_causal/metrics.jsonl
  grep -q "MiB/layer | exposed .* ms/layer" cp4_${comm}_zigzag_pretrain_causal.log
done
grep -q "context parallel: 4 ranks per sequence, split zigzag, exchange ring" cp4_ring_zigzag_pretrain_causal.log
grep -q "MiB sent/rank | exposed" cp2_ring_zigzag_pretrain_causal.log
grep -q '"exchange_exposed_fraction"' cp2_allgather_zigzag_pretrain_dca/metrics.jsonl
h5ls cp2_ring_zigzag_pretrain_dca/step_00000010.h5/metrics | grep -q attention_pairs_max_over_mean

# 8-token sequences over 4 ranks: documents shorter than 2 cp only, so some ranks
# would hold nothing without the fall-back that gives them a token of the fullest rank
SEQ=8 train tiny_ref 0 10 $SGD
SEQ=8 train tiny_cp4 4 10 $SGD --parallel.dp 1 --parallel.cp 4
compare "cp=4 on 8-token sequences of short documents" tiny_cp4 tiny_ref

# with data and pipeline parallelism (4 ranks)
MB=4 train ref_m4 0 10 $SGD --attention.kernel dca
train dp2cp2 4 10 $SGD --attention.kernel dca --parallel.dp 2 --parallel.cp 2
compare "dp=2 x cp=2 ring dca" dp2cp2 ref_m4
train dp2cp2u 4 10 $SGD --attention.kernel dca --parallel.dp 2 --parallel.cp 2 --parallel.cp_comm ulysses
compare "dp=2 x cp=2 ulysses dca" dp2cp2u ref_m4
MB=4 train pp2cp2 4 10 $SGD --attention.kernel dca --parallel.dp 1 --parallel.pp 2 \
  --parallel.cp 2 --parallel.cp_comm allgather --model.tie_word_embeddings true
MB=4 train ref_m4_tied 0 10 $SGD --attention.kernel dca --model.tie_word_embeddings true
compare "pp=2 x cp=2 allgather dca tied" pp2cp2 ref_m4_tied
MB=4 train pp2cp2u 4 10 $SGD --attention.kernel dca --parallel.dp 1 --parallel.pp 2 \
  --parallel.cp 2 --parallel.cp_comm ulysses --model.tie_word_embeddings true
compare "pp=2 x cp=2 ulysses dca tied" pp2cp2u ref_m4_tied

# checkpoints move between cp = 2 and cp = 1 (step 5 of 10, kept by the runs above on the
# default data and kernel: the ring and Ulysses at cp = 2, and one process)
ck_cp2=cp2_ring_zigzag_pretrain_causal ck_u2=cp2_ulysses_zigzag_pretrain_causal ck_cp1=ref_pretrain_causal
mkdir -p to_cp1 && cp $ck_cp2/step_00000005.h5 to_cp1/
train to_cp1 0 10 $SGD --train.resume auto
compare "cp=2 checkpoint resumed under cp=1" to_cp1 ref_pretrain_causal
mkdir -p to_cp2 && cp $ck_cp1/step_00000005.h5 to_cp2/
train to_cp2 2 10 $SGD --train.resume auto --parallel.dp 1 --parallel.cp 2
compare "cp=1 checkpoint resumed under cp=2" to_cp2 ref_pretrain_causal
# ... and between Ulysses and the ring, and from Ulysses to one process
for to in u2_to_ring u2_to_cp1; do mkdir -p $to && cp $ck_u2/step_00000005.h5 $to/; done
train u2_to_ring 2 10 $SGD --train.resume auto --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm ring
compare "Ulysses checkpoint resumed under the ring" u2_to_ring ref_pretrain_causal
train u2_to_cp1 0 10 $SGD --train.resume auto
compare "Ulysses checkpoint resumed under cp=1" u2_to_cp1 ref_pretrain_causal
mkdir -p ring_to_u2 && cp $ck_cp2/step_00000005.h5 ring_to_u2/
train ring_to_u2 2 10 $SGD --train.resume auto --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm ulysses
compare "ring checkpoint resumed under Ulysses" ring_to_u2 ref_pretrain_causal
mkdir -p cp1_to_u2 && cp $ck_cp1/step_00000005.h5 cp1_to_u2/
train cp1_to_u2 2 10 $SGD --train.resume auto --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm ulysses
compare "cp=1 checkpoint resumed under Ulysses" cp1_to_u2 ref_pretrain_causal

# invalid settings: one message (from rank 0), non-zero exit, quickly
expect_layout_error 3 "data.seq_len = 128 must be a multiple of 2 x parallel.cp = 6" \
  --parallel.dp 1 --parallel.cp 3 --data.seq_len 128
expect_layout_error 2 "parallel.cp_comm: unknown context-parallel exchange 'a2a'" \
  --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm a2a
expect_layout_error 3 "parallel.cp_comm = ulysses: model.num_attention_heads = 4 does not split over parallel.cp = 3 ranks" \
  --parallel.dp 1 --parallel.cp 3 --parallel.cp_comm ulysses --data.seq_len 96 --data.max_doc_len 96
expect_layout_error 2 "parallel.cp_comm = hybrid needs parallel.cp_ulysses = 2 to divide parallel.cp = 2" \
  --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm hybrid
expect_layout_error 4 "parallel.cp_comm = double_ring needs parallel.cp_inner_ring = 3 to divide parallel.cp = 4" \
  --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm double_ring --parallel.cp_inner_ring 3
expect_layout_error 2 "parallel.cp_split: unknown context-parallel split 'stripes'" \
  --parallel.dp 1 --parallel.cp 2 --parallel.cp_split stripes

# a rank killed mid-run ends the job with a message, within seconds
expect_job_ends_when_a_rank_dies 2 --parallel.dp 1 --parallel.cp 2
echo "mpi_context_parallel: all passed"
