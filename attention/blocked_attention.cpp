#include "attention/blocked_attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <tuple>
#include <utility>
#include <vector>

#include "compute/bf16_tiles.h"
#include "attention/blocked_attention_tiles.h"
#include "compute/vector_math.h"

namespace lct {
namespace {

using namespace blocked;

struct ForwardItem {
  int32_t task;
  int32_t kv_head;
  int32_t block_start;  // first query row of the block, task-relative
  int32_t block_len;
  int64_t cost;         // packed rows x visible keys, for largest-first scheduling
};

struct KeyBlockItem {
  int32_t group;  // index into the key-sharing task groups
  int32_t kv_head;
  int64_t row_begin, row_end;  // absolute key rows owned by this item
  int64_t cost;                // attended pairs for one head
  int32_t thread;              // assigned by the deterministic greedy
};

struct TaskGroup {
  int32_t first, last;  // range in Workspace::task_order
};

// Per calling thread (thread_local): each caller of the kernel (the placements, lct
// generate's decoder, lct bench, CAD's cost measurement) reuses its thread's; grow-only.
struct Workspace {
  Scratch<float> tiles;       // per-thread tiles
  Scratch<uint16_t> tiles16;  // bf16_native: per-thread bf16 tiles
  Scratch<uint32_t> tiles32;  // bf16_native: per-thread pair-word tiles
  Scratch<float> row_dot;     // D = rowsum(dO * O), [rows, H]
  Scratch<float> private_dq;  // (threads - 1) x [rows, H, hd]
  Scratch<float> rounded_kv;  // bf16_rounded: K and V rounded to bf16
  Scratch<uint16_t> key_halves;  // bf16_native: K and V in bf16
  Scratch<uint32_t> key_words;   // bf16_native: K and V as pair words
  std::vector<ForwardItem> forward_items;
  std::vector<KeyBlockItem> key_items;
  std::vector<int32_t> task_order;
  std::vector<TaskGroup> groups;
  std::vector<int64_t> thread_load;
};
thread_local Workspace tls_workspace;

Arith arith_of(const AttentionParams& p) {
  if (p.precision == Precision::fp32) return Arith::fp32;
  const bool native = p.bf16_kernel != Bf16Kernel::rounded && bf16_support().instructions &&
                      bf16_tiles::available() && p.head_dim % 2 == 0;
  return native ? Arith::bf16_native : Arith::bf16_rounded;
}

// Key rows [0, key_rows(tasks)) hold every task's keys.
int64_t key_rows(std::span<const AttentionTask> tasks) {
  int64_t rows = 0;
  for (const AttentionTask& t : tasks)
    if (t.kv_len > 0) rows = std::max<int64_t>(rows, t.kv_row + t.kv_len);
  return rows;
}

// bf16_rounded: K and V rounded to bf16 into the workspace; returns the copies.
std::pair<const float*, const float*> rounded_keys(const Geometry& geo, const float* k,
                                                    const float* v, int64_t rows, Workspace& ws) {
  const int64_t n = rows * geo.ldk;
  float* rk = ws.rounded_kv.get(size_t(2 * n));
  float* rv = rk + n;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) rk[i] = round_to_bf16(k[i]), rv[i] = round_to_bf16(v[i]);
  return {rk, rv};
}

size_t forward_tile_floats(const Geometry& geo) {
  // Qp [3][mp, hd] (one per DCA rotation), S [mp, kKeyBlock], acc [mp, hd], row max and
  // sum [mp], a value block with its non-finite values zeroed [kKeyBlock, hd]
  // (sanitize_values); padded to 64 B
  return ((geo.mp * (4 * geo.hd + kKeyBlock + 2) + kKeyBlock * geo.hd + 15) / 16) * 16;
}

// Row stride of the native kernel's bf16 P tile: a leading zero column when the key
// block starts at an odd row (V pairs start at even rows), a trailing one to even length.
constexpr int64_t kPStride = kKeyBlock + 2;

size_t forward_tile_halves(const Geometry& geo) {  // native: Qp and P in bf16
  return ((geo.mp * (geo.hd + kPStride) + 31) / 32) * 32;
}

size_t forward_tile_words(const Geometry& geo) {  // native: a value block's pair words, sanitized
  return (((kPStride / 2) * geo.hd + 15) / 16) * 16;
}

// One row of a score tile through the online softmax. The row (query i of task t) reads
// columns [0, s1) and [b0, b1) of the key block [j0, j0 + m) under the mask (causal:
// [0, b1)): those become exp(s - the new running max), the others 0, and the running
// max, sum and accumulator row are rescaled to the new max. Returns how many columns the
// row reads.
//
// Non-finite scores (issue 87): the row's sum also adds s * 0 for every score it reads.
// That is +-0 for a finite s, and e + 0 = e for the e > 0 fast_exp gives, so a finite row
// keeps its bits; for a NaN or an infinity it is NaN, and row_sum then stays NaN in every
// later block (NaN * correction + sum is NaN), which forward_tile turns into O = LSE = NaN
// at the row's end. Neither the max nor the exponentials could tell: max_of's
// `a > b ? a : b` drops a NaN that a number follows, -inf never wins it, fast_exp clamps
// -inf to 1e-38 and its bit arithmetic may turn a NaN into a number. Once row_sum is NaN
// the row's max, correction and P may be anything; they reach no other row (P's row r
// feeds only acc's row r). The one extra multiply-add per score is free next to the
// exponential and the two products of hd multiply-adds each.
inline int64_t softmax_row(const Geometry& geo, const AttentionTask& t, int64_t i, int64_t j0, int64_t m,
                           float* sr, float& row_max, float& row_sum, float* acc_row) {
  const RowColumns rc = row_columns(geo, t, i, j0, m);
  if (rc.count() == 0) {  // the row sees none of this block: P row is zero
    std::fill(sr, sr + m, 0.0f);
    return 0;
  }
  const float mx = max_of(sr + rc.b0, rc.b1 - rc.b0, max_of(sr, rc.s1, row_max));
  // online softmax: rescale the running sum and accumulator to the new max
  const float correction = row_max == kNegInf ? 0.0f : fast_exp(row_max - mx);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < rc.s1; ++c) {
    const float x = sr[c], e = fast_exp(x - mx);
    sr[c] = e;
    sum += e + x * 0.0f;
  }
#pragma omp simd reduction(+ : sum)
  for (int64_t c = rc.b0; c < rc.b1; ++c) {
    const float x = sr[c], e = fast_exp(x - mx);
    sr[c] = e;
    sum += e + x * 0.0f;
  }
  std::fill(sr + rc.s1, sr + rc.b0, 0.0f);
  std::fill(sr + rc.b1, sr + m, 0.0f);
  row_sum = row_sum * correction + sum;
  row_max = mx;
  if (correction != 1.0f) {
#pragma omp simd
    for (int64_t d = 0; d < geo.hd; ++d) acc_row[d] *= correction;
  }
  return rc.count();
}

