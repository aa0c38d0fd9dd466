#include "attention/core_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attention/block_sparse.h"
#include "attention/blocked_attention.h"
#include "attention/blocked_attention_tiles.h"

namespace lct {

std::vector<AttentionTask> tasks_for_documents(std::span<const int32_t> cu_seqlens, const MaskData& data) {
  std::vector<AttentionTask> tasks;
  tasks_for_documents(cu_seqlens, tasks, data);
  return tasks;
}

void tasks_for_documents(std::span<const int32_t> cu_seqlens, std::vector<AttentionTask>& tasks,
                         const MaskData& data) {
  tasks.clear();
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d)
    append_document_tasks(tasks, cu_seqlens[d], cu_seqlens[d + 1] - cu_seqlens[d],
                          data.prefix_lens.empty() ? 0 : data.prefix_lens[d],
                          data.segment_ids.empty() ? nullptr : data.segment_ids.data() + cu_seqlens[d]);
}

void append_document_tasks(std::vector<AttentionTask>& tasks, int64_t row, int32_t len, int32_t prefix_len,
                           const int32_t* seg) {
  if (len <= 0) return;
  AttentionTask t;
  t.q_row = t.kv_row = row;
  t.q_len = t.kv_len = len;
  t.q_pos = t.kv_pos = 0;
  t.doc_len = len;
  t.prefix_len = prefix_len;
  if (!seg) {
    tasks.push_back(t);
    return;
  }
  // shared_question: the question (leading 0s), then each run of one answer id
  int32_t question = 0;
  while (question < len && seg[question] == 0) ++question;
  t.prefix_len = question;
  for (int32_t b = 0, e; b < len; b = e) {
    e = b + 1;
    while (e < len && (b < question ? e < question : seg[e] == seg[b])) ++e;
    AttentionTask s = t;
    s.q_row = t.q_row + b;
    s.q_pos = b;
    s.q_len = e - b;
    s.kv_len = e;  // keys from the document's start
    s.segment_pos = b;
    tasks.push_back(s);
  }
}

namespace {
// Causal pairs of task t, in closed form: query row i sees min(kv_len, max(0, a + i))
// keys, a = q_pos - kv_pos + 1: rows [0, i0) see none, rows [i0, i1) see a + i, rows
// [i1, q_len) see all kv_len.
int64_t causal_pairs(const AttentionTask& t) {
  const int64_t a = int64_t(t.q_pos) - t.kv_pos + 1;
  const int64_t i0 = std::clamp<int64_t>(1 - a, 0, t.q_len);
  const int64_t i1 = std::clamp<int64_t>(t.kv_len - a, i0, t.q_len);
  return (i1 - i0) * (2 * a + i0 + i1 - 1) / 2 + (t.q_len - i1) * int64_t(t.kv_len);
}

// Sum over k in [0, n) of max(0, c + s k).
int64_t sum_positive(int64_t n, int64_t c, int64_t s) {
  if (n <= 0) return 0;
  int64_t k0 = 0, m = n;  // the terms k0 .. k0 + m - 1 are the positive ones
  if (s == 0) {
    m = c > 0 ? n : 0;
  } else if (s > 0) {
    k0 = c > 0 ? 0 : -c / s + 1;
    m = std::max<int64_t>(0, n - k0);
  } else {
    m = c > 0 ? std::min(n, (c - 1) / -s + 1) : 0;
  }
  const int64_t first = c + s * k0;
  return m * first + s * (m * (m - 1) / 2);
}

}  // namespace

