#!/usr/bin/env bash
# Attention masks (attention.mask) on every layout against the single-process run on
# the same data: sliding_window, sink_window and chunked on the `pretrain` length mix
# (documents shorter and many times longer than the window, sinks and block) under
# dp = 2, pp = 2, cp = 2 (ring, all-gather, Ulysses, zigzag split), cp = 4 (hybrid 2 x 2
# and double ring 2 x 2, oversubscribed), CAD dp = 2 and CAD dp = 2 x cp = 2: 8 SGD steps,
# losses and parameters within compare_runs.py's float32 bounds of the single process
# (layouts sum gradients over tokens and merge attention over key blocks in other
# orders; SGD keeps parameters linear in the gradients, see mpi_context_parallel.sh).
# prefix_lm and shared_question (per-document data from the packer) on the same layouts
# and the contiguous split. block_sparse (MoBA) on dp = 2, pp = 2, full recomputation,
# cp = 2 (all-gather, Ulysses, ring; bf16 too), cp = 4 all-gather, ring, double ring and
# hybrid, CAD dp = 2 (ping-pong and bf16 too), pp = 2, pp = 2 x cp = 2 and dp = 2 x cp = 2,
# with the bytes
# CAD moves under it. Then: a masked checkpoint resumes only
# under the same mask, `lct eval` can override the mask, and bad mask settings give one
# line and exit 1.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

MODEL="$TINY_MODEL --data.seq_len 128 --data.max_doc_len 128 --data.doc_lengths pretrain --train.warmup_steps 3"

train() {  # dir ranks [extra args]: 2 sequences per step (micro-batches x dp; MB, default 2)
  local dir=$1 np=$2
  shift 2
  run_train "$dir" "$np" --train.steps 8 --train.micro_batches "${MB:-2}" $SGD "$@"
}

# on_every_layout NAME ARGS: trains mask NAME (ARGS) on dp 2, pp 2, cp 2 (ring, all-gather,
# Ulysses), cp 4 (hybrid, double ring), CAD dp 2 and CAD dp 2 x cp 2, each against ref_NAME
on_every_layout() {
  local name=$1 m=$2 comm
  MB=1 train "dp2_$name" 2 $m --parallel.dp 2
  compare "dp=2, $name" "dp2_$name" "ref_$name"
  train "pp2_$name" 2 $m --parallel.dp 1 --parallel.pp 2
  compare "pp=2, $name" "pp2_$name" "ref_$name"
  for comm in ring allgather ulysses; do
    train "cp2_${comm}_$name" 2 $m --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm "$comm"
    compare "cp=2 $comm, $name" "cp2_${comm}_$name" "ref_$name"
  done
  for comm in hybrid double_ring; do
    train "cp4_${comm}_$name" 4 $m --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm "$comm"
    compare "cp=4 $comm, $name" "cp4_${comm}_$name" "ref_$name"
  done
  MB=1 train "cad2_$name" 2 $m --parallel.dp 2 --attention.placement cad --attention.cad_profile pairs
  compare "CAD dp=2, $name" "cad2_$name" "ref_$name"
  MB=1 train "cad_dp2cp2_$name" 4 $m --parallel.dp 2 --parallel.cp 2 --attention.placement cad --attention.cad_profile pairs
  compare "CAD dp=2 x cp=2, $name" "cad_dp2cp2_$name" "ref_$name"
}

train ref_causal 0
for mask in "sliding_window --attention.window 24" "sink_window --attention.window 16 --attention.sink_tokens 3" \
            "chunked --attention.block_size 40"; do
  name=${mask%% *}
  m="--attention.mask $mask"
  train "ref_$name" 0 $m
  grep -q "mask $name" "ref_$name.log" || { cat "ref_$name.log"; echo "FAIL: the log does not name the mask"; exit 1; }
  # the mask changes the model (these comparisons would hold trivially if it were ignored)
  if compare "$name against causal" "ref_$name" ref_causal > /dev/null; then echo "FAIL: $name trains like causal"; exit 1; fi
  on_every_layout "$name" "$m"