// Non-finite values. A value row a tile's row reads enters its accumulator with weight P >
// 0 (fast_exp never gives 0, nor a bf16 subnormal), so inf or NaN in it makes that row's
// accumulator non-finite, which the row's end turns into O = LSE = NaN. But the product
// acc += P V also multiplies every value row of the block by the P = 0 of the rows that do
// not read it (masked columns, and the native kernel's pad rows), and 0 * inf = NaN would
// reach them. So a block that some row of the tile reads only partly (or, natively, whose
// pad rows are not its own) is checked for non-finite values first; they are rare, so the
// check is all the common case pays (a pass over the block's values, next to the
// products' M passes), and in the slow path below the product reads a copy with them
// zeroed while every row that reads one of those keys gets row_sum = NaN (as if its score
// were NaN). Blocks every row reads whole need no check: the row's end catches them.

// Whether the rows x [rows, cols] (row stride ld) are all finite: x * 0 is 0 for a finite
// x and NaN for inf and NaN, so their sum tells, without a branch in the loop.
inline bool rows_finite(const float* x, int64_t rows, int64_t cols, int64_t ld) {
  float z = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ld;
#pragma omp simd reduction(+ : z)
    for (int64_t c = 0; c < cols; ++c) z += row[c] * 0.0f;
  }
  return z == 0.0f;
}

// A bf16 value is an infinity or a NaN when its exponent bits are all ones.
inline bool bf16_finite(uint32_t bits) { return (bits & 0x7f80u) != 0x7f80u; }

// Whether n pair words hold only finite bf16 values in their low and / or high halves.
inline bool words_finite(const uint32_t* w, int64_t n, bool low, bool high) {
  const uint32_t lo = low ? 1u : 0u, hi = high ? 1u : 0u;
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i)
    bad |= (uint32_t((w[i] & 0x7f80u) == 0x7f80u) & lo) | (uint32_t((w[i] & 0x7f800000u) == 0x7f800000u) & hi);
  return bad == 0;
}

// Rows of the tile (query rows [i0, i0 + n) of task t) that read a key column c of the
// block [j0, j0 + m) with bad[c] get row_sum = NaN.
void mark_rows_reading(const Geometry& geo, const AttentionTask& t, int64_t i0, int64_t n, int64_t j0, int64_t m,
                       const bool* bad, float* row_sum) {
  for (int64_t r = 0; r < geo.G * n; ++r) {
    const RowColumns rc = row_columns(geo, t, i0 + r % n, j0, m);
    bool reads = false;
    for (int64_t c = 0; c < rc.s1 && !reads; ++c) reads = bad[c];
    for (int64_t c = rc.b0; c < rc.b1 && !reads; ++c) reads = bad[c];
    if (reads) row_sum[r] = kNaN;
  }
}