int64_t attention_pairs(const AttentionTask& t, const AttentionMask& mask) {
  if (mask.causal()) return causal_pairs(t);
  if (mask.kind == MaskKind::block_sparse) {
    // the own block's causal pairs, and min(k, b) whole blocks per query of block b (a
    // task holds its document's key prefix: block_sparse.h)
    AttentionMask own = mask;
    own.kind = MaskKind::chunked;
    int64_t pairs = attention_pairs(t, own);
    const int64_t B = mask.block_size, Q0 = t.q_pos, Q1 = Q0 + t.q_len;
    for (int64_t b = Q0 / B; b * B < Q1; ++b)
      pairs += (std::min(Q1, (b + 1) * B) - std::max(Q0, b * B)) * std::min<int64_t>(mask.top_blocks, b) * B;
    return pairs;
  }
  // Query p reads the task's keys [K0, K1) in two ranges (attention_mask.h): [0, sink)
  // and [lo, hi); each overlap, unclamped, is linear in p between the points where one
  // of its min/max terms switches, so the rows are summed piece by piece in closed form.
  const int64_t Q0 = t.q_pos, Q1 = Q0 + t.q_len, K0 = t.kv_pos, K1 = K0 + t.kv_len;
  const auto parts = [&](int64_t p) {  // unclamped overlaps: {sink, band}
    const MaskKeys r = mask_keys(mask, t.prefix_len, t.segment_pos, p);
    return std::pair<int64_t, int64_t>{std::min(r.sink_end, K1) - K0, std::min(r.hi, K1) - std::max(r.lo, K0)};
  };
  std::vector<int64_t> cuts = {Q0, Q1};
  const int64_t W = mask.window, S = mask.sink_tokens, P = t.prefix_len, G = t.segment_pos;
  for (int64_t x : {K0, K1, W, K0 + W, K1 + W, S + W, P, G, K0 - W, K1 - W})
    for (int64_t d : {-1, 0, 1}) cuts.push_back(x + d);
  if (mask.kind == MaskKind::chunked || mask.kind == MaskKind::causal_blockwise)
    for (int64_t b = (Q0 / mask.block_size + 1) * mask.block_size; b < Q1; b += mask.block_size) cuts.push_back(b);
  std::sort(cuts.begin(), cuts.end());
  int64_t pairs = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t a = std::max(cuts[i], Q0), b = std::min(cuts[i + 1], Q1);
    if (a >= b) continue;
    const auto [s0, b0] = parts(a);
    if (b - a == 1) {
      pairs += std::max<int64_t>(0, s0) + std::max<int64_t>(0, b0);
      continue;
    }
    const auto [s1, b1] = parts(a + 1);
    pairs += sum_positive(b - a, s0, s1 - s0) + sum_positive(b - a, b0, b1 - b0);
  }
  return pairs;
}

int64_t prefix_pairs(int64_t q_begin, int64_t q_len, const AttentionMask& mask) {
  return attention_pairs(AttentionTask{0, 0, int32_t(q_len), int32_t(q_begin + q_len), int32_t(q_begin), 0, 0}, mask);
}

int64_t attention_pairs(std::span<const AttentionTask> tasks, const AttentionMask& mask) {
  int64_t pairs = 0;
  for (const AttentionTask& t : tasks) pairs += attention_pairs(t, mask);
  return pairs;
}

void merge_attention_partial(float* out, float* lse, const float* part_out,
                             const float* part_lse, int64_t rows, int heads, int head_dim) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      const int64_t i = r * heads + h;
      const float b = part_lse[i];
      if (b == -INFINITY) continue;  // the part saw no key for this row: neutral, whatever its O
      const float a = lse[i];
      float* o = out + i * head_dim;
      const float* p = part_out + i * head_dim;
      // A side that read a non-finite score or value has LSE NaN (core_attention.h), and
      // so has the merged row, with O = NaN whatever either O holds: the arithmetic below
      // keeps a NaN LSE, but would copy a NaN part's O over an empty row as it is. An LSE
      // of +inf is no sum of finite terms either.
      if (!(a < INFINITY) || !(b < INFINITY)) {
        std::fill(o, o + head_dim, std::numeric_limits<float>::quiet_NaN());
        lse[i] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (a == -INFINITY) {
        std::copy(p, p + head_dim, o);
        lse[i] = b;
        continue;
      }
      const float m = std::max(a, b);
      const double merged = double(m) + std::log(std::exp(double(a - m)) + std::exp(double(b - m)));
      const float wa = float(std::exp(double(a) - merged)), wb = float(std::exp(double(b) - merged));
      for (int d = 0; d < head_dim; ++d) o[d] = wa * o[d] + wb * p[d];
      lse[i] = float(merged);
    }
}

