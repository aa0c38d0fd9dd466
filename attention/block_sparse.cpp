#include "attention/block_sparse.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace lct {

namespace {

struct Shape {
  int64_t H, KV, G, hd, ldq, ldk, B, k;
  bool bf16;  // the selection reads Q and K rounded to bf16, as the kernel does
  explicit Shape(const AttentionParams& p)
      : H(p.num_heads), KV(p.num_kv_heads), G(p.num_heads / p.num_kv_heads), hd(p.head_dim),
        ldq(int64_t(p.num_heads) * p.head_dim), ldk(int64_t(p.num_kv_heads) * p.head_dim), B(p.mask.block_size),
        k(p.mask.top_blocks), bf16(p.precision == Precision::bf16) {}
  double value(float x) const { return double(bf16 ? round_to_bf16(x) : x); }
};

void check_head_dim(const AttentionParams& p) {
  if (p.head_dim > 512) throw std::invalid_argument("attention: block_sparse takes head_dim <= 512");
}

void check_task(const AttentionTask& t) {
  if (t.q_len > 0 && (t.kv_pos != 0 || int64_t(t.kv_len) < int64_t(t.q_pos) + t.q_len))
    throw std::invalid_argument(
        "attention: block_sparse needs each task's keys from its document's first to its last query (got keys [" +
        std::to_string(t.kv_pos) + ", " + std::to_string(int64_t(t.kv_pos) + t.kv_len) + ") for queries [" +
        std::to_string(t.q_pos) + ", " + std::to_string(int64_t(t.q_pos) + t.q_len) + "))");
}

// A key value as a fixed-point number with 64 fraction bits (block_sparse.h): from the
// float's bits, rounded to the nearest (halves away from zero).
KeySum fixed_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  const int e = int(b >> 23) & 255;
  const uint32_t frac = b & 0x7fffffu;
  if (e == 0 || (e == 255 && frac != 0)) return 0;  // zero, subnormal (below 2^-126), NaN
  KeySum m;
  if (e >= 127 + 31) {
    m = KeySum(1) << (31 + 64);  // 2^31 and beyond, infinities
  } else {
    const int shift = e - 86;  // value = (frac | 2^23) 2^(e - 150), times 2^64
    const uint32_t mant = frac | 0x800000u;
    if (shift >= 0)
      m = KeySum(mant) << shift;
    else if (shift <= -25)
      m = 0;
    else
      m = KeySum((uint64_t(mant) + (uint64_t(1) << (-shift - 1))) >> -shift);
  }
  return (b >> 31) ? -m : m;
}

// kbar[g][x][m]: the mean of block m's keys of group g (dimension x), blocks [0, blocks)
// of task t (blocks contiguous: the scores below run along them).
void block_means(const AttentionParams& p, const Shape& s, const AttentionTask& t, const float* k, int64_t blocks,
                 std::vector<double>& kbar) {
  kbar.assign(size_t(s.KV * blocks * s.hd), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < blocks; ++m) {
    thread_local std::vector<KeySum> sums;
    sums.assign(size_t(s.ldk), KeySum(0));
    KeySum* sum = sums.data();
    add_key_sums(p, k + (t.kv_row + m * s.B) * s.ldk, s.B, sum);
    for (int64_t g = 0; g < s.KV; ++g)
      for (int64_t x = 0; x < s.hd; ++x)
        kbar[size_t((g * s.hd + x) * blocks + m)] = key_mean(sum[g * s.hd + x], s.B);
  }
}

// Rows scored together against a stretch of blocks (the stretch's scores stay in L1,
// its block means are read once per tile of rows).
constexpr int64_t kScoreRows = 8, kScoreBlocks = 256;

// How many blocks a query before block `blocks` selects at most: top_blocks, or all of
// the earlier blocks when there are fewer (issue 87 item 7: a top_blocks beyond a document's
// blocks is legal, and is causal, but must not size anything).
int64_t selection_width(const Shape& s, int64_t blocks) { return std::min(s.k, std::max<int64_t>(blocks, 0)); }

