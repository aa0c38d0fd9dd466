// Core attention: softmax(Q K^T * scale) V over a packed batch of documents.
//
// This is the one seam every attention placement plugs into (colocated, context
// parallel, CAD servers) and every kernel plugs behind (causal, DCA). It has no
// weights: inputs are the already-projected Q/K/V rows, rotated by RoPE for the causal
// kernel (DCA takes Q unrotated, see DcaParams).
//
// Layouts (row-major, fp32):
//   Q, O   [rows, H,  hd]    row stride H*hd
//   K, V   [rows, KV, hd]    row stride KV*hd   (GQA: query head h reads kv head h / (H/KV))
//   LSE    [rows, H]         natural log of the softmax denominator (scaled scores)
//
// Work is described by a list of tasks. A task is a contiguous run of query rows of
// one document together with a contiguous run of key/value rows of the same document;
// the causal rule compares in-document positions, so a task can be any query shard
// with the key prefix it needs (what context parallelism and CAD hand over). Query
// rows of different tasks must not overlap; key rows may be shared between tasks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attention/attention_mask.h"
#include "compute/gemm.h"
#include "compute/enum_names.h"

namespace lct {

enum class AttentionKernel { causal, dca };

inline constexpr EnumName<AttentionKernel> kAttentionKernelNames[] = {
    {AttentionKernel::causal, "causal"},
    {AttentionKernel::dca, "dca", "Dual Chunk Attention"},
};
inline AttentionKernel parse_attention_kernel(const std::string& name) { return parse_enum(kAttentionKernelNames, name, "attention kernel"); }
inline const char* attention_kernel_name(AttentionKernel value) { return enum_name(kAttentionKernelNames, value); }

struct AttentionTask {
  int64_t q_row = 0;   // first query row in Q / O / LSE / dQ
  int64_t kv_row = 0;  // first key row in K / V / dK / dV
  int32_t q_len = 0;   // number of query rows
  int32_t kv_len = 0;  // number of key rows
  int32_t q_pos = 0;   // in-document position of the first query row
  int32_t kv_pos = 0;  // in-document position of the first key row
  int32_t doc_len = 0; // length of the whole document (DCA's length-dependent mscale);
                       // 0 means max(q_pos + q_len, kv_pos + kv_len)
  // Per-document mask data (attention_mask.h): prefix_lm's prefix length P, or
  // shared_question's question length; shared_question: the first position of the
  // segment this task's query rows lie in (a task never spans two segments).
  int32_t prefix_len = 0;
  int32_t segment_pos = 0;
};
// The length of a task's whole document: doc_len, or when 0 the end of its rows.
inline int64_t document_length(const AttentionTask& t) {
  return t.doc_len > 0 ? t.doc_len : std::max<int64_t>(int64_t(t.q_pos) + t.q_len, int64_t(t.kv_pos) + t.kv_len);
}
// Causal rule inside a task: query i may read key j iff kv_pos + j <= q_pos + i; a mask
// (AttentionParams::mask) narrows it by in-document positions (attention_mask.h).

// Dual Chunk Attention (arXiv 2402.17463; code convention of Qwen/vLLM configs):
// C = chunk_size is the largest relative position ever used, w = local_size, and the
// document is cut into chunks of s = C - w tokens by in-document offset t. Keys sit
// at position t mod s; a query at offset i uses, against a key at offset j <= i,
//   intra (same chunk)        i mod s
//   successive (chunk - 1)    min(i mod s + s, C)
//   inter (earlier chunks)    min(2s - 1, C)
// so every relative position is in [0, C]. It is one softmax over all j <= i of the
// document (dense causal attention with remapped positions, not sparse).
//
// Contract with the caller: Q is passed *before* RoPE (the kernel rotates each query
// tile by the position its key block needs) and K is passed rotated by its key
// position t mod s (dca_key_position); dQ is returned for the pre-RoPE Q and dK for
// the rotated K. RoPE follows the Hugging Face rotate_half convention; the table must
// cover positions 0..C.
struct DcaParams {
  int32_t chunk_size = 0;  // C
  int32_t local_size = 0;  // w
  float mscale = 1.0f;     // constant logit multiplier (attention temperature)
  // > 0: the multiplier is further scaled per document by max(1, 0.1 ln(L_doc / this) + 1)
  // (YaRN / Qwen2.5-1M attention factor); 0 disables it.
  int32_t mscale_original_length = 0;
  const float* rope_cos = nullptr;  // [rope_positions, hd/2]
  const float* rope_sin = nullptr;  // [rope_positions, hd/2]
  int64_t rope_positions = 0;       // must be > chunk_size
  int32_t chunk_len() const { return chunk_size - local_size; }
};

// Key position of in-document offset t, and the query position a query at offset i uses
// against keys chunk_distance = i/s - j/s chunks back (s = chunk_len(); the relative
// position of keys at offset j <= i is the difference of the two).
int32_t dca_key_position(int64_t t, const DcaParams& dca);
int32_t dca_query_position_at_distance(int64_t i, int64_t chunk_distance, const DcaParams& dca);
// Logit multiplier of a document of length doc_len.
float dca_logit_multiplier(int64_t doc_len, const DcaParams& dca);

// The rows of the attention kernel's runs (attention_runs); AttentionParams::chunk_rows.
constexpr int64_t kAttentionChunkRows = 65536;

struct AttentionParams {
  AttentionKernel kernel = AttentionKernel::causal;
  int num_heads = 0;     // H, query heads
  int num_kv_heads = 0;  // KV, divides H
  int head_dim = 0;      // hd
  float scale = 0.0f;    // logit multiplier, normally 1/sqrt(hd)
  DcaParams dca;         // used when kernel == dca
  AttentionMask mask;    // which keys of its document a query reads (causal only with DCA)
  // bf16: Q, K, V, dO and the probabilities P and dS enter the block products rounded to
  // bf16 (Q rounded on entry, then scaled or rotated and rounded again), D = rowsum(dO * O)
  // sums the rounded dO and O, and softmax statistics, LSE, D and every accumulator stay
  // fp32. The kernel thus depends only on the bf16 values of Q, K, V, O and dO, which
  // placements may therefore send as bf16.
  Precision precision = Precision::fp32;
  // The bf16 products' kernel (the model's Arithmetic, compute/gemm.h): native runs them
  // in lct's AVX512-BF16 tiles where the CPU has those instructions (automatic: native
  // there); rounded (and every CPU without them) runs them as fp32 SGEMM on the rounded
  // operands, which gives the same numbers up to summation order (the tests check both).
  Bf16Kernel bf16_kernel = Bf16Kernel::automatic;
  // The rows of the kernel's runs (attention_runs below): kAttentionChunkRows unless a
  // test wants many runs of a short batch.
  int64_t chunk_rows = kAttentionChunkRows;
};

// Per-document mask data of a packed batch (attention_mask.h), empty when the mask needs
// none: prefix_lm's prefix lengths [documents]; shared_question's segment ids [tokens]
// (per document: a run of 0s, the question, then runs of positive ids, the answers;
// a segment id is one contiguous run; the caller guarantees that shape).
struct MaskData {
  std::span<const int32_t> prefix_lens;
  std::span<const int32_t> segment_ids;
};

// The tasks of a packed batch: one per document (queries and keys the whole document),
// with its prefix length under prefix_lm; under shared_question one per segment (its
// queries, and the keys from the document's start to the segment's end).
// cu_seqlens has n+1 entries, cu_seqlens[0] = 0, strictly increasing.
std::vector<AttentionTask> tasks_for_documents(std::span<const int32_t> cu_seqlens, const MaskData& data = {});
// Same, into an existing vector (reuses its capacity).
void tasks_for_documents(std::span<const int32_t> cu_seqlens, std::vector<AttentionTask>& tasks,
                         const MaskData& data = {});
// Appends the tasks of one whole document at rows [row, row + len): prefix_len its
// prefix_lm prefix; segment_ids (null unless shared_question) its len segment ids.
void append_document_tasks(std::vector<AttentionTask>& tasks, int64_t row, int32_t len, int32_t prefix_len,
                           const int32_t* segment_ids);

// Attention work: the (query, key) pairs a task attends to under the mask (DCA attends
// to the causal pairs). This is lct's one definition of attention work: FLOPs
// (forward = 4 * H * hd * pairs, FlashAttention / Megatron causal-aware convention,
// LongCA-bench's mask-aware count), packing and balance figures all count it. A whole
// document of L tokens has L (L + 1) / 2 causal pairs.
int64_t attention_pairs(const AttentionTask& task, const AttentionMask& mask = {});
int64_t attention_pairs(std::span<const AttentionTask> tasks, const AttentionMask& mask = {});
// The pairs of a document's query rows [q_begin, q_begin + q_len) against their key
// prefix [0, q_begin + q_len) (a CP piece, a CAD task, a whole document at q_begin = 0).
int64_t prefix_pairs(int64_t q_begin, int64_t q_len, const AttentionMask& mask = {});

// Forward: writes O and LSE for every query row named by a task (rows not named by
// any task are untouched). A query row with no visible key gets O = 0, LSE = -inf.
// Non-finite inputs (issue 87), in every kernel, mask and precision: a query row (of one
// head) that reads a NaN or an infinity, in its own Q, in the K of a key it reads (so in a
// score it reads) or in the V of a key it reads (as the kernel reads them: their bf16
// values under bf16), gets O = NaN and LSE = NaN; rows that read none of them get what
// they would get with those values finite (the kernel never multiplies a value it hides
// from a row into that row; under block_sparse, finite as its block means count them).
// Under block_sparse a query whose selection scores are not finite (its mean query is
// not) gets NaN for its whole head group (block_sparse.h).
void attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                       const float* q, const float* k, const float* v, float* out, float* lse);