int32_t dca_key_position(int64_t t, const DcaParams& dca) {
  return int32_t(t % dca.chunk_len());
}

int32_t dca_query_position_at_distance(int64_t i, int64_t chunk_distance, const DcaParams& dca) {
  const int64_t s = dca.chunk_len(), C = dca.chunk_size;
  if (chunk_distance == 0) return int32_t(i % s);                        // intra
  if (chunk_distance == 1) return int32_t(std::min<int64_t>(i % s + s, C));  // successive
  return int32_t(std::min<int64_t>(2 * s - 1, C));                       // inter
}

float dca_logit_multiplier(int64_t doc_len, const DcaParams& dca) {
  double m = dca.mscale;
  if (dca.mscale_original_length > 0)
    m *= std::max(1.0, 0.1 * std::log(double(doc_len) / dca.mscale_original_length) + 1.0);
  return float(m);
}

static void check_params(const AttentionParams& p) {
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.num_heads % p.num_kv_heads != 0)
    throw std::invalid_argument("attention: invalid head configuration");
  if (p.kernel == AttentionKernel::dca) {
    const DcaParams& d = p.dca;
    if (!(d.chunk_size > d.local_size && d.local_size >= 0))
      throw std::invalid_argument("attention: dca needs chunk_size > local_size >= 0 (got " +
                                  std::to_string(d.chunk_size) + ", " +
                                  std::to_string(d.local_size) + ")");
    if (!d.rope_cos || !d.rope_sin || d.rope_positions <= d.chunk_size || p.head_dim % 2)
      throw std::invalid_argument("attention: dca needs a RoPE table covering positions 0..chunk_size");
    if (!p.mask.causal())
      throw std::invalid_argument(std::string("attention: dca takes only the causal mask (got ") +
                                  mask_kind_name(p.mask.kind) + ")");
  }
  if (const std::string bad = p.mask.validate(); !bad.empty()) throw std::invalid_argument(bad);
}

namespace {

// One chunk of a call's tasks: rebased so that its query rows start at row 0 of
// q + q0 rows and its key rows at row 0 of k + kv0 rows.
struct TaskChunk {
  std::vector<AttentionTask> tasks;
  int64_t q0 = 0, kv0 = 0;
};

// attention_runs' chunks, calling f(chunk) for each, in order.
// (thread_local: grow-only, so steady-state steps allocate nothing)
template <typename F>
void for_each_chunk(const AttentionParams& params, std::span<const AttentionTask> tasks, F&& f) {
  thread_local TaskChunk chunk;
  thread_local std::vector<AttentionRun> runs;
  attention_runs(tasks, params.mask, params.chunk_rows, runs);
  for (const AttentionRun& r : runs) {
    chunk.tasks.clear();
    run_tasks(tasks, r, chunk.tasks);
    chunk.q0 = r.q_lo;
    chunk.kv0 = r.kv_lo;
    for (AttentionTask& t : chunk.tasks) t.q_row -= chunk.q0, t.kv_row -= chunk.kv0;
    f(chunk);
  }
}

// The key rows [begin, end) of task t that its query rows [q_lo, q_hi) read as one run:
// from the first key the first query reads (its document's first under sinks or a
// causal mask, a window's first key under a window) to the last key the last query
// reads (mask_run_keys).
std::pair<int64_t, int64_t> slice_keys(const AttentionTask& t, const AttentionMask& mask, int64_t q_lo, int64_t q_hi) {
  const MaskKeys k =
      mask_run_keys(mask, t.prefix_len, t.segment_pos, int64_t(t.q_pos) + (q_lo - t.q_row), q_hi - q_lo);
  const auto row = [&t](int64_t pos) { return t.kv_row + std::clamp<int64_t>(pos - t.kv_pos, 0, t.kv_len); };
  return {row(first_key(k)), row(k.hi)};
}

}  // namespace

