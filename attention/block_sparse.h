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
// bf16 under bf16 precision, which placements may send as bf16: core_attention.h), the
// block means exactly (KeySum below) and the scores by fused multiply-adds in a fixed
// order for every cut of the queries, so every placement selects the same blocks. The
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
// Without block means, tasks must hold their document's key prefix: keys from position
// 0 to at least the last query (one process, pipeline and data parallelism, Ulysses,
// which moves the whole prefix, and CAD's tasks run in place). With the caller's block
// means (`means`), a task may
// hold any range of its document's keys: each query reads, among them, its own block's
// (causally) and its selected blocks' (a block the range cuts contributes the keys in
// it), and gets the (O, LSE) of that part of its attention (LSE -inf where it reads
// none), which merge_attention_partial merges with the other ranges' parts into what
// the whole prefix gives. The all-gather and a CAD server hand it the selected and own
// blocks only (rows it does not read may be anything finite), the rings one rank's key
// rows at a time (parallel/selected_keys.h, parallel/cad_attention.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/core_attention.h"

namespace lct {

// The block means kbar are exact: each key value (the kernel's: rounded to bf16 under bf16
// precision) is taken as a fixed-point number with 64 fraction bits (rounded to the
// nearest; magnitudes of 2^31 or more count as 2^31, NaN as 0: a model that has them has
// diverged), a block's values are summed in 128-bit integers, and the sum converts to
// double (rounded to nearest) before dividing by B. Integer sums do not depend on their
// order, so a placement that holds a block's rows on several ranks adds the ranks' sums
// and selects exactly as one process does.
using KeySum = __int128;
// Adds rows [0, rows) of k (rows of num_kv_heads * head_dim values) into sums, one per
// value of a row ([num_kv_heads * head_dim]).
void add_key_sums(const AttentionParams& params, const float* k, int64_t rows, KeySum* sums);
// A block's mean from the sum of its B rows.
double key_mean(KeySum sum, int64_t block_size);

// Block means a caller gives (a placement that holds only the key blocks its queries
// selected): kbar[(g * head_dim + x) * stride + m] for blocks m < stride of the task's
// document, computed by add_key_sums and key_mean; stride covers every block before the
// task's last query's block.
struct BlockMeans {
  const double* kbar = nullptr;
  int64_t stride = 0;
};

// A query whose selection scores for a group are not all finite (a NaN or an infinity in
// its mean query, so in its Q; or in a given mean) selects no block: its first entry is
// kNonFiniteSelection, and the kernel writes O = LSE = NaN for the group's heads of it
// (core_attention.h: non-finite inputs never come out finite). Block means from K are
// always finite (NaN counts as 0, infinities as 2^31, above), so a NaN key reaches a
// query through attention, in its own block or a block it selected, never through the
// scores; a query that reads neither gets what it gets with the key's value at 0 (or
// +-2^31). A query that takes every earlier block (b <= top_blocks) scores none.
constexpr int32_t kNonFiniteSelection = -2;

// The blocks the query rows [q_lo, q_hi) of task t select (rows of Q and K as in
// attention_forward): [q_hi - q_lo][KV][top_blocks] block indices in increasing order,
// -1 after the last when a query has fewer than top_blocks earlier blocks (or
// kNonFiniteSelection, then -1). With `given`, the means are the caller's and k is not
// read. With `width`, the layout is [q_hi - q_lo][KV][*width] instead, *width =
// min(top_blocks, the blocks before the last query's block): what a caller that only reads
// the indices (placements planning which keys travel) takes, sized by what a document can
// select whatever top_blocks is (the kernel's own selection is sized so too).
void select_blocks(const AttentionParams& params, const AttentionTask& t, int64_t q_lo, int64_t q_hi,
                   const float* q, const float* k, std::vector<int32_t>& selected, const BlockMeans* given = nullptr,
                   int64_t* width = nullptr);

// attention_forward and attention_backward under attention.mask = block_sparse. With
// `means` (one per task), the selection reads the caller's block means, K and V are read
// only in each task's own blocks and the blocks its queries select (the rows a placement
// that moves only those has filled), and a task's keys may be any range of its document
// (the partial attention above; the backward's parts add up the same way).
void block_sparse_forward(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                          const float* k, const float* v, float* out, float* lse,
                          std::span<const BlockMeans> means = {});
void block_sparse_backward(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                           const float* k, const float* v, const float* out, const float* lse, const float* dout,
                           float* dq, float* dk, float* dv, std::span<const BlockMeans> means = {});

// The scratch block_sparse adds to the kernel's for runs of query_rows and key_rows
// (memory budgets; 0 under other masks). key_rows bounds the documents' lengths too (a
// task holds its document's key prefix, or reads blocks before its last query), so a
// block_size or top_blocks beyond what such a document has costs nothing more.
int64_t block_sparse_workspace_bytes(const AttentionParams& params, int64_t query_rows, int64_t key_rows);

}  // namespace lct