done

# block_sparse (MoBA): its selection needs the block means of a document's earlier keys
# where its queries are: data and pipeline parallelism, recomputation, the all-gather
# (which exchanges the means and then moves only the selected blocks), Ulysses and CAD
# each equal one process (bf16 too, whose exchanges send bf16 and whose selection reads
# the bf16 values); so do the rings
bs="--attention.mask block_sparse --attention.block_size 16 --attention.top_blocks 2"
train ref_block_sparse 0 $bs
grep -q "mask block_sparse (block 16, top 2)" ref_block_sparse.log || { cat ref_block_sparse.log; echo "FAIL: the log does not name the mask"; exit 1; }
if compare "block_sparse against causal" ref_block_sparse ref_causal > /dev/null; then echo "FAIL: block_sparse trains like causal"; exit 1; fi
train ref_block_chunked 0 --attention.mask chunked --attention.block_size 16
if compare "block_sparse against chunked" ref_block_sparse ref_block_chunked > /dev/null; then
  echo "FAIL: block_sparse trains like chunked (it selects nothing)"; exit 1; fi
MB=1 train dp2_block_sparse 2 $bs --parallel.dp 2
compare "dp=2, block_sparse" dp2_block_sparse ref_block_sparse
train pp2_block_sparse 2 $bs --parallel.dp 1 --parallel.pp 2
compare "pp=2, block_sparse" pp2_block_sparse ref_block_sparse
train recompute_block_sparse 0 $bs --train.recompute full
compare "full recomputation, block_sparse" recompute_block_sparse ref_block_sparse
for comm in allgather ulysses; do
  train "cp2_${comm}_block_sparse" 2 $bs --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm "$comm"
  compare "cp=2 $comm, block_sparse" "cp2_${comm}_block_sparse" ref_block_sparse
done
# cp = 4 all-gather: the sums of blocks held on several ranks add up exactly, and only the
# selected and own blocks move (parallel/selected_keys.h). With top_blocks 0 nothing is
# selected: it trains as chunked and moves chunked's rows (the own blocks) plus the
# runs each rank asks for (a few percent here; no block sums: nothing is chosen), under
# half of what causal moves
train cp4_allgather_block_sparse 4 $bs --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm allgather
compare "cp=4 allgather, block_sparse" cp4_allgather_block_sparse ref_block_sparse
bs0="--attention.mask block_sparse --attention.block_size 16 --attention.top_blocks 0"
train cp4_allgather_block_sparse0 4 $bs0 --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm allgather
compare "cp=4 allgather, block_sparse top_blocks 0 against chunked" cp4_allgather_block_sparse0 ref_block_chunked
train cp4_allgather_chunked 4 --attention.mask chunked --attention.block_size 16 --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm allgather
train cp4_allgather_causal 4 --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm allgather
/usr/bin/python3 - <<'PY'
import json
def sent(run):
    return sum(sum(json.loads(l)["rank_exchange_bytes"]) for l in open(f"{run}/metrics.jsonl"))
b0, chunked, causal = sent("cp4_allgather_block_sparse0"), sent("cp4_allgather_chunked"), sent("cp4_allgather_causal")
assert chunked < b0 <= 1.1 * chunked and b0 < causal / 2, \
    f"FAIL: block_sparse top_blocks 0 sent {b0} bytes, chunked {chunked}, causal {causal}"
print(f"ok   cp=4 allgather bytes: block_sparse top_blocks 0 {b0} (chunked {chunked}, causal {causal}), "
      f"block_sparse top_blocks 2 {sent('cp4_allgather_block_sparse')}")