// fp32 and bf16_rounded: the value block vblk [m, hd] (row stride ldk) into vs [m, hd] with
// its non-finite values 0, and the rows reading those keys marked.
void sanitize_values(const Geometry& geo, const AttentionTask& t, int64_t i0, int64_t n, int64_t j0, int64_t m,
                     const float* vblk, float* vs, float* row_sum) {
  bool bad[kKeyBlock];
  for (int64_t c = 0; c < m; ++c) {
    const float* src = vblk + c * geo.ldk;
    float* dst = vs + c * geo.hd;
    bool b = false;
    for (int64_t d = 0; d < geo.hd; ++d) {
      const bool finite = std::isfinite(src[d]);
      dst[d] = finite ? src[d] : 0.0f;
      b = b || !finite;
    }
    bad[c] = b;
  }
  mark_rows_reading(geo, t, i0, n, j0, m, bad, row_sum);
}

// bf16_native: the block's value pair words src [pairs, hd] (the first pair's low half is
// the key column -lead) into dst with non-finite halves 0, and the rows reading them marked.
void sanitize_value_words(const Geometry& geo, const AttentionTask& t, int64_t i0, int64_t n, int64_t j0, int64_t m,
                          const uint32_t* src, int64_t pairs, int64_t lead, uint32_t* dst, float* row_sum) {
  bool bad[kKeyBlock] = {};
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t d = 0; d < geo.hd; ++d) {
      uint32_t lo = src[p * geo.hd + d] & 0xffffu, hi = src[p * geo.hd + d] >> 16;
      const int64_t c_lo = 2 * p - lead, c_hi = c_lo + 1;  // their key columns (pads: -1, m)
      if (!bf16_finite(lo)) {
        lo = 0;
        if (c_lo >= 0 && c_lo < m) bad[c_lo] = true;
      }
      if (!bf16_finite(hi)) {
        hi = 0;
        if (c_hi < m) bad[c_hi] = true;
      }
      dst[p * geo.hd + d] = lo | hi << 16;
    }
  mark_rows_reading(geo, t, i0, n, j0, m, bad, row_sum);
}