// The selection of query rows [q_lo, q_hi) of task t (select_blocks), given kbar over
// the blocks before the last query's block, as [n][KV][selection_width(s, blocks)] (the
// width returned): every query has at most that many earlier blocks, so with k =
// top_blocks this is what the [n][KV][k] selection holds, its trailing -1s cut. Each
// score is fma(qbar[x], kbar[x], .) over x = 0, 1, ... in order: the same bits for any
// cut of the rows and on any machine. A query whose scores (for group g) are not all
// finite, from a NaN or an infinity in its mean query or a given mean, selects nothing
// and is marked kNonFiniteSelection (block_sparse.h): the comparisons would otherwise take
// some blocks silently (NaN >= x is false).
int64_t select_rows(const Shape& s, const AttentionTask& t, int64_t q_lo, int64_t q_hi, const float* q,
                    const BlockMeans& kbar, int64_t blocks, std::vector<int32_t>& selected) {
  const int64_t n = q_hi - q_lo, K = selection_width(s, blocks), R = kScoreRows;
  selected.assign(size_t(n * s.KV * K), -1);
  if (K == 0) return K;
#pragma omp parallel
  {
    std::vector<double> qbar(size_t(R * s.hd)), score(size_t(R * std::max<int64_t>(blocks, 1)));
    std::vector<double> best_s(static_cast<size_t>(K));
    std::vector<int32_t> best_m(static_cast<size_t>(K));
#pragma omp for schedule(dynamic, 4)
    for (int64_t r0 = 0; r0 < n; r0 += R) {
      const int64_t rows = std::min(R, n - r0);
      const auto block_of = [&](int64_t r) { return (int64_t(t.q_pos) + (q_lo + r - t.q_row)) / s.B; };
      const int64_t bmax = block_of(r0 + rows - 1);
      for (int64_t g = 0; g < s.KV; ++g) {
        if (bmax > K) {  // some row chooses: the tile's mean queries and scores
          for (int64_t i = 0; i < rows; ++i) {
            double* qb = qbar.data() + i * s.hd;
            std::fill(qb, qb + s.hd, 0.0);
            for (int64_t h = 0; h < s.G; ++h) {
              const float* row = q + (q_lo + r0 + i) * s.ldq + (g * s.G + h) * s.hd;
              for (int64_t x = 0; x < s.hd; ++x) qb[x] += s.value(row[x]);
            }
            for (int64_t x = 0; x < s.hd; ++x) qb[x] /= double(s.G);
          }
          const double* kb = kbar.kbar + g * s.hd * kbar.stride;
          for (int64_t m0 = 0; m0 < bmax; m0 += kScoreBlocks) {
            const int64_t m1 = std::min(bmax, m0 + kScoreBlocks);
            for (int64_t i = 0; i < rows; ++i) std::fill(score.data() + i * blocks + m0, score.data() + i * blocks + m1, 0.0);
            for (int64_t x = 0; x < s.hd; ++x) {
              const double* km = kb + x * kbar.stride;
              for (int64_t i = 0; i < rows; ++i) {
                const double qx = qbar[size_t(i * s.hd + x)];
                double* sc = score.data() + i * blocks;
#pragma omp simd
                for (int64_t m = m0; m < m1; ++m) sc[m] = std::fma(qx, km[m], sc[m]);
              }
            }
          }
        }
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t b = block_of(r0 + i);
          int32_t* out = selected.data() + ((r0 + i) * s.KV + g) * K;
          if (b <= K) {  // every earlier block
            for (int64_t m = 0; m < b; ++m) out[m] = int32_t(m);
            continue;
          }
          // the k best, best first; a block beats another of higher score, or of equal
          // score and later (blocks come in increasing order: >= keeps the later)
          const double* sc = score.data() + i * blocks;
          bool finite = true;
          for (int64_t m = 0; m < b && finite; ++m) finite = std::isfinite(sc[m]);
          if (!finite) {
            out[0] = kNonFiniteSelection;
            continue;
          }
          int64_t kept = 0;
          for (int64_t m = 0; m < b; ++m) {
            const double v = sc[m];
            if (kept == K && !(v >= best_s[size_t(K - 1)])) continue;
            int64_t at = kept < K ? kept++ : K - 1;
            while (at > 0 && v >= best_s[size_t(at - 1)]) {
              best_s[size_t(at)] = best_s[size_t(at - 1)], best_m[size_t(at)] = best_m[size_t(at - 1)];
              --at;
            }
            best_s[size_t(at)] = v, best_m[size_t(at)] = int32_t(m);
          }
          std::copy(best_m.begin(), best_m.begin() + kept, out);
          std::sort(out, out + kept);
        }
      }
    }
  }
  return K;
}