PY
# CAD: each origin selects for its queries and sends only the selected and own key
# blocks with the block means (with cp = 2, the other holders are told what to send)
cad="--attention.placement cad --attention.cad_profile pairs"
MB=1 train cad2_block_sparse 2 $bs --parallel.dp 2 $cad
compare "CAD dp=2, block_sparse" cad2_block_sparse ref_block_sparse
MB=1 train cad2_pingpong_block_sparse 2 $bs --parallel.dp 2 $cad --attention.cad_pingpong true
compare "CAD dp=2 ping-pong, block_sparse" cad2_pingpong_block_sparse ref_block_sparse
train cad_pp2_block_sparse 2 $bs --parallel.dp 1 --parallel.pp 2 $cad
compare "CAD pp=2, block_sparse" cad_pp2_block_sparse ref_block_sparse
train cad_pp2cp2_block_sparse 4 $bs --parallel.dp 1 --parallel.pp 2 --parallel.cp 2 $cad
compare "CAD pp=2 x cp=2, block_sparse" cad_pp2cp2_block_sparse ref_block_sparse
MB=1 train cad_dp2cp2_block_sparse 4 $bs --parallel.dp 2 --parallel.cp 2 $cad
compare "CAD dp=2 x cp=2, block_sparse" cad_dp2cp2_block_sparse ref_block_sparse
MB=1 train cad2_block_sparse0 2 $bs0 --parallel.dp 2 $cad
compare "CAD dp=2, block_sparse top_blocks 0 against chunked" cad2_block_sparse0 ref_block_chunked
MB=1 train cad2_chunked16 2 --attention.mask chunked --attention.block_size 16 --parallel.dp 2 $cad
MB=1 train cad2_causal 2 --parallel.dp 2 $cad
/usr/bin/python3 - <<'PY'
import json
def sent(run):
    return sum(sum(json.loads(l)["rank_exchange_bytes"]) for l in open(f"{run}/metrics.jsonl"))
b0, b2, chunked, causal = (sent(r) for r in ("cad2_block_sparse0", "cad2_block_sparse", "cad2_chunked16", "cad2_causal"))
# top_blocks 0 reads what chunked reads (plus the headers); every layout here plans
# the same tasks (pairs balance: chunked's and block_sparse's pairs are the same)
assert chunked <= b0 <= 1.1 * chunked and b0 < causal, \
    f"FAIL: CAD block_sparse top_blocks 0 sent {b0} bytes, chunked {chunked}, causal {causal}"
# (top_blocks 2 is printed, not bounded: at 128 tokens a task's rows together select
# nearly every earlier block, and the means and headers come on top)
print(f"ok   CAD dp=2 bytes: block_sparse top_blocks 0 {b0}, top_blocks 2 {b2} (chunked {chunked}, causal {causal})")
PY
train ref_block_sparse_bf16 0 $bs --train.precision bf16
train cp2_allgather_block_sparse_bf16 2 $bs --train.precision bf16 --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm allgather
# (bf16 layouts differ within mpi_precision.sh's derived bounds: loss 1e-3, parameters
# 1e-3 per SGD update, here eight; fp32 sums in another order flip bf16 roundings)
compare "cp=2 allgather bf16, block_sparse" cp2_allgather_block_sparse_bf16 ref_block_sparse_bf16 1e-3 8e-3
MB=1 train cad2_block_sparse_bf16 2 $bs --train.precision bf16 --parallel.dp 2 $cad
compare "CAD dp=2 bf16, block_sparse" cad2_block_sparse_bf16 ref_block_sparse_bf16 1e-3 8e-3
# the rings: each rank gets the block means first; the ring moves the selected and own
# rows and the double ring whole blocks, and each step's partial attention merges
# (blocks cut between ranks contribute their rows on each); hybrid's ring runs over
# whole KV head groups
train cp2_ring_block_sparse 2 $bs --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm ring
compare "cp=2 ring, block_sparse" cp2_ring_block_sparse ref_block_sparse
train cp4_ring_block_sparse 4 $bs --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm ring
compare "cp=4 ring, block_sparse" cp4_ring_block_sparse ref_block_sparse
train cp4_double_ring_block_sparse 4 $bs --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm double_ring --parallel.cp_inner_ring 2
compare "cp=4 double_ring, block_sparse" cp4_double_ring_block_sparse ref_block_sparse
# the relay carries the selected and own rows of the ranks ahead: with top_blocks 0,
# chunked's rows (and the gathered reads)
dr="--parallel.dp 1 --parallel.cp 4 --parallel.cp_comm double_ring --parallel.cp_inner_ring 2"
train cp4_double_ring_block_sparse0 4 $bs0 $dr
compare "cp=4 double_ring, block_sparse top_blocks 0 against chunked" cp4_double_ring_block_sparse0 ref_block_chunked
train cp4_double_ring_chunked16 4 --attention.mask chunked --attention.block_size 16 $dr
train cp4_double_ring_causal 4 $dr
/usr/bin/python3 - <<'PY'
import json
def sent(run):
    return sum(sum(json.loads(l)["rank_exchange_bytes"]) for l in open(f"{run}/metrics.jsonl"))
