// The native bf16 parts of the blocked attention kernel (Arith::bf16_native): the
// per-call bf16 copies of K and V, and the backward of one key block.
//
// The backward computes the transposes of the fp32 kernel's tiles, so that every
// product has its K dimension where the AVX512-BF16 microkernel wants it (bf16_tiles.h)
// without transposing a score-sized tile:
//   S^T  [mc, M]  = K_blk Qp^T          P^T = exp(S^T - LSE)
//   dV   [mc, hd] += P^T dO
//   dP^T [mc, M]  = V_blk dO^T          dS^T = P^T (dP^T - D)
//   dK   [mc, hd] += dS^T Qp
//   dQp^T [hd, M] = scale K_blk^T dS    (then added to dQ, rotated back for DCA)
// K and V are converted once per call. A work item spans up to kMaxSpanBlocks key blocks
// (blocked_attention_tiles.h), so the query-tile operands (Qp, dO: rounding, pair
// transposition and interleaving) are packed once per item rather than once per key
// block, and dQp^T is summed over the item's blocks in the microkernel's fp32
// accumulators before one transposition and one add into dQ.
#include <algorithm>

#include "compute/bf16_tiles.h"
#include "attention/blocked_attention_tiles.h"
#include "compute/vector_math.h"

namespace lct::blocked {

ForwardKeys make_bf16_forward_keys(const Geometry& geo, const float* k, const float* v, int64_t rows,
                                   Scratch<uint16_t>& halves, Scratch<uint32_t>& words) {
  const int64_t n = rows * geo.ldk, kp = geo.hd / 2, pairs = (rows + 1) / 2;
  uint16_t* kb = halves.get(size_t(2 * n));
  uint16_t* vb = kb + n;
  bf16_tiles::to_bf16(k, n, 1.0f, kb);
  bf16_tiles::to_bf16(v, n, 1.0f, vb);
  ForwardKeys keys;
  keys.kt_ld = rows;
  keys.vp_pairs = pairs;
  uint32_t* kt = words.get(size_t(geo.KV * (kp * rows + pairs * geo.hd)));
  uint32_t* vp = kt + geo.KV * kp * rows;
  for (int64_t g = 0; g < geo.KV; ++g) {
    bf16_tiles::transpose_pairs(kb + g * geo.hd, rows, geo.hd, geo.ldk, kt + g * kp * rows, rows);
    bf16_tiles::interleave_rows(vb + g * geo.hd, rows, geo.hd, geo.ldk, vp + g * pairs * geo.hd,
                                geo.hd);
  }
  keys.kt = kt;
  keys.vp = vp;
  return keys;
}

BackwardKeys make_bf16_backward_keys(const Geometry& geo, const float* k, const float* v,
                                     int64_t rows, Scratch<uint16_t>& halves) {
  const int64_t n = rows * geo.ldk, kt_ld = rows + 2;  // a zero pair beyond the last row
  uint16_t* kb = halves.get(size_t(2 * n + geo.KV * geo.hd * kt_ld));
  uint16_t* vb = kb + n;
  uint16_t* kt = vb + n;
  bf16_tiles::to_bf16(k, n, 1.0f, kb);
  bf16_tiles::to_bf16(v, n, 1.0f, vb);
  for (int64_t c = 0; c < geo.ldk; ++c) {  // c = g * hd + d
    uint16_t* row = kt + c * kt_ld;
    for (int64_t r = 0; r < rows; ++r) row[r] = kb[r * geo.ldk + c];
    row[rows] = row[rows + 1] = 0;
  }
  return {kb, vb, kt, kt_ld};
}

namespace {

// Row stride of the bf16 P^T and dS^T tiles: M rounded up to even, with room to spare.
inline int64_t half_stride(const Geometry& geo) { return geo.mp + 2; }
inline int64_t pair_rows(int64_t rows) { return rows / 2 + 1; }

}  // namespace

Bf16TileSizes bf16_backward_tile_sizes(const Geometry& geo) {
  const int64_t mp = geo.mp, hd = geo.hd, kb = kKeyBlock;
  const auto pad = [](int64_t x) { return size_t((x + 31) / 32 * 32); };
  return {
      // S^T/P^T, dP^T/dS^T [kb, mp]; dQp^T [hd, mp]; Qp, dO [mp, hd]; LSE, D [mp]
      pad(2 * kb * mp + hd * mp + 2 * mp * hd + 2 * mp),
      // Qp, dO [mp, hd]; P^T, dS^T [kb, mp + 2]
      pad(2 * mp * hd + 2 * kb * half_stride(geo)),
      // Qp^T, dO^T words [hd/2, mp]; Qp, dO pairs [mp/2 + 1, hd]; dS^T key pairs [kb/2 + 1, mp]
      pad(2 * (hd / 2) * mp + 2 * pair_rows(mp) * hd + pair_rows(kb) * mp),
  };
}

void backward_key_block_bf16(const Geometry& geo, std::span<const AttentionTask> tasks,
                             std::span<const int32_t> order, int64_t g, int64_t row_begin,
                             int64_t row_end, const BackwardKeys& keys, const float* q,
                             const float* lse, const float* dout, const float* row_dot,
                             float* dq, float* dk, float* dv, const Bf16Tile& tile) {
  const int64_t hd = geo.hd, kp = hd / 2, mp = geo.mp, ldh = half_stride(geo);
  float* st = tile.f;  // S^T, then P^T   [mc, M] (row stride mp)
  float* dpt = st + kKeyBlock * mp;  // dP^T, then dS^T
  float* dqt = dpt + kKeyBlock * mp;  // dQp^T [hd, M], summed over the item's key blocks
  float* qp = dqt + hd * mp;
  float* dop = qp + mp * hd;
  float* lse_p = dop + mp * hd;
  float* dd = lse_p + mp;
  uint16_t* qb = tile.h;
  uint16_t* dob = qb + mp * hd;
  uint16_t* ptb = dob + mp * hd;  // P^T  [mc, ldh]
  uint16_t* dstb = ptb + kKeyBlock * ldh;  // dS^T [mc, ldh]
  uint32_t* qt = tile.w;  // Qp^T pair words [kp, mp]
  uint32_t* dot = qt + kp * mp;
  uint32_t* qpairs = dot + kp * mp;  // Qp row pairs [pair_rows(M), hd]
  uint32_t* dopairs = qpairs + pair_rows(mp) * hd;
  uint32_t* dspairs = dopairs + pair_rows(mp) * hd;  // dS^T key-row pairs [., mp]
  const bool causal = geo.mask->causal();

  for (const int32_t task : order) {
    const AttentionTask& t = tasks[task];
    const int64_t c0 = std::max<int64_t>(row_begin - t.kv_row, 0);
    const int64_t c1 = std::min<int64_t>(row_end - t.kv_row, t.kv_len);
    if (c0 >= c1) continue;
    // The item's key blocks: kKeyBlock rows from its first row (the fp32 kernel's blocks),
    // as task-relative key ranges with the query rows that read each.
    struct KeyBlock {
      int64_t c0, c1, i_first, i_end;
    } blocks[kMaxSpanBlocks];
    int num_blocks = 0;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kKeyBlock) {
      const int64_t b0 = std::max<int64_t>(r0 - t.kv_row, c0);
      const int64_t b1 = std::min<int64_t>(r0 + kKeyBlock - t.kv_row, c1);
      if (b0 >= b1) continue;
      const auto [first, end] = key_block_queries(geo, t, b0, b1);
      if (first < end) blocks[num_blocks++] = {b0, b1, first, end};
    }
    if (num_blocks == 0) continue;
    int64_t i_first = blocks[0].i_first, i_end = blocks[0].i_end;
    for (int b = 1; b < num_blocks; ++b)
      i_first = std::min(i_first, blocks[b].i_first), i_end = std::max(i_end, blocks[b].i_end);
    const float factor = logit_scale(geo, t);
    const int64_t key_chunk = geo.dca ? (t.kv_pos + c0) / geo.s : 0;  // one chunk per item

    for (int64_t i0 = i_first, i1; i0 < i_end; i0 = i1) {
      i1 = std::min(query_tile_end(geo, t, i0), i_end);
      const int64_t n = i1 - i0, M = geo.G * n, Mp = M + (M & 1);
      const int64_t chunk_distance = geo.dca ? (t.q_pos + i0) / geo.s - key_chunk : kNoRotation;
      // Q and dO of the tile, packed once for all the item's key blocks
      pack_rows(geo, t, g, i0, n, q, factor, qp, chunk_distance, true);  // Q as bf16 values (Arith)
      pack_rows(geo, t, g, i0, n, dout, 1.0f, dop);
      bf16_tiles::to_bf16(qp, M * hd, 1.0f, qb);
      bf16_tiles::to_bf16(dop, M * hd, 1.0f, dob);
      bf16_tiles::transpose_pairs(qb, M, hd, hd, qt, mp);
      bf16_tiles::transpose_pairs(dob, M, hd, hd, dot, mp);
      bf16_tiles::interleave_rows(qb, M, hd, hd, qpairs, hd);
      bf16_tiles::interleave_rows(dob, M, hd, hd, dopairs, hd);
      for (int64_t r = 0; r < M; ++r) {
        const int64_t row = t.q_row + i0 + r % n, h = g * geo.G + r / n;
        lse_p[r] = lse[row * geo.H + h];
        dd[r] = row_dot[row * geo.H + h];
      }

      bool dq_started = false;
      for (int b = 0; b < num_blocks; ++b) {
        const KeyBlock& blk = blocks[b];
        if (blk.i_end <= i0 || blk.i_first >= i1) continue;  // no row of the tile reads it
        const int64_t bc0 = blk.c0, mc = blk.c1 - blk.c0, kr0 = t.kv_row + bc0;
        const uint16_t* kc = keys.k + kr0 * geo.ldk + g * hd;
        const uint16_t* vc = keys.v + kr0 * geo.ldk + g * hd;
        const uint16_t* ktc = keys.kt + g * hd * keys.kt_ld + kr0;
        float* dkc = dk + kr0 * geo.ldk + g * hd;
        float* dvc = dv + kr0 * geo.ldk + g * hd;

        // S^T [mc, M] = K_blk Qp^T; P^T = exp(S^T - LSE) where the query sees the key
        bf16_tiles::gemm(mc, M, kp, 1.0f, kc, geo.ldk, qt, mp, false, st, mp);
        // masks: the key columns each query row of the tile reads, [0, s1) and [b0, b1)
        int32_t s1[kPackedRows], b0[kPackedRows], b1[kPackedRows];
        if (!causal)
          for (int64_t i = 0; i < n; ++i) {
            const RowColumns rc = row_columns(geo, t, i0 + i, bc0, mc);
            s1[i] = int32_t(rc.s1), b0[i] = int32_t(rc.b0), b1[i] = int32_t(rc.b1);
          }
        for (int64_t c = 0; c < mc; ++c) {
          float* row = st + c * mp;
          // causal: query i (tile-relative) sees key c iff i >= first
          const int64_t first =
              causal ? std::clamp<int64_t>(int64_t(t.kv_pos) + bc0 + c - t.q_pos - i0, 0, n) : 0;
          // P = exp(S - LSE) + (S - LSE) * 0: NaN where the score or the row's LSE is not
          // finite, else exactly fast_exp's P (the fp32 kernel's backward_key_block says why)
          for (int64_t hh = 0; hh < geo.G; ++hh) {
            float* seg = row + hh * n;
            const float* shift = lse_p + hh * n;
            std::fill(seg, seg + first, 0.0f);
            if (causal) {
#pragma omp simd
              for (int64_t i = first; i < n; ++i) {
                const float x = seg[i] - shift[i];
                seg[i] = shift[i] == kNegInf ? 0.0f : fast_exp(x) + x * 0.0f;
              }
            } else {
              const int32_t cc = int32_t(c);
#pragma omp simd
              for (int64_t i = 0; i < n; ++i) {
                const bool seen = cc < s1[i] || (cc >= b0[i] && cc < b1[i]);
                const float x = seg[i] - shift[i];
                seg[i] = !seen || shift[i] == kNegInf ? 0.0f : fast_exp(x) + x * 0.0f;
              }
            }
          }
          uint16_t* pr = ptb + c * ldh;
          pr[Mp - 1] = 0;
          bf16_tiles::to_bf16(row, M, 1.0f, pr);
        }
        // dV [mc, hd] += P^T dO
        bf16_tiles::gemm(mc, hd, Mp / 2, 1.0f, ptb, ldh, dopairs, hd, true, dvc, geo.ldk);
        // dP^T [mc, M] = V_blk dO^T; dS^T = P^T (dP^T - D)
        bf16_tiles::gemm(mc, M, kp, 1.0f, vc, geo.ldk, dot, mp, false, dpt, mp);
        for (int64_t c = 0; c < mc; ++c) {
          const float* pr = st + c * mp;
          float* dr = dpt + c * mp;
#pragma omp simd
          for (int64_t r = 0; r < M; ++r) dr[r] = pr[r] * (dr[r] - dd[r]);
          uint16_t* out = dstb + c * ldh;
          out[Mp - 1] = 0;
          bf16_tiles::to_bf16(dr, M, 1.0f, out);
        }
        // dK [mc, hd] += dS^T Qp (Qp carries the logit scale)
        bf16_tiles::gemm(mc, hd, Mp / 2, 1.0f, dstb, ldh, qpairs, hd, true, dkc, geo.ldk);
        // dQp^T [hd, M] (+)= scale K_blk^T dS over key-row pairs (an odd last row pairs
        // with zero), summed over the item's key blocks
        bf16_tiles::interleave_rows(dstb, mc, M, ldh, dspairs, mp);
        bf16_tiles::gemm(hd, M, (mc + 1) / 2, factor, ktc, keys.kt_ld, dspairs, mp, dq_started,
                         dqt, mp);
        dq_started = true;
      }
      if (!dq_started) continue;
      // back to rows [M, hd] (into qp, packed already), so the adds below run along rows
      for (int64_t d = 0; d < hd; ++d) {
        const float* src = dqt + d * mp;
        for (int64_t r = 0; r < M; ++r) qp[r * hd + d] = src[r];
      }
      if (chunk_distance == kNoRotation) {
        for (int64_t hh = 0; hh < geo.G; ++hh)
          for (int64_t i = 0; i < n; ++i) {
            float* dst = dq + (t.q_row + i0 + i) * geo.ldq + (g * geo.G + hh) * hd;
            const float* src = qp + (hh * n + i) * hd;
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) dst[d] += src[d];
          }
      } else {
        add_rotated_back(geo, t, g, i0, n, chunk_distance, qp, hd, 1, dq);
      }
    }
  }
}

}  // namespace lct::blocked