// The rows of a slice that selected each block, per group: rows[offset[g][m] ..
// offset[g][m + 1]) are slice rows (increasing) that selected block m for group g.
struct Lists {
  std::vector<int64_t> offset;  // [KV][blocks + 1]
  std::vector<int32_t> rows;
};
void invert(const Shape& s, const std::vector<int32_t>& selected, int64_t n, int64_t blocks, int64_t width, Lists& l) {
  l.offset.assign(size_t(s.KV * (blocks + 1)), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < s.KV; ++g)
      for (int64_t i = 0; i < width; ++i)
        if (const int32_t m = selected[size_t((r * s.KV + g) * width + i)]; m >= 0) ++l.offset[size_t(g * (blocks + 1) + m + 1)];
  int64_t total = 0;
  for (int64_t g = 0; g < s.KV; ++g)
    for (int64_t m = 0; m <= blocks; ++m) {
      int64_t& o = l.offset[size_t(g * (blocks + 1) + m)];
      total += o;
      o = total;
    }
  l.rows.resize(size_t(total));
  std::vector<int64_t> fill(l.offset);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < s.KV; ++g)
      for (int64_t i = 0; i < width; ++i)
        if (const int32_t m = selected[size_t((r * s.KV + g) * width + i)]; m >= 0)
          l.rows[size_t(fill[size_t(g * (blocks + 1) + m)]++)] = int32_t(r);
}

// One block of a batch: its index, the slice rows that selected it, and where they sit
// in the batch's packed query rows.
struct Part {
  int64_t block;
  const int32_t* rows;
  int64_t n, at;
  int64_t key_lo, keys;  // the block's keys the task holds: positions [key_lo, key_lo + keys)
};

// Grow-only scratch of the calling thread.
struct Scratch {
  std::vector<double> kbar;
  std::vector<int32_t> selected;
  Lists lists;
  std::vector<Part> parts;
  std::vector<AttentionTask> part_tasks;
  std::vector<float> qg, og, lseg, dog, dqg, po, plse, kb, vb, dkb, dvb;
};
thread_local Scratch tls;

void grow(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

// Copies rows[i] (slice rows from row0) of group g's heads between a [rows, H, hd]
// array and a packed [n, G, hd] one (per = hd; per = 1 for LSE's [rows, H]).
template <bool ToPacked, typename Src, typename Dst>
void move_rows(const Shape& s, const int32_t* rows, int64_t n, int64_t row0, int64_t g, int64_t per, Src full,
               Dst packed) {
  const int64_t width = s.G * per;
#pragma omp parallel for schedule(static) if (n * width > 16384)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = (row0 + rows[i]) * s.H * per + g * width;
    if constexpr (ToPacked)
      std::copy(full + at, full + at + width, packed + i * width);
    else
      std::copy(packed + i * width, packed + i * width + width, full + at);
  }
}

// The same, adding the packed rows into the full array.
void add_rows(const Shape& s, const int32_t* rows, int64_t n, int64_t row0, int64_t g, const float* packed,
              float* full) {
  const int64_t width = s.G * s.hd;
#pragma omp parallel for schedule(static) if (n * width > 16384)
  for (int64_t i = 0; i < n; ++i) {
    float* f = full + (row0 + rows[i]) * s.H * s.hd + g * width;
    const float* p = packed + i * width;
    for (int64_t x = 0; x < width; ++x) f[x] += p[x];
  }
}