b0, chunked, causal = (sent(r) for r in ("cp4_double_ring_block_sparse0", "cp4_double_ring_chunked16", "cp4_double_ring_causal"))
assert chunked < b0 <= 1.2 * chunked and b0 < causal, \
    f"FAIL: double ring block_sparse top_blocks 0 sent {b0} bytes, chunked {chunked}, causal {causal}"
print(f"ok   cp=4 double_ring bytes: block_sparse top_blocks 0 {b0} (chunked {chunked}, causal {causal}), "
      f"top_blocks 2 {sent('cp4_double_ring_block_sparse')}")
PY
train cp4_hybrid_block_sparse 4 $bs --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm hybrid --parallel.cp_ulysses 2
compare "cp=4 hybrid, block_sparse" cp4_hybrid_block_sparse ref_block_sparse
train cp2_ring_block_sparse_bf16 2 $bs --train.precision bf16 --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm ring
compare "cp=2 ring bf16, block_sparse" cp2_ring_block_sparse_bf16 ref_block_sparse_bf16 1e-3 8e-3
# Ulysses over more ranks than KV heads would split a group's query heads
expect_layout_error 4 "attention.mask = block_sparse under parallel.cp_comm = ulysses needs model.num_key_value_heads = 2 to be a multiple of parallel.cp = 4" \
  $bs --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm ulysses

# per-document masks: the packer's prefixes (prefix_lm) and segments (shared_question),
# documents shorter and longer than them, on every layout: context parallelism and CAD
# cut documents, so their pieces carry the prefix (prefix_lm's first queries read keys
# other ranks hold) and are cut at segment boundaries
for mask in "prefix_lm --data.prefix_fraction 0.25" \
            "shared_question --data.prefix_fraction 0.2 --data.answers_per_question 3"; do
  name=${mask%% *}
  m="--attention.mask $mask"
  train "ref_$name" 0 $m
  if compare "$name against causal" "ref_$name" ref_causal > /dev/null; then echo "FAIL: $name trains like causal"; exit 1; fi
  on_every_layout "$name" "$m"
  train "cp2_contiguous_$name" 2 $m --parallel.dp 1 --parallel.cp 2 --parallel.cp_split contiguous
  compare "cp=2 ring contiguous, $name" "cp2_contiguous_$name" "ref_$name"
done

# a token file that marks each document's structure (data.segment_end_id = 3: closes the
# prefix, the question and each answer): both masks from the file's marks on cp = 2 and
# CAD dp = 2 against one process, and the marks change what is trained
/usr/bin/python3 -c "
import numpy as np
r = np.random.default_rng(7)
out = []
for d in range(150):
    doc = r.integers(10, 200, int(r.integers(2, 300)))
    doc[r.random(len(doc)) < 0.03] = 3
    out += list(doc) + [0]