void attention_runs(std::span<const AttentionTask> tasks, const AttentionMask& mask, int64_t chunk_rows,
                    std::vector<AttentionRun>& runs) {
  if (chunk_rows <= 0) throw std::invalid_argument("attention: chunk_rows must be positive");
  runs.clear();
  // the group of consecutive tasks from task i on whose query or key rows overlap (an
  // empty range overlaps nothing), and the rows it spans
  struct Span {
    int64_t q_lo = INT64_MAX, q_hi = 0, kv_lo = INT64_MAX, kv_hi = 0;
    void add(const AttentionTask& t) {
      q_lo = std::min(q_lo, t.q_row), q_hi = std::max(q_hi, t.q_row + t.q_len);
      kv_lo = std::min(kv_lo, t.kv_row), kv_hi = std::max(kv_hi, t.kv_row + t.kv_len);
    }
  };
  auto group_end = [&](size_t i, Span& g) {
    g = Span{};
    g.add(tasks[i]);
    size_t j = i + 1;
    for (; j < tasks.size(); ++j) {
      const AttentionTask& t = tasks[j];
      const bool q_overlap = t.q_len > 0 && t.q_row < g.q_hi && t.q_row + t.q_len > g.q_lo;
      const bool kv_overlap = t.kv_len > 0 && t.kv_row < g.kv_hi && t.kv_row + t.kv_len > g.kv_lo;
      if (!q_overlap && !kv_overlap) break;
      g.add(t);
    }
    return j;
  };
  size_t i = 0;
  while (i < tasks.size()) {
    Span run, g;
    const size_t first_end = group_end(i, g);
    const AttentionTask& t = tasks[i];
    if (first_end == i + 1 && t.q_len > chunk_rows) {
      // one long task: its query slices, cut at in-document multiples of chunk_rows where
      // no query before the cut reads a key after it (prefix_lm: not inside the prefix)
      for (int64_t q = t.q_row, end = t.q_row + t.q_len; q < end;) {
        const int64_t pos = int64_t(t.q_pos) + (q - t.q_row);
        int64_t cut = (pos / chunk_rows + 1) * chunk_rows;  // in-document position
        while (cut < int64_t(t.q_pos) + t.q_len && mask_keys(mask, t.prefix_len, t.segment_pos, cut - 1).hi > cut)
          cut += chunk_rows;
        const int64_t q_hi = std::min(end, q + (cut - pos));
        const auto [kv_lo, kv_hi] = slice_keys(t, mask, q, q_hi);
        runs.push_back({i, i + 1, q, q_hi, kv_lo, kv_hi, true});
        q = q_hi;
      }
      i = first_end;
      continue;
    }
    size_t j = i;
    while (j < tasks.size()) {
      const size_t next = group_end(j, g);
      if (j > i && next == j + 1 && tasks[j].q_len > chunk_rows) break;  // sliced in a run of its own
      Span joined = run;
      joined.q_lo = std::min(run.q_lo, g.q_lo), joined.q_hi = std::max(run.q_hi, g.q_hi);
      joined.kv_lo = std::min(run.kv_lo, g.kv_lo), joined.kv_hi = std::max(run.kv_hi, g.kv_hi);
      const int64_t own = std::max<int64_t>({chunk_rows, g.q_hi - g.q_lo, g.kv_hi - g.kv_lo});
      if (j > i && (joined.q_hi - joined.q_lo > own || joined.kv_hi - joined.kv_lo > own)) break;
      run = joined;
      j = next;
    }
    runs.push_back({i, j, run.q_lo == INT64_MAX ? 0 : run.q_lo, run.q_hi, run.kv_lo == INT64_MAX ? 0 : run.kv_lo,
                    run.kv_hi});
    i = j;
  }
}

void run_tasks(std::span<const AttentionTask> tasks, const AttentionRun& run, std::vector<AttentionTask>& out) {
  if (!run.slice) {
    out.insert(out.end(), tasks.begin() + ptrdiff_t(run.first), tasks.begin() + ptrdiff_t(run.end));
    return;
  }
  const AttentionTask& t = tasks[run.first];
  AttentionTask s = t;
  s.q_row = run.q_lo;
  s.q_len = int32_t(run.q_hi - run.q_lo);
  s.q_pos = int32_t(int64_t(t.q_pos) + (run.q_lo - t.q_row));
  s.kv_row = run.kv_lo;
  s.kv_pos = int32_t(int64_t(t.kv_pos) + (run.kv_lo - t.kv_row));
  s.kv_len = int32_t(run.kv_hi - run.kv_lo);
  // (DCA's length-dependent multiplier: the whole document's length, not the slice's)
  s.doc_len = int32_t(document_length(t));
  out.push_back(s);
}

void attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                       const float* q, const float* k, const float* v, float* out, float* lse) {
  check_params(params);
  if (params.mask.kind == MaskKind::block_sparse) return block_sparse_forward(params, tasks, q, k, v, out, lse);
  const int64_t ldq = int64_t(params.num_heads) * params.head_dim;
  const int64_t ldk = int64_t(params.num_kv_heads) * params.head_dim;
  for_each_chunk(params, tasks, [&](const TaskChunk& c) {
    const int64_t qo = c.q0 * ldq, ko = c.kv0 * ldk;
    blocked_attention_forward(params, c.tasks, q + qo, k + ko, v + ko, out + qo, lse + c.q0 * params.num_heads);
  });
}

void attention_backward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                        const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  check_params(params);
  if (params.mask.kind == MaskKind::block_sparse)
    return block_sparse_backward(params, tasks, q, k, v, out, lse, dout, dq, dk, dv);
  const int64_t ldq = int64_t(params.num_heads) * params.head_dim;
  const int64_t ldk = int64_t(params.num_kv_heads) * params.head_dim;
  for_each_chunk(params, tasks, [&](const TaskChunk& c) {
    const int64_t qo = c.q0 * ldq, ko = c.kv0 * ldk;
    blocked_attention_backward(params, c.tasks, q + qo, k + ko, v + ko, out + qo, lse + c.q0 * params.num_heads,
                               dout + qo, dq + qo, dk + ko, dv + ko);
  });
}

int64_t attention_query_tile(const AttentionParams& params) { return blocked::Geometry(params).qb; }

int64_t attention_run_query_rows(const AttentionParams& params, int64_t longest) {
  const bool together = params.mask.kind == MaskKind::shared_question || params.mask.reads_ahead();
  return together ? std::max(params.chunk_rows, longest) : params.chunk_rows;
}

int64_t attention_run_key_reach(const AttentionParams& params, int64_t longest) {
  if (longest <= params.chunk_rows) return 0;
  const AttentionMask& m = params.mask;
  int64_t back = longest - 1;
  if (m.kind == MaskKind::sliding_window || (m.kind == MaskKind::sink_window && m.sink_tokens == 0))
    back = int64_t(m.window) - 1;
  if (m.kind == MaskKind::chunked) back = int64_t(m.block_size) - 1;
  return std::min(back, longest - 1);
}

int64_t attention_workspace_bytes(const AttentionParams& params, int64_t query_rows, int64_t key_rows, int threads) {
  const int64_t qdim = int64_t(params.num_heads) * params.head_dim;
  const int64_t kvdim = int64_t(params.num_kv_heads) * params.head_dim;
  const int64_t per_query = 4 * int64_t(params.num_heads) + 4 * int64_t(std::max(0, threads - 1)) * qdim;  // D, dQ partials
  // bf16 K, V, K^T and pair words; or rounded copies
  const int64_t per_key = params.precision == Precision::bf16 ? std::max<int64_t>(6 * kvdim + 4 * kvdim, 8 * kvdim) : 0;
  // the threads' tiles: a generous bound on blocked_attention's (a few 64 x 64 blocks each),
  // and the forward's copy of a value block without its non-finite values (and its pair
  // words) for the rare block that has some
  const int64_t tiles = int64_t(std::max(1, threads)) *
                        (64 * (4 * params.head_dim + 1024) * 4 * 4 + (blocked::kKeyBlock + 2) * params.head_dim * 8);
  return per_query * (query_rows + 2) + per_key * (key_rows + 2) + tiles +
         block_sparse_workspace_bytes(params, query_rows, key_rows);
}

void attention_release_workspace() { blocked_attention_release_workspace(); }

}  // namespace lct