void forward_tile(const Geometry& geo, Arith arith, const AttentionTask& t, int64_t g, int64_t i0,
                  int64_t n, const float* q, const ForwardKeys& keys, float* out, float* lse,
                  float* tile, uint16_t* tile16, uint32_t* tile32) {
  const int64_t hd = geo.hd, M = geo.G * n;
  const bool native = arith == Arith::bf16_native;
  uint16_t* qb = tile16;             // native: bf16 Qp [mp, hd]
  uint16_t* pb = qb + geo.mp * hd;   // native: bf16 P [mp, kPStride]
  float* qp_parts = tile;  // up to three packed query tiles
  float* s = qp_parts + 3 * geo.mp * hd;
  float* acc = s + geo.mp * kKeyBlock;
  float* row_max = acc + geo.mp * hd;
  float* row_sum = row_max + geo.mp;
  float* clean_v = row_sum + geo.mp;  // fp32, rounded: a value block, non-finite values zeroed
  uint32_t* clean_vp = tile32;        // native: the same as pair words

  std::fill(row_max, row_max + M, kNegInf);
  std::fill(row_sum, row_sum + M, 0.0f);
  std::fill(acc, acc + M * hd, 0.0f);

  const float* kg = keys.k + t.kv_row * geo.ldk + g * hd;
  const float* vg = keys.v + t.kv_row * geo.ldk + g * hd;
  const TileKeys tk = tile_keys(geo, t, i0, i0 + n);

  // Key ranges that share one query rotation. Causal: the tile's keys, Q as given (the
  // mask's sink range, then its band). DCA (causal only; the tile lies in chunk c):
  // keys of chunks < c-1 (inter), of chunk c-1 (successive), of chunk c (intra), by
  // in-document offset.
  struct Part {
    int64_t lo, hi;
    int64_t chunk_distance;
  } parts[3];
  int num_parts = 0;
  if (!geo.dca) {
    if (tk.sink_end > 0) parts[num_parts++] = {0, tk.sink_end, kNoRotation};
    parts[num_parts++] = {tk.lo, tk.hi, kNoRotation};
  } else {
    const int64_t key_end = tk.hi;
    const int64_t c = (t.q_pos + i0) / geo.s;
    const int64_t b1 = std::clamp<int64_t>((c - 1) * geo.s - t.kv_pos, 0, key_end);
    const int64_t b2 = std::clamp<int64_t>(c * geo.s - t.kv_pos, 0, key_end);
    parts[num_parts++] = {0, b1, 2};   // inter
    parts[num_parts++] = {b1, b2, 1};  // successive
    parts[num_parts++] = {b2, key_end, 0};  // intra
  }

  // Qp = logit scale * (rotated) Q, so S = Qp K^T are the logits.
  const float factor = logit_scale(geo, t);
  float* qp = nullptr;
  int64_t packed_for = kNoRotation - 1;  // the rotation qp holds (none yet)
  for (int pi = 0; pi < num_parts; ++pi) {
    const Part& part = parts[pi];
    if (part.lo >= part.hi) continue;
    if (part.chunk_distance != packed_for) {  // the two ranges of a mask share one packing
      qp = qp_parts + pi * geo.mp * hd;
      pack_rows(geo, t, g, i0, n, q, factor, qp, part.chunk_distance, arith != Arith::fp32);
      if (arith == Arith::bf16_rounded) round_rows(qp, M, hd, hd);
      if (native) bf16_tiles::to_bf16(qp, M * hd, 1.0f, qb);
      packed_for = part.chunk_distance;
    }
    for (int64_t j0 = part.lo; j0 < part.hi; j0 += kKeyBlock) {
      const int64_t m = std::min(kKeyBlock, part.hi - j0);
      // S [M, m] = Qp K_blk^T
      if (native)
        bf16_tiles::gemm(M, m, hd / 2, 1.0f, qb, hd,
                         keys.kt + g * (hd / 2) * keys.kt_ld + t.kv_row + j0, keys.kt_ld, false, s,
                         kKeyBlock);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(m), int(hd), 1.0f, qp,
                    int(hd), kg + j0 * geo.ldk, int(geo.ldk), 0.0f, s, int(kKeyBlock));
      // native: P in bf16 [M, kPStride], each row converted while it is in L1, shifted by
      // one column when the key block starts at an odd row (V pairs start at even rows)
      const int64_t row0 = t.kv_row + j0, lead = row0 & 1, width = lead + m + ((lead + m) & 1);
      bool partial = false;  // some row of the tile reads only part of the block
      for (int64_t r = 0; r < M; ++r) {
        float* sr = s + r * kKeyBlock;
        partial |= softmax_row(geo, t, i0 + r % n, j0, m, sr, row_max[r], row_sum[r], acc + r * hd) < m;
        if (native) {
          uint16_t* pr = pb + r * kPStride;
          pr[0] = pr[width - 1] = 0;
          bf16_tiles::to_bf16(sr, m, 1.0f, pr + lead);
        }
      }
      // acc [M, hd] += P V_blk, from a copy without non-finite values where a P of 0 would
      // meet them (see sanitize_values)
      if (native) {
        const uint32_t* vp = keys.vp + (g * keys.vp_pairs + (row0 - lead) / 2) * hd;
        const int64_t pairs = width / 2;
        const bool trail = ((lead + m) & 1) != 0;  // the last pair's high half is a pad row
        const bool finite = partial ? words_finite(vp, pairs * hd, true, true)
                                    : (!lead || words_finite(vp, hd, true, false)) &&
                                          (!trail || words_finite(vp + (pairs - 1) * hd, hd, false, true));
        if (!finite) {
          sanitize_value_words(geo, t, i0, n, j0, m, vp, pairs, lead, clean_vp, row_sum);
          vp = clean_vp;
        }
        bf16_tiles::gemm(M, hd, pairs, 1.0f, pb, kPStride, vp, hd, true, acc, hd);
      } else {
        if (arith == Arith::bf16_rounded) round_rows(s, M, m, kKeyBlock);
        const float* vb = vg + j0 * geo.ldk;
        int64_t ldv = geo.ldk;
        if (partial && !rows_finite(vb, m, hd, geo.ldk)) {
          sanitize_values(geo, t, i0, n, j0, m, vb, clean_v, row_sum);
          vb = clean_v, ldv = hd;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(hd), int(m), 1.0f, s,
                    int(kKeyBlock), vb, int(ldv), 1.0f, acc, int(hd));
      }
    }
  }

  // A row's sum is > 0 when it read a key (each adds e >= 1e-38), 0 when it read none, NaN
  // when it read a non-finite score or value (softmax_row, sanitize_values); a finite sum
  // with a non-finite accumulator is a non-finite value it read (with weight P > 0). Both
  // non-finite cases give O = LSE = NaN (issue 87: never the no-key branch's zeros).
  for (int64_t r = 0; r < M; ++r) {
    const int64_t i = r % n, h = g * geo.G + r / n;
    float* o = out + (t.q_row + i0 + i) * geo.ldq + h * hd;
    float* l = lse + (t.q_row + i0 + i) * geo.H + h;
    const float sum = row_sum[r];
    if (sum > 0.0f) {
      const float inv = 1.0f / sum;  // (sum is about 1 or more, the max's own term: o stays finite)
      const float* a = acc + r * hd;
      float z = 0.0f;  // +-0, or NaN when a value is not finite
#pragma omp simd reduction(+ : z)
      for (int64_t d = 0; d < hd; ++d) {
        o[d] = a[d] * inv;
        z += o[d] * 0.0f;
      }
      if (z == 0.0f) {
        *l = float(double(row_max[r]) + std::log(double(sum)));  // rounded once
        continue;
      }
    } else if (sum == 0.0f) {  // no visible key
      std::fill(o, o + hd, 0.0f);
      *l = kNegInf;
      continue;
    }
    std::fill(o, o + hd, kNaN);
    *l = kNaN;
  }
}