// A part's keys (or values) of group g, packed [keys, hd]; and back, added.
void gather_block(const Shape& s, const AttentionTask& t, const Part& p, int64_t g, const float* src, float* out) {
  for (int64_t j = 0; j < p.keys; ++j) {
    const float* row = src + (t.kv_row + (p.key_lo - t.kv_pos) + j) * s.ldk + g * s.hd;
    std::copy(row, row + s.hd, out + j * s.hd);
  }
}
void add_block(const Shape& s, const AttentionTask& t, const Part& p, int64_t g, const float* in, float* dst) {
  for (int64_t j = 0; j < p.keys; ++j) {
    float* row = dst + (t.kv_row + (p.key_lo - t.kv_pos) + j) * s.ldk + g * s.hd;
    const float* d = in + j * s.hd;
    for (int64_t x = 0; x < s.hd; ++x) row[x] += d[x];
  }
}

// The own blocks: the chunked mask.
AttentionParams own_blocks(const AttentionParams& params) {
  AttentionParams own = params;
  own.mask = AttentionMask{};
  own.mask.kind = MaskKind::chunked;
  own.mask.block_size = params.mask.block_size;
  return own;
}

// The selected blocks' problems: G query heads over one kv head, every key visible. A
// batch of blocks of one group is one kernel call, one task per block (the block's
// keys at rows [i B, (i + 1) B) of the packed K and V, the rows that selected it after
// the previous block's rows, sitting after the keys at a multiple of the query tile):
// the kernel spreads the batch's key blocks over the threads, and each task's
// arithmetic is its own (a batch's blocks are merged and added one after another, in
// increasing block order, as one block a call would).
AttentionParams part_params(const AttentionParams& params) {
  AttentionParams part = params;
  part.num_heads = params.num_heads / params.num_kv_heads;
  part.num_kv_heads = 1;
  part.mask = AttentionMask{};
  return part;
}

// The query rows, and the keys, a batch gathers at most (unless one block alone has
// more rows: a block's rows are never split).
constexpr int64_t kBatchRows = 16384;

// For each task, each query slice of at most chunk_rows rows (at in-document multiples
// of chunk_rows), each group, and batches of its selected blocks in increasing order:
// f(task, slice row0, group, parts, tasks of the batch's kernel call, its query rows);
// and non_finite(query row, group) for each query of a slice whose selection scores are
// not finite (it selected nothing: select_rows).
template <typename NonFinite, typename F>
void for_each_batch(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                    const float* k, std::span<const BlockMeans> means, NonFinite&& non_finite, F&& f) {
  const Shape s(params);
  Scratch& w = tls;
  const int64_t tile = attention_query_tile(part_params(params));
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    const AttentionTask& t = tasks[ti];
    if (t.q_len <= 0) continue;
    const int64_t last = int64_t(t.q_pos) + t.q_len - 1, blocks = last / s.B;
    // the earlier blocks' keys the task holds: positions [key_lo, key_hi)
    const int64_t key_lo = t.kv_pos, key_hi = std::min<int64_t>(int64_t(t.kv_pos) + t.kv_len, blocks * s.B);
    if (key_hi <= key_lo) continue;  // none (or no earlier block)
    // the parts' queries sit after their block's keys, at a multiple of the query tile
    // (from here on B is below the task's last position: a huge B never gets here)
    const int32_t q_pos = int32_t((s.B + tile - 1) / tile * tile);
    BlockMeans kbar;
    if (means.empty()) {
      block_means(params, s, t, k, blocks, w.kbar);
      kbar = {w.kbar.data(), blocks};
    } else {
      kbar = means[ti];
    }
    for (int64_t lo = t.q_row, end = t.q_row + t.q_len; lo < end;) {
      const int64_t pos = int64_t(t.q_pos) + (lo - t.q_row);
      const int64_t hi = std::min(end, lo + ((pos / params.chunk_rows + 1) * params.chunk_rows - pos));
      const int64_t width = select_rows(s, t, lo, hi, q, kbar, blocks, w.selected);
      for (int64_t r = 0; width > 0 && r < hi - lo; ++r)
        for (int64_t g = 0; g < s.KV; ++g)
          if (w.selected[size_t((r * s.KV + g) * width)] == kNonFiniteSelection) non_finite(lo + r, g);
      invert(s, w.selected, hi - lo, blocks, width, w.lists);
      for (int64_t g = 0; g < s.KV; ++g) {
        w.parts.clear(), w.part_tasks.clear();
        int64_t rows = 0;
        const auto flush = [&] {
          if (!w.parts.empty()) f(t, lo, g, std::span<const Part>(w.parts), std::span<const AttentionTask>(w.part_tasks), rows);
          w.parts.clear(), w.part_tasks.clear();
          rows = 0;
        };
        for (int64_t m = key_lo / s.B; m * s.B < key_hi; ++m) {
          const int64_t a = w.lists.offset[size_t(g * (blocks + 1) + m)], b = w.lists.offset[size_t(g * (blocks + 1) + m + 1)];
          if (b == a) continue;
          if (rows > 0 && (rows + (b - a) > kBatchRows || int64_t(w.parts.size() + 1) * s.B > kBatchRows)) flush();
          const int64_t lo_m = std::max(key_lo, m * s.B), hi_m = std::min(key_hi, (m + 1) * s.B);
          AttentionTask pt;
          pt.q_row = rows;
          pt.kv_row = int64_t(w.parts.size()) * s.B;
          pt.q_len = int32_t(b - a);
          pt.kv_len = int32_t(hi_m - lo_m);
          pt.q_pos = q_pos;
          w.parts.push_back({m, w.lists.rows.data() + a, b - a, rows, lo_m, hi_m - lo_m});
          w.part_tasks.push_back(pt);
          rows += b - a;
        }
        flush();
      }
      lo = hi;
    }
  }
}

