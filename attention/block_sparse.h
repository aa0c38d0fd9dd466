// attention.mask = block_sparse: MoBA's trainable block-sparse attention (arXiv
// 2502.13189), exact forward and backward on top of the blocked kernel.
//
// Definition (attention_mask.h): a document's positions fall into blocks of B =
// block_size (block m holds [mB, (m + 1) B)). Query i of block b = floor(i / B) reads, for
// its KV head group g (the H / KV query heads that share kv head g), its own block
// causally and the k = top_blocks earlier blocks m < b of highest score
//   s(i, g, m) = qbar(i, g) . kbar(m, g),
// qbar the mean of query i's rows over g's heads, kbar the mean of block m's keys of g
// (both as given, after RoPE), every earlier block when b <= k, ties to the later block.
// The scores are computed in double from the rows the kernel reads (fp32, or rounded to
// bf16 under bf16 precision, which placements may send as bf16: core_attention.h), by
// fused multiply-adds in a fixed order for every cut of the queries, so every placement
// that hands the kernel a document's query rows with its key prefix selects the same
// blocks. The
// selection depends on query i and earlier keys only (nothing leaks from later tokens)
// and is not differentiated: gradients flow through the attention it selects.
//
// How it runs: the own blocks are the chunked mask (one blocked-kernel pass over the
// tasks); then, per query slice of at most chunk_rows rows of a task, per group g and
// earlier block m, the rows that selected m form one dense problem (G query heads, one
// kv head, keys block m: every key visible) whose (O, LSE) merges into theirs
// (merge_attention_partial), in increasing m. The backward runs each part with the merged
// O and LSE (exact partial gradients that add up: core_attention.h) and adds the parts'
// dQ, dK, dV in the same order. Work is the pairs attention_pairs counts: the own
// block's causal pairs plus min(k, b) B per query.
//
// Tasks must hold their document's key prefix: keys from position 0 to at least the
// last query. One process, pipeline and data parallelism, the all-gather and Ulysses
// exchanges and CAD hand the kernel such tasks (each moves the whole key prefix, as
// under causal); the ring exchanges hand it other ranks' key blocks one at a time, and
// the run plan refuses them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/core_attention.h"

namespace lct {

// The blocks the query rows [q_lo, q_hi) of task t select (rows of Q and K as in
// attention_forward): [q_hi - q_lo][KV][top_blocks] block indices in increasing order,
// -1 after the last when a query has fewer than top_blocks earlier blocks.
void select_blocks(const AttentionParams& params, const AttentionTask& t, int64_t q_lo, int64_t q_hi,
                   const float* q, const float* k, std::vector<int32_t>& selected);

// attention_forward and attention_backward under attention.mask = block_sparse.
void block_sparse_forward(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                          const float* k, const float* v, float* out, float* lse);
void block_sparse_backward(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                           const float* k, const float* v, const float* out, const float* lse, const float* dout,
                           float* dq, float* dk, float* dv);

// The scratch block_sparse adds to the kernel's for runs of query_rows and key_rows
// (memory budgets; 0 under other masks).
int64_t block_sparse_workspace_bytes(const AttentionParams& params, int64_t query_rows, int64_t key_rows);

}  // namespace lct