np.array(out, dtype=np.uint16).tofile('marked.bin')"
TOKENS="--data.source tokens --data.path marked.bin"
train ref_marked_causal 0 $TOKENS
for name in prefix_lm shared_question; do
  m="--attention.mask $name $TOKENS --data.segment_end_id 3"
  train "ref_marked_$name" 0 $m
  grep -q "segments closed by id 3" "ref_marked_$name.log" || { cat "ref_marked_$name.log"; echo "FAIL: the log does not say the file marks segments"; exit 1; }
  if compare "marked $name against causal" "ref_marked_$name" ref_marked_causal > /dev/null; then
    echo "FAIL: marked $name trains like causal"; exit 1; fi
  train "cp2_marked_$name" 2 $m --parallel.dp 1 --parallel.cp 2
  compare "cp=2 ring, $name from a token file's marks" "cp2_marked_$name" "ref_marked_$name"
  MB=1 train "cad2_marked_$name" 2 $m --parallel.dp 2 --attention.placement cad --attention.cad_profile pairs
  compare "CAD dp=2, $name from a token file's marks" "cad2_marked_$name" "ref_marked_$name"
done

# the mask is part of the model: resuming under another is refused, naming the key
out=$("$LCT" train $MODEL --train.steps 9 --checkpoint.dir ref_chunked --train.resume auto 2>&1) && {
  echo "$out"; echo "FAIL: resumed a chunked checkpoint under the causal mask"; exit 1; }
grep -q "attention.mask" <<< "$out" || { echo "$out"; echo "FAIL: the refusal does not name attention.mask"; exit 1; }
echo "ok   resuming under another mask is refused"
# the checkpoint records it, inspect shows it, and eval may override it (no weights)
ckpt=$(ls -d ref_chunked/step_* | tail -1)
"$LCT" inspect "$ckpt" | grep -q "mask chunked (block 40)" || { "$LCT" inspect "$ckpt"; echo "FAIL: inspect"; exit 1; }
"$LCT" make-batch $MODEL --out batch.h5 > /dev/null
"$LCT" eval --checkpoint "$ckpt" --batch-file batch.h5 | grep -q "mask chunked" || { echo "FAIL: eval"; exit 1; }
"$LCT" eval --checkpoint "$ckpt" --batch-file batch.h5 --attention.mask causal | grep -q "mask" && {
  echo "FAIL: eval --attention.mask causal still masked"; exit 1; }