// Backward by recomputation from O and LSE (never stores the score matrix).
// Accumulates (+=) into dq, dk, dv; the caller zeroes them. A row whose LSE is NaN (or
// that reads a non-finite score) makes every gradient it touches NaN: its dQ and the dK
// and dV of every key it reads. (Gradients of rows and keys sharing a tile product with
// it may turn NaN too, 0 * NaN: a NaN forward row makes the loss NaN anyway.)
void attention_backward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                        const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv);

// Partial results over disjoint key ranges of the same queries merge exactly:
//   lse = log(exp(lse_a) + exp(lse_b)),  O = exp(lse_a - lse) O_a + exp(lse_b - lse) O_b.
// merge_attention_partial folds (part_out, part_lse) into (out, lse) for `rows` rows
// [rows, heads, head_dim] / [rows, heads]. LSE = -inf means the row saw no key (its O
// is 0); two such rows stay O = 0, LSE = -inf. A part with LSE = -inf changes nothing
// (whatever its O); a side with LSE NaN (or +inf) makes the merged row O = LSE = NaN. The
// backward of each part, run with the *merged* O and LSE, gives exact partial gradients
// that simply add up.
void merge_attention_partial(float* out, float* lse, const float* part_out,
                             const float* part_lse, int64_t rows, int heads, int head_dim);