size_t backward_tile_floats(const Geometry& geo) {
  // Qp, dOp, dQp [mp, hd]; P, dS [mp, kKeyBlock]; LSE, D [mp]
  return ((geo.mp * (3 * geo.hd + 2 * kKeyBlock + 2) + 15) / 16) * 16;
}

// Groups tasks whose key rows overlap (CP/CAD shards of one document may share a
// prefix) so that one key-block item owns dK/dV rows across all of them.
void group_tasks_by_keys(std::span<const AttentionTask> tasks, Workspace& ws) {
  ws.task_order.clear();
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].q_len > 0 && tasks[i].kv_len > 0) ws.task_order.push_back(int32_t(i));
  // (std::sort with a total order: deterministic, and unlike stable_sort it allocates nothing)
  std::sort(ws.task_order.begin(), ws.task_order.end(), [&](int32_t a, int32_t b) {
    return tasks[a].kv_row != tasks[b].kv_row ? tasks[a].kv_row < tasks[b].kv_row : a < b;
  });
  ws.groups.clear();
  int64_t group_end = -1;
  for (int32_t idx = 0; idx < int32_t(ws.task_order.size()); ++idx) {
    const AttentionTask& t = tasks[ws.task_order[idx]];
    if (ws.groups.empty() || t.kv_row >= group_end) {
      ws.groups.push_back({idx, idx + 1});
      group_end = t.kv_row + t.kv_len;
    } else {
      ws.groups.back().last = idx + 1;
      group_end = std::max<int64_t>(group_end, t.kv_row + t.kv_len);
    }
  }
}

// Pairs (query, key) of task t whose key lies in task-local keys [c0, c1).
int64_t pairs_in_keys(const Geometry& geo, const AttentionTask& t, int64_t c0, int64_t c1) {
  int64_t pairs = 0;
  if (geo.mask->causal()) {
    for (int64_t c = c0; c < c1; ++c)
      pairs += std::clamp<int64_t>(int64_t(t.q_pos) + t.q_len - t.kv_pos - c, 0, t.q_len);
    return pairs;
  }
  const int64_t q0 = t.q_pos, q1 = int64_t(t.q_pos) + t.q_len;  // [q0, q1)
  for (int64_t c = c0; c < c1; ++c) {
    const MaskQueries q = mask_queries(*geo.mask, t.prefix_len, t.segment_pos, int64_t(t.kv_pos) + c);
    pairs += std::max<int64_t>(0, std::min(q.last + 1, q1) - std::max(q.first, q0));
  }
  return pairs;
}

