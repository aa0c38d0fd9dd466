// Internal to the blocked attention kernel (blocked_attention.cpp, and the native bf16
// backward in blocked_attention_bf16.cpp): tile geometry, the causal and DCA rules per
// tile, grow-only scratch and query-tile packing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <utility>

#include "attention/core_attention.h"
#include "compute/gemm.h"

namespace lct::blocked {

// Tile sizes. A tile packs G heads x qb query rows into kPackedRows rows, so the
// block GEMMs have M ~ 128 whatever the GQA ratio; key blocks of 256 rows keep
// K, V, S/P and dP tiles (about 0.5 MiB at hd = 64) inside a 2 MiB L2.
constexpr int64_t kPackedRows = 128;
constexpr int64_t kMinQueryBlock = 16;
constexpr int64_t kKeyBlock = 256;
// The native bf16 backward's work items span up to this many key blocks (the fp32 and
// rounded ones one): its query tiles are packed once per item.
constexpr int64_t kMaxSpanBlocks = 4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// What a row that reads a non-finite score or value gets for its O and LSE (and what a
// NaN LSE turns the backward's P into): see softmax_row in blocked_attention.cpp.
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Geometry {
  int64_t H, KV, hd, G, ldq, ldk;
  int64_t qb;  // query rows per tile (per head)
  int64_t mp;  // packed rows per tile, G * qb
  float scale;
  // DCA: query tiles and key blocks never straddle a chunk boundary (chunk length s),
  // so every (query tile, key block) pair uses one query rotation.
  bool dca;
  int64_t s;
  const DcaParams* dca_params;
  const AttentionMask* mask;
  explicit Geometry(const AttentionParams& p)
      : H(p.num_heads), KV(p.num_kv_heads), hd(p.head_dim), G(H / KV), ldq(H * hd),
        ldk(KV * hd), qb(std::max(kMinQueryBlock, kPackedRows / G)), mp(G * qb),
        scale(p.scale), dca(p.kernel == AttentionKernel::dca),
        s(dca ? p.dca.chunk_len() : INT64_MAX), dca_params(&p.dca), mask(&p.mask) {}
};

// A packed query tile is rotated for keys this many chunks back (0 intra, 1 successive,
// >= 2 inter; the position comes from dca_query_position_at_distance), or not at all:
// causal Q arrives rotated.
constexpr int64_t kNoRotation = -1;

// Logit multiplier of task t: scale, times DCA's per-document temperature.
inline float logit_scale(const Geometry& geo, const AttentionTask& t) {
  if (!geo.dca) return geo.scale;
  return geo.scale * dca_logit_multiplier(document_length(t), *geo.dca_params);
}

// End (task-relative, exclusive) of the query tile starting at row i0. Tiles are
// aligned to in-document positions (multiples of qb), not to the task's first row, so a
// query row lands in the same tile however its document's rows are cut into tasks (CAD
// plans, context-parallel pieces): its arithmetic, and so its O and LSE, do not depend
// on the cut.
inline int64_t query_tile_end(const Geometry& geo, const AttentionTask& t, int64_t i0) {
  const int64_t aligned_end = ((int64_t(t.q_pos) + i0) / geo.qb + 1) * geo.qb - t.q_pos;
  int64_t end = std::min<int64_t>(aligned_end, t.q_len);
  if (geo.dca) end = std::min<int64_t>(end, ((t.q_pos + i0) / geo.s + 1) * geo.s - t.q_pos);
  return end;
}

// Key columns [0, s1) and [b0, b1) (s1 <= b0 <= b1) of the key block [j0, j0 + m)
// (task-relative key rows) that query row i of task t reads under the mask.
struct RowColumns {
  int64_t s1, b0, b1;
  int64_t count() const { return s1 + (b1 - b0); }
};
inline RowColumns row_columns(const Geometry& geo, const AttentionTask& t, int64_t i, int64_t j0, int64_t m) {
  const MaskKeys k = mask_keys(*geo.mask, t.prefix_len, t.segment_pos, int64_t(t.q_pos) + i);
  const int64_t base = int64_t(t.kv_pos) + j0;  // position of column 0
  const auto col = [base, m](int64_t pos) { return std::clamp<int64_t>(pos - base, 0, m); };
  const int64_t b1 = col(k.hi);
  return {col(k.sink_end), std::min(col(k.lo), b1), b1};
}

// Task-relative key ranges read by query rows [i0, i1) of task t: [0, sink_end) and
// [lo, hi), or one range [lo, hi) when they touch (sink_end = 0). Every rule's lo, hi
// and sink_end grow with the query position, so the first and last rows bound them.
struct TileKeys {
  int64_t sink_end, lo, hi;
};
inline TileKeys tile_keys(const Geometry& geo, const AttentionTask& t, int64_t i0, int64_t i1) {
  const MaskKeys first = mask_keys(*geo.mask, t.prefix_len, t.segment_pos, int64_t(t.q_pos) + i0);
  const MaskKeys last = mask_keys(*geo.mask, t.prefix_len, t.segment_pos, int64_t(t.q_pos) + i1 - 1);
  const auto local = [&t](int64_t pos) { return std::clamp<int64_t>(pos - t.kv_pos, 0, t.kv_len); };
  TileKeys r{local(last.sink_end), local(first.lo), local(last.hi)};
  r.lo = std::min(r.lo, r.hi);
  if (r.sink_end >= r.lo) r.lo = 0, r.sink_end = 0;
  return r;
}

// Task-relative query rows [first, end) that read at least one of the task-relative
// key rows [c0, c1) (empty: first >= end).
inline std::pair<int64_t, int64_t> key_block_queries(const Geometry& geo, const AttentionTask& t, int64_t c0,
                                                     int64_t c1) {
  int64_t first = INT64_MAX, last = -1;
  if (geo.mask->causal()) {
    first = int64_t(t.kv_pos) + c0, last = kMaskUnbounded;
  } else {
    for (int64_t c = c0; c < c1; ++c) {
      const MaskQueries q = mask_queries(*geo.mask, t.prefix_len, t.segment_pos, int64_t(t.kv_pos) + c);
      if (q.first > q.last) continue;
      first = std::min(first, q.first), last = std::max(last, q.last);
    }
    if (last < 0) return {0, 0};
  }
  const auto local = [&t](int64_t pos) { return std::clamp<int64_t>(pos - t.q_pos, 0, t.q_len); };
  return {local(first), local(std::min(last, kMaskUnbounded - 1) + 1)};
}

// Grow-only, 64-byte aligned buffer: after the first step of a run the kernel
// allocates nothing.
template <typename T>
class Scratch {
 public:
  T* get(size_t count) {
    if (count > capacity_) {
      void* p = std::aligned_alloc(64, ((count * sizeof(T) + 63) / 64) * 64);
      if (!p) throw std::bad_alloc();
      data_.reset(static_cast<T*>(p));
      capacity_ = count;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t capacity_ = 0;
};

// Packs query rows [i0, i0+n) of task t for the G heads of kv head g into
// dst [G*n, hd] (packed row r = hh*n + i), multiplied by factor and, for DCA,
// rotated for keys chunk_distance chunks back (HF rotate_half convention). With
// bf16_source the source values are rounded to bf16 first (a bf16 kernel's Q: see Arith).
inline void pack_rows(const Geometry& geo, const AttentionTask& t, int64_t g, int64_t i0,
                      int64_t n, const float* src, float factor, float* dst,
                      int64_t chunk_distance = kNoRotation, bool bf16_source = false) {
  const int64_t half = geo.hd / 2;
  for (int64_t i = 0; i < n; ++i) {
    const float* cs = nullptr;
    const float* sn = nullptr;
    if (chunk_distance != kNoRotation) {
      const int64_t p =
          dca_query_position_at_distance(t.q_pos + i0 + i, chunk_distance, *geo.dca_params);
      cs = geo.dca_params->rope_cos + p * half;
      sn = geo.dca_params->rope_sin + p * half;
    }
    for (int64_t hh = 0; hh < geo.G; ++hh) {
      const float* s = src + (t.q_row + i0 + i) * geo.ldq + (g * geo.G + hh) * geo.hd;
      float* d = dst + (hh * n + i) * geo.hd;
      if (bf16_source) {  // round into dst, then scale / rotate in place below
#pragma omp simd
        for (int64_t c = 0; c < geo.hd; ++c) d[c] = round_to_bf16(s[c]);
        s = d;
      }
      if (!cs) {
#pragma omp simd
        for (int64_t c = 0; c < geo.hd; ++c) d[c] = s[c] * factor;
        continue;
      }
#pragma omp simd
      for (int64_t c = 0; c < half; ++c) {
        const float a = s[c], b = s[c + half];
        d[c] = factor * (a * cs[c] - b * sn[c]);
        d[c + half] = factor * (b * cs[c] + a * sn[c]);
      }
    }
  }
}

// How the block products are computed.
//   fp32          OpenBLAS SGEMM on the fp32 values.
//   bf16_rounded  every product operand (Q, K, V, dO, P, dS) rounded to bf16, SGEMM
//                 on the rounded values (any CPU; the same numbers as bf16_native up to
//                 fp32 summation order).
//   bf16_native   bf16 operands in the AVX512-BF16 microkernel (bf16_tiles.h).
// In bf16 the kernel reads its inputs Q, K, V, O and dO as bf16 values: Q is rounded
// before it is scaled (and, for DCA, rotated) and rounded again for the product, and
// D = rowsum(dO * O) sums products of the rounded dO and O. So a placement may carry
// all five in bf16 without changing a bit. Softmax statistics, LSE, D and every
// accumulator stay fp32.
enum class Arith { fp32, bf16_rounded, bf16_native };

// x = bf16(x) for rows x cols of a matrix with row stride ld.
inline void round_rows(float* x, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) row[c] = round_to_bf16(row[c]);
  }
}

// DCA backward: dq += R(p)^T d(rotated q) for the packed tile (kv head g, query rows
// [i0, i0+n) of task t, rotated for keys chunk_distance chunks back). Element (packed
// row r, column c) of d(rotated q) is at src[r * row_stride + c * col_stride].
inline void add_rotated_back(const Geometry& geo, const AttentionTask& t, int64_t g, int64_t i0,
                             int64_t n, int64_t chunk_distance, const float* src,
                             int64_t row_stride, int64_t col_stride, float* dq) {
  const int64_t half = geo.hd / 2;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p =
        dca_query_position_at_distance(t.q_pos + i0 + i, chunk_distance, *geo.dca_params);
    const float* cs = geo.dca_params->rope_cos + p * half;
    const float* sn = geo.dca_params->rope_sin + p * half;
    for (int64_t hh = 0; hh < geo.G; ++hh) {
      const float* s = src + (hh * n + i) * row_stride;
      float* dst = dq + (t.q_row + i0 + i) * geo.ldq + (g * geo.G + hh) * geo.hd;
#pragma omp simd
      for (int64_t c = 0; c < half; ++c) {
        // forward: y_c = x_c cos - x_{c+h} sin ; y_{c+h} = x_{c+h} cos + x_c sin
        const float a = s[c * col_stride], b = s[(c + half) * col_stride];
        dst[c] += a * cs[c] + b * sn[c];
        dst[c + half] += b * cs[c] - a * sn[c];
      }
    }
  }
}