// A batch's query rows of group g (packed by part) and its blocks' keys and values.
void gather_batch(const Shape& s, const AttentionTask& t, int64_t row0, int64_t g, std::span<const Part> parts,
                  int64_t rows, const float* q, const float* k, const float* v, Scratch& w) {
  const int64_t width = s.G * s.hd, keys = int64_t(parts.size()) * s.B;
  grow(w.qg, rows * width), grow(w.kb, keys * s.hd), grow(w.vb, keys * s.hd);
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    move_rows<true>(s, p.rows, p.n, row0, g, s.hd, q, w.qg.data() + p.at * width);
    gather_block(s, t, p, g, k, w.kb.data() + int64_t(i) * s.B * s.hd);
    gather_block(s, t, p, g, v, w.vb.data() + int64_t(i) * s.B * s.hd);
  }
}

}  // namespace

void add_key_sums(const AttentionParams& params, const float* k, int64_t rows, KeySum* sums) {
  const int64_t width = int64_t(params.num_kv_heads) * params.head_dim;
  const bool bf16 = params.precision == Precision::bf16;
  for (int64_t j = 0; j < rows; ++j) {
    const float* row = k + j * width;
    for (int64_t x = 0; x < width; ++x) sums[x] += fixed_of(bf16 ? round_to_bf16(row[x]) : row[x]);
  }
}

double key_mean(KeySum sum, int64_t block_size) { return std::ldexp(double(sum), -64) / double(block_size); }

void select_blocks(const AttentionParams& params, const AttentionTask& t, int64_t q_lo, int64_t q_hi,
                   const float* q, const float* k, std::vector<int32_t>& selected, const BlockMeans* given,
                   int64_t* width) {
  if (!given) check_task(t);
  check_head_dim(params);
  const Shape s(params);
  const int64_t blocks = q_hi > q_lo ? (int64_t(t.q_pos) + (q_hi - 1 - t.q_row)) / s.B : 0;
  std::vector<double> kbar;
  BlockMeans means;
  if (given) {
    if (given->stride < blocks) throw std::invalid_argument("attention: block_sparse's given block means miss blocks");
    means = *given;
  } else {
    block_means(params, s, t, k, blocks, kbar);
    means = {kbar.data(), blocks};
  }
  if (width || selection_width(s, blocks) == s.k) {
    const int64_t w = select_rows(s, t, q_lo, q_hi, q, means, blocks, selected);
    if (width) *width = w;
    return;
  }
  // the caller's [n][KV][top_blocks] from the narrower selection
  std::vector<int32_t> narrow;
  const int64_t w = select_rows(s, t, q_lo, q_hi, q, means, blocks, narrow), rows = (q_hi - q_lo) * s.KV;
  selected.assign(size_t(rows * s.k), -1);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(narrow.begin() + r * w, w, selected.begin() + r * s.k);
}