void backward_key_block(const Geometry& geo, bool rounded, std::span<const AttentionTask> tasks,
                        const Workspace& ws, const KeyBlockItem& item, const float* q,
                        const float* k, const float* v, const float* lse, const float* dout,
                        const float* row_dot, float* dq, float* dk, float* dv, float* tile) {
  const int64_t hd = geo.hd, g = item.kv_head;
  float* qp = tile;
  float* dop = qp + geo.mp * hd;
  float* p = dop + geo.mp * hd;
  float* ds = p + geo.mp * kKeyBlock;
  float* lse_p = ds + geo.mp * kKeyBlock;
  float* dd = lse_p + geo.mp;
  float* dqp = dd + geo.mp;  // DCA: dQ of the rotated tile before rotating back
  const TaskGroup& group = ws.groups[item.group];

  for (int32_t idx = group.first; idx < group.last; ++idx) {
    const AttentionTask& t = tasks[ws.task_order[idx]];
    const int64_t c0 = std::max<int64_t>(item.row_begin - t.kv_row, 0);
    const int64_t c1 = std::min<int64_t>(item.row_end - t.kv_row, t.kv_len);
    if (c0 >= c1) continue;
    const int64_t mc = c1 - c0;
    const float* kc = k + (t.kv_row + c0) * geo.ldk + g * hd;
    const float* vc = v + (t.kv_row + c0) * geo.ldk + g * hd;
    float* dkc = dk + (t.kv_row + c0) * geo.ldk + g * hd;
    float* dvc = dv + (t.kv_row + c0) * geo.ldk + g * hd;
    // the query rows that read any of keys [c0, c1)
    const auto [i_first, i_end] = key_block_queries(geo, t, c0, c1);
    const float factor = logit_scale(geo, t);
    const int64_t key_chunk = geo.dca ? (t.kv_pos + c0) / geo.s : 0;  // one chunk per block

    for (int64_t i0 = i_first, i1; i0 < i_end; i0 = i1) {
      i1 = std::min(query_tile_end(geo, t, i0), i_end);
      const int64_t n = i1 - i0, M = geo.G * n;
      const int64_t chunk_distance =
          geo.dca ? (t.q_pos + i0) / geo.s - key_chunk : kNoRotation;
      pack_rows(geo, t, g, i0, n, q, factor, qp, chunk_distance, rounded);
      pack_rows(geo, t, g, i0, n, dout, 1.0f, dop);
      if (rounded) round_rows(qp, M, hd, hd), round_rows(dop, M, hd, hd);
      for (int64_t r = 0; r < M; ++r) {
        const int64_t row = t.q_row + i0 + r % n, h = g * geo.G + r / n;
        lse_p[r] = lse[row * geo.H + h];
        dd[r] = row_dot[row * geo.H + h];
      }
      // forward was S = Qp K^T, P = exp(S - LSE)        [M, mc]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(mc), int(hd), 1.0f, qp,
                  int(hd), kc, int(geo.ldk), 0.0f, p, int(kKeyBlock));
      for (int64_t r = 0; r < M; ++r) {
        float* pr = p + r * kKeyBlock;
        // the row reads columns [0, s1) and [b0, b1) of this block (causal: [0, b1))
        RowColumns rc = row_columns(geo, t, i0 + r % n, c0, mc);
        if (lse_p[r] == kNegInf) rc = {0, 0, 0};
        const float shift = lse_p[r];
        // P = exp(S - LSE) + (S - LSE) * 0: NaN where the score or the row's LSE is not
        // finite (a row whose forward read a non-finite score or value has LSE NaN), so the
        // gradients the row touches are NaN, not fast_exp's number for -inf or a NaN; else
        // exactly fast_exp's P (e + 0 = e). (A finite difference overflows only for scores
        // beyond 1.7e38, where no fp32 softmax means anything.)
#pragma omp simd
        for (int64_t c = 0; c < rc.s1; ++c) {
          const float x = pr[c] - shift;
          pr[c] = fast_exp(x) + x * 0.0f;
        }
#pragma omp simd
        for (int64_t c = rc.b0; c < rc.b1; ++c) {
          const float x = pr[c] - shift;
          pr[c] = fast_exp(x) + x * 0.0f;
        }
        std::fill(pr + rc.s1, pr + rc.b0, 0.0f);
        std::fill(pr + rc.b1, pr + mc, 0.0f);
      }
      // dP [M, mc] = dO V_blk^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(mc), int(hd), 1.0f, dop,
                  int(hd), vc, int(geo.ldk), 0.0f, ds, int(kKeyBlock));
      // softmax backward: dS = P * (dP - D), D = rowsum(dO * O)
      for (int64_t r = 0; r < M; ++r) {
        const float* pr = p + r * kKeyBlock;
        float* dsr = ds + r * kKeyBlock;
        const float d = dd[r];
#pragma omp simd
        for (int64_t c = 0; c < mc; ++c) dsr[c] = pr[c] * (dsr[c] - d);
      }
      if (rounded) round_rows(ds, M, mc, kKeyBlock);
      // forward was O = P V  ->  dV_blk [mc, hd] += P^T dO (after dS, which takes P in fp32)
      if (rounded) round_rows(p, M, mc, kKeyBlock);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(mc), int(hd), int(M), 1.0f, p,
                  int(kKeyBlock), dop, int(hd), 1.0f, dvc, int(geo.ldk));
      // S = scale Q K^T -> dK_blk += scale dS^T Q = dS^T Qp
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(mc), int(hd), int(M), 1.0f, ds,
                  int(kKeyBlock), qp, int(hd), 1.0f, dkc, int(geo.ldk));
      if (chunk_distance == kNoRotation) {
        // dQ += scale dS K_blk, written per head straight into the strided rows
        for (int64_t hh = 0; hh < geo.G; ++hh)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(hd), int(mc),
                      factor, ds + hh * n * kKeyBlock, int(kKeyBlock), kc, int(geo.ldk), 1.0f,
                      dq + (t.q_row + i0) * geo.ldq + (g * geo.G + hh) * hd, int(geo.ldq));
      } else {
        // DCA: d(rotated q) = scale dS K_blk, then dq += R(p)^T d(rotated q)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(hd), int(mc), factor,
                    ds, int(kKeyBlock), kc, int(geo.ldk), 0.0f, dqp, int(hd));
        add_rotated_back(geo, t, g, i0, n, chunk_distance, dqp, hd, 1, dq);
      }
    }
  }
}

}  // namespace

void blocked_attention_release_workspace() { tls_workspace = Workspace(); }

