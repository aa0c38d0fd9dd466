// The float64 reference of core attention for the kernel tests (attention_test.cpp,
// mask_test.cpp): dense attention inside each packed document under a mask, written
// straight from the mask definitions (not from attention_mask.h's range form), and its
// exact backward.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "attention/core_attention.h"
#include "tests/test_util.h"

namespace lct::test {

struct Problem {
  Problem(int heads, int kv_heads, int head_dim, std::vector<int32_t> boundaries)
      : H(heads), KV(kv_heads), hd(head_dim), cu(std::move(boundaries)) {}
  int H, KV, hd;
  std::vector<int32_t> cu;  // document boundaries
  int64_t T() const { return cu.back(); }
  AttentionParams params() const {
    AttentionParams p;
    p.num_heads = H;
    p.num_kv_heads = KV;
    p.head_dim = hd;
    p.scale = float(1.0 / std::sqrt(double(hd)));
    p.precision = precision;
    p.bf16_kernel = bf16_kernel;
    p.mask = mask;
    p.chunk_rows = chunk_rows;
    return p;
  }
  Precision precision = Precision::fp32;
  Bf16Kernel bf16_kernel = Bf16Kernel::automatic;  // rounded: fp32 SGEMM on rounded operands
  AttentionMask mask;
  int64_t chunk_rows = kAttentionChunkRows;  // the kernel's runs (AttentionParams::chunk_rows)
  std::vector<int32_t> prefix_lens;  // prefix_lm: per document
  std::vector<int32_t> segment_ids;  // shared_question: per token
  // block_sparse: the blocks each query row selects per kv head group, [T][KV][top_blocks]
  // (-1: none), from reference_selection
  std::vector<int32_t> selected;
  MaskData mask_data() const { return {prefix_lens, segment_ids}; }
  // Whether query i reads key j (in-document positions) of document d (with kv head
  // group g), by the definitions in attention_mask.h.
  bool visible(size_t d, int64_t i, int64_t j, int g = 0) const {
    const AttentionMask& m = mask;
    switch (m.kind) {
      case MaskKind::causal: return j <= i;
      case MaskKind::sliding_window: return j <= i && j > i - m.window;
      case MaskKind::sink_window: return j <= i && (j > i - m.window || j < m.sink_tokens);
      case MaskKind::chunked: return j <= i && i / m.block_size == j / m.block_size;
      case MaskKind::prefix_lm: return j <= i || j < prefix_lens[d];
      case MaskKind::shared_question: {
        const int32_t si = segment_ids[size_t(cu[d] + i)], sj = segment_ids[size_t(cu[d] + j)];
        return j <= i && (sj == 0 || sj == si);
      }
      case MaskKind::full_document: return true;
      case MaskKind::bidirectional_window: return j > i - m.window && j < i + m.window;
      case MaskKind::causal_blockwise: return j / m.block_size <= i / m.block_size;
      case MaskKind::block_sparse: {
        if (j > i) return false;
        if (j / m.block_size == i / m.block_size) return true;
        const int32_t* sel = selected.data() + ((cu[d] + i) * KV + g) * m.top_blocks;
        return std::find(sel, sel + m.top_blocks, int32_t(j / m.block_size)) != sel + m.top_blocks;
      }
    }
    return false;
  }
};

// block_sparse's selection straight from its definition (attention_mask.h): per document,
// query and group, the mean query over the group's heads against each earlier block's
// mean key, in double (of the bf16 values under pr.precision = bf16); the top_blocks
// highest (ties to the later block).
std::vector<int32_t> reference_selection(const Problem& pr, const std::vector<float>& q, const std::vector<float>& k);

template <typename Real>
struct Dense {
  std::vector<Real> o, lse, dq, dk, dv;
};

// Dense attention inside each document and its exact backward, computed in Real
// arithmetic: Real = double is the reference, Real = float is the "naive fp32
// implementation" whose error sets the tolerance (FlashAttention's test rule). Defined
// in dense_attention.cpp for float and double, which the sanitizer build compiles at -O3
// and uninstrumented (tests/CMakeLists.txt): instrumented, it was most of the kernel
// tests' time.
template <typename Real>
Dense<Real> dense_attention(const Problem& pr, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, const std::vector<float>& dout);

// Largest absolute difference between a float result and the float64 reference.
template <typename Real>
double max_abs_error(const std::vector<Real>& a, const std::vector<double>& ref) {
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(double(a[i]) - ref[i]));
  return err;
}

// Norm-wise relative error against the float64 reference.
inline double norm_error(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

struct KernelRun {
  std::vector<float> q, k, v, dout, o, lse, dq, dk, dv;
};

// Random inputs and the kernel's forward and backward on them: over the problem's own
// tasks (tasks_for_documents with its mask data), or over `tasks`.
inline KernelRun run_kernel(const Problem& pr, uint64_t seed, const std::vector<AttentionTask>* tasks = nullptr) {
  const int64_t T = pr.T();
  KernelRun r;
  r.q = random_vector(T * pr.H * pr.hd, seed);
  r.k = random_vector(T * pr.KV * pr.hd, seed + 1);
  r.v = random_vector(T * pr.KV * pr.hd, seed + 2);
  r.dout = random_vector(T * pr.H * pr.hd, seed + 3);
  r.o.assign(r.q.size(), 0);
  r.lse.assign(size_t(T * pr.H), 0);
  r.dq.assign(r.q.size(), 0);
  r.dk.assign(r.k.size(), 0);
  r.dv.assign(r.v.size(), 0);
  const std::vector<AttentionTask> doc_tasks = tasks_for_documents(pr.cu, pr.mask_data());
  const std::vector<AttentionTask>& t = tasks ? *tasks : doc_tasks;
  attention_forward(pr.params(), t, r.q.data(), r.k.data(), r.v.data(), r.o.data(), r.lse.data());
  attention_backward(pr.params(), t, r.q.data(), r.k.data(), r.v.data(), r.o.data(), r.lse.data(),
                     r.dout.data(), r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

}  // namespace lct::test
