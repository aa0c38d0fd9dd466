// Core attention: softmax(Q K^T * scale) V over a packed batch of documents.
//
// This is the one seam every attention placement plugs into (colocated, context
// parallel, CAD servers) and every kernel plugs behind (causal today). It has no
// weights: inputs are the already-projected, already-rotated Q/K/V rows.
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

namespace lct {

enum class AttentionKernel { causal };

AttentionKernel parse_attention_kernel(const std::string& name);  // throws on unknown
const char* attention_kernel_name(AttentionKernel kernel);

struct AttentionTask {
  int64_t q_row = 0;   // first query row in Q / O / LSE / dQ
  int64_t kv_row = 0;  // first key row in K / V / dK / dV
  int32_t q_len = 0;   // number of query rows
  int32_t kv_len = 0;  // number of key rows
  int32_t q_pos = 0;   // in-document position of the first query row
  int32_t kv_pos = 0;  // in-document position of the first key row
};
// Causal rule inside a task: query i may read key j iff kv_pos + j <= q_pos + i.

struct AttentionParams {
  AttentionKernel kernel = AttentionKernel::causal;
  int num_heads = 0;     // H, query heads
  int num_kv_heads = 0;  // KV, divides H
  int head_dim = 0;      // hd
  float scale = 0.0f;    // logit multiplier, normally 1/sqrt(hd)
};

// One task per document of a packed batch: queries and keys are the whole document.
// cu_seqlens has n+1 entries, cu_seqlens[0] = 0, strictly increasing.
std::vector<AttentionTask> tasks_for_documents(std::span<const int32_t> cu_seqlens);
// Same, into an existing vector (reuses its capacity).
void tasks_for_documents(std::span<const int32_t> cu_seqlens, std::vector<AttentionTask>& tasks);

// Number of (query, key) pairs the tasks attend to; attention forward FLOPs are
// 4 * H * hd * pairs (FlashAttention / Megatron causal-aware convention).
int64_t attended_pairs(std::span<const AttentionTask> tasks);

// Forward: writes O and LSE for every query row named by a task (rows not named by
// any task are untouched). A query row with no visible key gets O = 0, LSE = -inf.
void attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                       const float* q, const float* k, const float* v, float* out, float* lse);

// Backward by recomputation from O and LSE (never stores the score matrix).
// Accumulates (+=) into dq, dk, dv; the caller zeroes them.
void attention_backward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                        const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv);

// The kernels keep grow-only scratch per calling thread (tiles, D = rowsum(dO*O), and
// per-thread dQ partials sized by the largest batch seen), so steady-state steps
// allocate nothing. This frees it, e.g. between benchmarks of different lengths.
void attention_release_workspace();

}  // namespace lct