void blocked_attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse) {
  const Geometry geo(params);
  Workspace& ws = tls_workspace;
  auto& items = ws.forward_items;
  items.clear();
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    const AttentionTask& t = tasks[ti];
    for (int64_t i0 = 0, i1; i0 < t.q_len; i0 = i1) {
      i1 = query_tile_end(geo, t, i0);
      const int64_t n = i1 - i0;
      const TileKeys tk = tile_keys(geo, t, i0, i1);
      const int64_t cost = n * (tk.sink_end + tk.hi - tk.lo + 1);
      for (int64_t g = 0; g < geo.KV; ++g)
        items.push_back({int32_t(ti), int32_t(g), int32_t(i0), int32_t(n), cost});
    }
  }
  // Largest tiles first: dynamic scheduling then balances the causal triangle.
  std::sort(items.begin(), items.end(), [](const ForwardItem& a, const ForwardItem& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    if (a.task != b.task) return a.task < b.task;
    return a.block_start != b.block_start ? a.block_start < b.block_start : a.kv_head < b.kv_head;
  });

  const Arith arith = arith_of(params);
  ForwardKeys keys;
  keys.k = k, keys.v = v;
  const int64_t rows = key_rows(tasks);
  if (arith == Arith::bf16_rounded) std::tie(keys.k, keys.v) = rounded_keys(geo, k, v, rows, ws);
  if (arith == Arith::bf16_native)
    keys = make_bf16_forward_keys(geo, k, v, rows, ws.key_halves, ws.key_words);

  const int threads = std::max(1, std::min<int>(omp_get_max_threads(), int(items.size())));
  const size_t per_thread = forward_tile_floats(geo);
  const size_t per_thread16 = arith == Arith::bf16_native ? forward_tile_halves(geo) : 0;
  const size_t per_thread32 = arith == Arith::bf16_native ? forward_tile_words(geo) : 0;
  float* tiles = ws.tiles.get(per_thread * threads);
  uint16_t* tiles16 = per_thread16 ? ws.tiles16.get(per_thread16 * threads) : nullptr;
  uint32_t* tiles32 = per_thread32 ? ws.tiles32.get(per_thread32 * threads) : nullptr;
#pragma omp parallel num_threads(threads)
  {
    float* tile = tiles + per_thread * omp_get_thread_num();
    uint16_t* tile16 = tiles16 ? tiles16 + per_thread16 * omp_get_thread_num() : nullptr;
    uint32_t* tile32 = tiles32 ? tiles32 + per_thread32 * omp_get_thread_num() : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (size_t w = 0; w < items.size(); ++w)
      forward_tile(geo, arith, tasks[items[w].task], items[w].kv_head, items[w].block_start,
                   items[w].block_len, q, keys, out, lse, tile, tile16, tile32);
  }
}