// K and V as the forward products read them (the bf16_native fields are made by
// make_bf16_forward_keys below).
struct ForwardKeys {
  const float* k = nullptr;  // fp32, bf16_rounded: K and V rows (rounded for the latter)
  const float* v = nullptr;
  const uint32_t* kt = nullptr;  // bf16_native: K^T pair words [KV, hd/2, kt_ld]
  int64_t kt_ld = 0;
  const uint32_t* vp = nullptr;  // bf16_native: V row pairs (rows 2p, 2p+1) [KV, vp_pairs, hd]
  int64_t vp_pairs = 0;
};

// ---- native bf16 (blocked_attention_bf16.cpp) -------------------------------------

// Native forward keys from fp32 K and V rows [0, rows); storage grows in the buffers.
ForwardKeys make_bf16_forward_keys(const Geometry& geo, const float* k, const float* v, int64_t rows,
                                   Scratch<uint16_t>& halves, Scratch<uint32_t>& words);

// bf16 copies of K and V that the native backward reads, built once per call.
struct BackwardKeys {
  const uint16_t* k = nullptr;   // K rows  [rows, KV * hd]
  const uint16_t* v = nullptr;   // V rows  [rows, KV * hd]
  const uint16_t* kt = nullptr;  // K^T     [KV, hd, kt_ld] (zero beyond the last row)
  int64_t kt_ld = 0;
};
BackwardKeys make_bf16_backward_keys(const Geometry& geo, const float* k, const float* v,
                                     int64_t rows, Scratch<uint16_t>& halves);

// One thread's tile storage for the native backward, and its sizes per element type.
struct Bf16Tile {
  float* f;
  uint16_t* h;
  uint32_t* w;
};
struct Bf16TileSizes {
  size_t floats, halves, words;
};
Bf16TileSizes bf16_backward_tile_sizes(const Geometry& geo);

// dK/dV of key rows [row_begin, row_end) of kv head g (up to kMaxSpanBlocks key blocks of
// kKeyBlock rows from row_begin), and the dQ they feed, for the tasks tasks[order[i]]
// (which share those key rows): the same work as the fp32 backward_key_block, with every
// product in bf16 (see blocked_attention_bf16.cpp).
void backward_key_block_bf16(const Geometry& geo, std::span<const AttentionTask> tasks,
                             std::span<const int32_t> order, int64_t g, int64_t row_begin,
                             int64_t row_end, const BackwardKeys& keys, const float* q,
                             const float* lse, const float* dout, const float* row_dot,
                             float* dq, float* dk, float* dv, const Bf16Tile& tile);

}  // namespace lct::blocked