namespace {
void check_means(std::span<const AttentionTask> tasks, std::span<const BlockMeans> means, int64_t B) {
  if (means.empty()) return;
  if (means.size() != tasks.size())
    throw std::invalid_argument("attention: block_sparse takes block means for every task or none");
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].q_len > 0 && means[i].stride < (int64_t(tasks[i].q_pos) + tasks[i].q_len - 1) / B)
      throw std::invalid_argument("attention: block_sparse's given block means miss blocks");
    if (tasks[i].kv_pos < 0 || tasks[i].kv_len < 0)
      throw std::invalid_argument("attention: block_sparse task keys start before their document");
  }
}
}  // namespace

void block_sparse_forward(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                          const float* k, const float* v, float* out, float* lse, std::span<const BlockMeans> means) {
  if (means.empty())
    for (const AttentionTask& t : tasks) check_task(t);
  check_head_dim(params);
  check_means(tasks, means, params.mask.block_size);
  attention_forward(own_blocks(params), tasks, q, k, v, out, lse);
  if (params.mask.top_blocks == 0) return;
  const Shape s(params);
  const AttentionParams part = part_params(params);
  Scratch& w = tls;
  const int64_t width = s.G * s.hd;
  // a query with non-finite selection scores: NaN for the group's heads (it selected
  // nothing, so no merge below touches it)
  const auto non_finite = [&](int64_t row, int64_t g) {
    std::fill_n(out + row * s.ldq + g * width, width, std::numeric_limits<float>::quiet_NaN());
    std::fill_n(lse + row * s.H + g * s.G, s.G, std::numeric_limits<float>::quiet_NaN());
  };
  for_each_batch(params, tasks, q, k, means, non_finite,
                 [&](const AttentionTask& t, int64_t row0, int64_t g, std::span<const Part> parts,
                     std::span<const AttentionTask> part_tasks, int64_t rows) {
                   gather_batch(s, t, row0, g, parts, rows, q, k, v, w);
                   grow(w.og, rows * width), grow(w.po, rows * width), grow(w.lseg, rows * s.G), grow(w.plse, rows * s.G);
                   attention_forward(part, part_tasks, w.qg.data(), w.kb.data(), w.vb.data(), w.po.data(),
                                     w.plse.data());
                   // merged one block after another: a row may have selected several
                   for (const Part& p : parts) {
                     move_rows<true>(s, p.rows, p.n, row0, g, s.hd, out, w.og.data());
                     move_rows<true>(s, p.rows, p.n, row0, g, 1, lse, w.lseg.data());
                     merge_attention_partial(w.og.data(), w.lseg.data(), w.po.data() + p.at * width,
                                             w.plse.data() + p.at * s.G, p.n, int(s.G), int(s.hd));
                     move_rows<false>(s, p.rows, p.n, row0, g, s.hd, out, w.og.data());
                     move_rows<false>(s, p.rows, p.n, row0, g, 1, lse, w.lseg.data());
                   }
                 });
}