void blocked_attention_backward(const AttentionParams& params,
                                std::span<const AttentionTask> tasks, const float* q,
                                const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv) {
  const Geometry geo(params);
  Workspace& ws = tls_workspace;
  int64_t rows = 0;  // query rows are [0, rows)
  for (const AttentionTask& t : tasks) rows = std::max<int64_t>(rows, t.q_row + t.q_len);
  if (rows == 0) return;

  // Key-block work items and their deterministic thread assignment. The native bf16
  // backward's items span several key blocks (it packs each query tile once per item).
  const Arith arith = arith_of(params);
  const int64_t item_rows = kKeyBlock * (arith == Arith::bf16_native ? kMaxSpanBlocks : 1);
  group_tasks_by_keys(tasks, ws);
  auto& items = ws.key_items;
  items.clear();
  for (int32_t gi = 0; gi < int32_t(ws.groups.size()); ++gi) {
    const TaskGroup& group = ws.groups[gi];
    int64_t begin = INT64_MAX, end = 0;
    for (int32_t idx = group.first; idx < group.last; ++idx) {
      const AttentionTask& t = tasks[ws.task_order[idx]];
      begin = std::min<int64_t>(begin, t.kv_row);
      end = std::max<int64_t>(end, t.kv_row + t.kv_len);
    }
    // DCA: key blocks end at chunk boundaries too (offsets from the group's first
    // task; tasks sharing key rows agree on their in-document offsets)
    const AttentionTask& first = tasks[ws.task_order[group.first]];
    const int64_t row_to_offset = int64_t(first.kv_pos) - first.kv_row;
    for (int64_t r0 = begin, r1; r0 < end; r0 = r1) {
      r1 = std::min(r0 + item_rows, end);
      if (geo.dca)
        r1 = std::min(r1, ((r0 + row_to_offset) / geo.s + 1) * geo.s - row_to_offset);
      int64_t cost = 0;
      for (int32_t idx = group.first; idx < group.last; ++idx) {
        const AttentionTask& t = tasks[ws.task_order[idx]];
        const int64_t c0 = std::max<int64_t>(r0 - t.kv_row, 0);
        const int64_t c1 = std::min<int64_t>(r1 - t.kv_row, t.kv_len);
        if (c0 < c1) cost += pairs_in_keys(geo, t, c0, c1);
      }
      if (cost == 0) continue;
      for (int64_t g = 0; g < geo.KV; ++g) items.push_back({gi, int32_t(g), r0, r1, cost, 0});
    }
  }
  std::sort(items.begin(), items.end(), [](const KeyBlockItem& a, const KeyBlockItem& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    if (a.group != b.group) return a.group < b.group;
    return a.row_begin != b.row_begin ? a.row_begin < b.row_begin : a.kv_head < b.kv_head;
  });
  const int threads = std::max(1, std::min<int>(omp_get_max_threads(), int(items.size())));
  ws.thread_load.assign(threads, 0);
  for (KeyBlockItem& item : items) {  // longest first onto the least-loaded thread
    const auto least = std::min_element(ws.thread_load.begin(), ws.thread_load.end());
    item.thread = int32_t(least - ws.thread_load.begin());
    *least += item.cost;
  }

  const int64_t dq_floats = rows * geo.ldq;
  float* row_dot = ws.row_dot.get(rows * geo.H);
  float* private_dq = threads > 1 ? ws.private_dq.get(dq_floats * (threads - 1)) : nullptr;
  const int64_t krows = key_rows(tasks);
  if (arith == Arith::bf16_rounded) std::tie(k, v) = rounded_keys(geo, k, v, krows, ws);
  BackwardKeys keys;
  Bf16TileSizes sizes{backward_tile_floats(geo), 0, 0};
  if (arith == Arith::bf16_native) {
    keys = make_bf16_backward_keys(geo, k, v, krows, ws.key_halves);
    sizes = bf16_backward_tile_sizes(geo);
  }
  float* tiles = ws.tiles.get(sizes.floats * threads);
  uint16_t* tiles16 = sizes.halves ? ws.tiles16.get(sizes.halves * threads) : nullptr;
  uint32_t* tiles32 = sizes.words ? ws.tiles32.get(sizes.words * threads) : nullptr;

#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num(), team = omp_get_num_threads();
    float* my_dq = tid == 0 ? dq : private_dq + (tid - 1) * dq_floats;
    if (tid > 0) std::memset(my_dq, 0, sizeof(float) * dq_floats);

    // D = rowsum(dO * O) for every query row of every task   [rows, H]; in bf16 of the
    // rounded dO and O (Arith)
    const bool bf16_inputs = arith != Arith::fp32;
    for (const AttentionTask& t : tasks) {
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < t.q_len; ++i) {
        const int64_t row = t.q_row + i;
        for (int64_t h = 0; h < geo.H; ++h) {
          const float* o = out + row * geo.ldq + h * geo.hd;
          const float* d_o = dout + row * geo.ldq + h * geo.hd;
          double acc = 0.0;
          if (bf16_inputs) {
#pragma omp simd reduction(+ : acc)
            for (int64_t c = 0; c < geo.hd; ++c) acc += double(round_to_bf16(o[c])) * round_to_bf16(d_o[c]);
          } else {
#pragma omp simd reduction(+ : acc)
            for (int64_t c = 0; c < geo.hd; ++c) acc += double(o[c]) * d_o[c];
          }
          row_dot[row * geo.H + h] = float(acc);
        }
      }
    }
#pragma omp barrier

    const Bf16Tile tile{tiles + sizes.floats * tid, tiles16 ? tiles16 + sizes.halves * tid : nullptr,
                        tiles32 ? tiles32 + sizes.words * tid : nullptr};
    for (const KeyBlockItem& item : items) {
      if (item.thread % team != tid) continue;
      if (arith == Arith::bf16_native) {
        const TaskGroup& group = ws.groups[item.group];
        backward_key_block_bf16(
            geo, tasks,
            std::span<const int32_t>(ws.task_order).subspan(group.first, group.last - group.first),
            item.kv_head, item.row_begin, item.row_end, keys, q, lse, dout, row_dot, my_dq, dk, dv,
            tile);
      } else {
        backward_key_block(geo, arith == Arith::bf16_rounded, tasks, ws, item, q, k, v, lse, dout,
                           row_dot, my_dq, dk, dv, tile.f);
      }
    }
#pragma omp barrier

    // dq += the other threads' partial dQ, in thread order (deterministic)
    if (team > 1) {
#pragma omp for schedule(static)
      for (int64_t x = 0; x < dq_floats; x += 1024) {
        const int64_t end = std::min<int64_t>(x + 1024, dq_floats);
        for (int other = 1; other < team; ++other) {
          const float* src = private_dq + (other - 1) * dq_floats;
#pragma omp simd
          for (int64_t e = x; e < end; ++e) dq[e] += src[e];
        }
      }
    }
  }
}

}  // namespace lct