rc=0; out=$("$LCT" eval --checkpoint "$ckpt" --batch-file batch.h5 --attention.mask prefix_lm 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "needs the batch's prefix_lens" <<< "$out" || {
  echo "$out"; echo "FAIL: eval under prefix_lm without prefix lengths (exit $rc)"; exit 1; }
rc=0; out=$("$LCT" eval --checkpoint "$ckpt" --batch-file batch.h5 --attention.mask shared_question 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "needs the batch's segment_ids" <<< "$out" || {
  echo "$out"; echo "FAIL: eval under shared_question without segments (exit $rc)"; exit 1; }
# a batch with prefixes evaluates under prefix_lm, and inspect shows what it carries
"$LCT" make-batch $MODEL --attention.mask prefix_lm --data.prefix_fraction 0.25 --out prefix.h5 > /dev/null
"$LCT" inspect prefix.h5 | grep -q "prefix_lens (prefix_lm)" || { "$LCT" inspect prefix.h5; echo "FAIL: inspect prefix_lens"; exit 1; }
"$LCT" eval --checkpoint "$ckpt" --batch-file prefix.h5 --attention.mask prefix_lm | grep -q "mask prefix_lm" || {
  echo "FAIL: eval under prefix_lm"; exit 1; }
echo "ok   checkpoint attributes, inspect and eval overrides (per-document masks need the batch's data)"
# lct bench counts a per-document mask's pairs with the documents' prefixes: one document
# of 512 tokens with P = 256 has 512 * 513 / 2 causal pairs plus the 255 * 256 / 2 its
# prefix rows read ahead
pairs=$("$LCT" bench --json --sections attention --attention-lengths 512 --attention-precisions fp32 --repeats 1 \
  --budget 1 --attention.mask prefix_lm --data.prefix_fraction 0.5 --model.hidden_size 32 --model.num_attention_heads 4 \
  --model.num_key_value_heads 2 --train.threads 1 |
  /usr/bin/python3 -c 'import json, sys; print([r["pairs"] for r in json.load(sys.stdin)["attention"]["rows"] if r["layout"] == "one-doc"][0])')
[ "$pairs" = $((512 * 513 / 2 + 255 * 256 / 2)) ] || { echo "FAIL: bench prefix_lm pairs $pairs"; exit 1; }
echo "ok   bench counts prefix_lm's pairs ($pairs)"

# bad settings: one line, exit 1
bad() {  # message args...
  local msg=$1 rc=0 out
  shift
  out=$("$LCT" train $MODEL --train.steps 1 --checkpoint.dir bad "$@" 2>&1) || rc=$?
  [ "$rc" = 1 ] || { echo "$out"; echo "FAIL: exit $rc, expected 1"; exit 1; }
  grep -q -- "$msg" <<< "$out" || { echo "$out"; echo "FAIL: missing '$msg'"; exit 1; }
  [ "$(grep -c . <<< "$out")" = 1 ] || { echo "$out"; echo "FAIL: more than one line"; exit 1; }
  echo "ok   refused: $msg"
}
bad "attention.window must be >= 1" --attention.mask sliding_window --attention.window 0
bad "attention.sink_tokens must be >= 0" --attention.mask sink_window --attention.sink_tokens -1
bad "attention.block_size must be >= 1" --attention.mask chunked --attention.block_size 0
bad "unknown attention mask" --attention.mask window
bad "attention.top_blocks must be >= 0" --attention.mask block_sparse --attention.top_blocks -1
# LongCA-bench's masks that read ahead run in lct bench, not in training
for m in full_document "bidirectional_window --attention.window 8" "causal_blockwise --attention.block_size 16"; do
  bad "attention.mask = ${m%% *} lets a query read the token it predicts" --attention.mask $m
done
bad "attention.window must be >= 1" --attention.mask bidirectional_window --attention.window 0
bad "dca takes only attention.mask = causal" --attention.mask chunked --attention.kernel dca
bad "attention.mask = prefix_lm needs data.prefix_fraction > 0" --attention.mask prefix_lm
bad "attention.mask = shared_question needs data.answers_per_question >= 1" --attention.mask shared_question
bad "data.prefix_fraction must be in \[0, 1)" --attention.mask prefix_lm --data.prefix_fraction 1
bad "data.prefix_fraction is used only with attention.mask = prefix_lm or shared_question" --data.prefix_fraction 0.5
bad "takes no data.answers_per_question" --attention.mask prefix_lm --data.prefix_fraction 0.5 --data.answers_per_question 2
bad "data.segment_end_id marks segments in a token file (data.source = tokens), not in data.source = synthetic" \
  --attention.mask shared_question --data.segment_end_id 3
bad "data.segment_end_id = 0 is data.separator_id" --attention.mask shared_question $TOKENS --data.segment_end_id 0
bad "data.segment_end_id takes the structure from the file: drop data.prefix_fraction" \
  --attention.mask prefix_lm $TOKENS --data.segment_end_id 3 --data.prefix_fraction 0.5
bad "data.segment_end_id is used only with attention.mask = prefix_lm or shared_question" $TOKENS --data.segment_end_id 3
# ids a key names are range-checked (issue 54 cause 11: an id beyond the vocabulary gave
# every document an empty prefix)
bad "data.segment_end_id = 300 is outside model.vocab_size = 256" --attention.mask prefix_lm $TOKENS \
  --data.segment_end_id 300
bad "data.segment_end_id = 70000 can never occur in a uint16 token file (ids 0 to 65535)" --attention.mask prefix_lm \
  $TOKENS --data.segment_end_id 70000 --model.vocab_size 80000
bad "data.separator_id = 65536 can never occur in a uint16 token file" $TOKENS --data.separator_id 65536
echo "mpi_masks: all passed"