void block_sparse_backward(const AttentionParams& params, std::span<const AttentionTask> tasks, const float* q,
                           const float* k, const float* v, const float* out, const float* lse, const float* dout,
                           float* dq, float* dk, float* dv, std::span<const BlockMeans> means) {
  if (means.empty())
    for (const AttentionTask& t : tasks) check_task(t);
  check_head_dim(params);
  check_means(tasks, means, params.mask.block_size);
  attention_backward(own_blocks(params), tasks, q, k, v, out, lse, dout, dq, dk, dv);
  if (params.mask.top_blocks == 0) return;
  const Shape s(params);
  const AttentionParams part = part_params(params);
  Scratch& w = tls;
  const int64_t width = s.G * s.hd;
  // (a query with non-finite selection scores selected nothing; its own block's backward
  // above, with its NaN LSE, made what it touches NaN)
  for_each_batch(params, tasks, q, k, means, [](int64_t, int64_t) {},
                 [&](const AttentionTask& t, int64_t row0, int64_t g, std::span<const Part> parts,
                     std::span<const AttentionTask> part_tasks, int64_t rows) {
                   const int64_t keys = int64_t(parts.size()) * s.B;
                   gather_batch(s, t, row0, g, parts, rows, q, k, v, w);
                   grow(w.og, rows * width), grow(w.dog, rows * width), grow(w.dqg, rows * width);
                   grow(w.lseg, rows * s.G), grow(w.dkb, keys * s.hd), grow(w.dvb, keys * s.hd);
                   for (const Part& p : parts) {
                     move_rows<true>(s, p.rows, p.n, row0, g, s.hd, out, w.og.data() + p.at * width);
                     move_rows<true>(s, p.rows, p.n, row0, g, s.hd, dout, w.dog.data() + p.at * width);
                     move_rows<true>(s, p.rows, p.n, row0, g, 1, lse, w.lseg.data() + p.at * s.G);
                   }
                   std::fill_n(w.dqg.begin(), rows * width, 0.0f);
                   std::fill_n(w.dkb.begin(), keys * s.hd, 0.0f);
                   std::fill_n(w.dvb.begin(), keys * s.hd, 0.0f);
                   attention_backward(part, part_tasks, w.qg.data(), w.kb.data(), w.vb.data(), w.og.data(),
                                      w.lseg.data(), w.dog.data(), w.dqg.data(), w.dkb.data(), w.dvb.data());
                   // added one block after another: a row may have selected several
                   for (size_t i = 0; i < parts.size(); ++i) {
                     const Part& p = parts[i];
                     add_rows(s, p.rows, p.n, row0, g, w.dqg.data() + p.at * width, dq);
                     add_block(s, t, p, g, w.dkb.data() + int64_t(i) * s.B * s.hd, dk);
                     add_block(s, t, p, g, w.dvb.data() + int64_t(i) * s.B * s.hd, dv);
                   }
                 });
}

int64_t block_sparse_workspace_bytes(const AttentionParams& params, int64_t query_rows, int64_t key_rows) {
  if (params.mask.kind != MaskKind::block_sparse) return 0;
  const Shape s(params);
  // Sized by what a document can select (issue 87 item 7), not by the settings: a
  // document has at most key_rows rows, so a block holds at most B' = min(B, key_rows) of
  // its keys and a query selects at most k' = min(k, (key_rows - 1) / B) earlier blocks
  // (select_rows' width); a larger B or k allocates what B' and k' do.
  const int64_t B = std::clamp<int64_t>(s.B, 1, std::max<int64_t>(key_rows, 1));
  const int64_t k = std::min<int64_t>(s.k, std::max<int64_t>(key_rows - 1, 0) / s.B);
  const int64_t slice = std::min(query_rows, params.chunk_rows);
  // a batch: up to kBatchRows gathered rows (or one block's, at most a slice), each row
  // gathered once per block it selected; up to kBatchRows keys (or one block), at most
  // the earlier blocks' keys of one document
  const int64_t batch_rows = std::min(std::max(kBatchRows, slice), slice * std::max<int64_t>(1, k));
  const int64_t batch_keys = std::min(std::max(kBatchRows, B), std::max<int64_t>(key_rows, 1));
  const int64_t keys = 4 * 4 * s.hd * batch_keys;                                   // K, V, dK, dV
  const int64_t gathered = 4 * (5 * s.G * s.hd + 3 * s.G) * (batch_rows + 2);       // Q, O, dO, dQ, part O; LSEs
  const int64_t selection = 4 * s.KV * std::max<int64_t>(1, k) * 2 * (slice + 2);  // selection and its lists
  const int64_t means = 8 * s.KV * s.hd * (key_rows / B + 1) + 16 * s.KV * (key_rows / B + 2);  // + offsets
  const int64_t scores = 8 * int64_t(omp_get_max_threads()) * (kScoreRows * (key_rows / B + 1) + kScoreRows * s.hd);
  return keys + gathered + selection + means + scores;
}

}  // namespace lct