// attention_forward and attention_backward hand the kernel consecutive runs of the
// tasks whose query rows and key rows each span at most max(chunk_rows, the run's
// largest group), so the kernel's scratch grows with the longest group (or 64K rows),
// not with the batch: 1M packed tokens need no 1M-row buffers. A group is a maximal
// stretch of consecutive tasks whose query rows or key rows overlap (a document's
// pieces: shared_question's segments, a context-parallel rank's pieces of one document),
// and a run never splits one: the tasks that accumulate into the same dK and dV rows
// meet in one kernel call. One exception: a group of a single task with more than
// chunk_rows query rows (one long document) runs as query slices, one run each: its
// query rows cut at in-document positions that are multiples of chunk_rows, each slice
// with the one run of the task's key rows its queries read (mask_run_keys: from the
// document's first key under causal or sinks, from a window's or a block's first key
// under sliding_window or chunked, to the last key its last query reads). A slice's Q,
// O, LSE, dQ and dO are chunk_rows rows; its K and V (and the dK, dV it adds into) are
// those keys of the document. The forward's O and LSE are those of the whole task (a
// query row's arithmetic does not depend on the cut, attention_query_tile, nor on where
// its keys start: the kernel visits the key blocks a tile reads from its first key); the
// backward sums each slice's dK and dV into the document's, one slice after another.
struct AttentionRun {
  size_t first = 0, end = 0;                         // tasks [first, end)
  int64_t q_lo = 0, q_hi = 0, kv_lo = 0, kv_hi = 0;  // the query and key rows they span
  bool slice = false;  // a query slice of task `first` (end = first + 1): rows [q_lo, q_hi)
};
// Those runs, in order (the one rule attention_forward and attention_backward apply). A
// caller that hands attention_forward or attention_backward one run's tasks at a time
// (run_tasks; rebased or not) makes exactly the kernel calls one call over all the tasks
// makes: the same bits (the model's pieces, model/llama.h).
void attention_runs(std::span<const AttentionTask> tasks, const AttentionMask& mask, int64_t chunk_rows,
                    std::vector<AttentionRun>& runs);
// Appends the tasks of a run to `out`: tasks [first, end), or a slice's task cut to its
// query rows and the key rows they read.
void run_tasks(std::span<const AttentionTask> tasks, const AttentionRun& run, std::vector<AttentionTask>& out);
// The most query rows of a run over documents of at most `longest` rows: chunk_rows, or
// the document's under the masks that may keep its queries together (prefix_lm's prefix,
// shared_question's segments, the masks that read ahead).
int64_t attention_run_query_rows(const AttentionParams& params, int64_t longest);
// How many rows before its first query row a run's keys may start, over documents of at
// most `longest` rows: 0 unless a document is longer than chunk_rows; then a query
// slice's keys start at its first query's first key: W - 1 rows back under a window (no
// sinks), B - 1 under chunked, else at the document's first row (up to longest - 1).
// A run's key rows span at most its query rows plus this.
int64_t attention_run_key_reach(const AttentionParams& params, int64_t longest);
// An upper bound of that scratch for runs of query_rows and key_rows on `threads` threads
// (memory budgets): D = rowsum(dO * O) and the other threads' dQ partials by the query
// rows, bf16 copies of K and V (train.precision = bf16) by the key rows, the threads' tiles.
int64_t attention_workspace_bytes(const AttentionParams& params, int64_t query_rows, int64_t key_rows, int threads);

// Rows of the kernel's query tile. Tiles start at in-document positions that are
// multiples of it, so query rows of one document cut into tasks at such positions get
// bit-identical O and LSE whatever the cut (the CAD planner cuts there, cad_plan.h).
int64_t attention_query_tile(const AttentionParams& params);

// The kernels keep grow-only scratch per calling thread (tiles, D = rowsum(dO*O), and
// per-thread dQ partials sized by the largest batch seen), so steady-state steps
// allocate nothing. This frees it, e.g. between benchmarks of different lengths.
void attention_release_workspace();

}  // namespace lct
