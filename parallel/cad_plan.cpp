#include "parallel/cad_plan.h"

#include "parallel/cad_cost.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace lct {
namespace {
struct Candidate {
  size_t doc = 0;
  bool whole = false;  // the document's whole remaining middle
  int64_t head = 0, tail = 0;  // rows moved from each end of the middle (when not whole)
  double load = 0;     // its cost
  int64_t bytes = 0;
};
}  // namespace

CadPlanOptions cad_plan_options(const AttentionParams& p, double tolerance, const CadCostModel* cost) {
  const int64_t qd = int64_t(p.num_heads) * p.head_dim, kvd = int64_t(p.num_kv_heads) * p.head_dim;
  CadPlanOptions o;
  o.tolerance = tolerance;
  // Q, O, K and V travel in bf16 in a bf16 run (parallel/cad_attention.h); the LSE in fp32
  const int64_t value = p.precision == Precision::bf16 ? 2 : int64_t(sizeof(float));
  o.q_bytes_per_row = 2 * qd * value + p.num_heads * int64_t(sizeof(float));  // Q there, O + LSE back
  o.kv_bytes_per_row = 2 * kvd * value;
  o.cost = cost;
  o.mask = p.mask;
  o.split_align = attention_query_tile(p);
  return o;
}

AttentionTask CadTask::attention_task(int64_t q_row, int64_t kv_row, int32_t doc_len) const {
  AttentionTask t{q_row, kv_row, q_len, kv_len(), q_begin, kv_begin(), doc_len};
  t.prefix_len = prefix_len;
  t.segment_pos = segment_pos;
  return t;
}

CadTask cad_task(const CadPiece& d, int server, int64_t q_begin, int64_t q_len, const AttentionMask& mask) {
  CadTask t{d.origin, server, d.doc, int32_t(q_begin), int32_t(q_len), d.prefix_len, d.segment_pos};
  if (q_len <= 0) {
    t.kv_lo = t.kv_end = int32_t(q_begin);
    return t;
  }
  const MaskKeys k = mask_run_keys(mask, d.prefix_len, d.segment_pos, q_begin, q_len);
  t.kv_sink_end = int32_t(k.sink_end), t.kv_lo = int32_t(k.lo);
  // the masks that read ahead stop at the document's end (unknown: 0, only in tests of
  // the masks that do not)
  t.kv_end = int32_t(std::min<int64_t>(k.hi, d.doc_len > 0 ? d.doc_len : std::numeric_limits<int32_t>::max()));
  return t;
}

namespace {

// The greedy balancer of plan_core_attention: every server's load and how many rows of
// each piece's middle have moved away, one move at a time.
class Balancer {
 public:
  Balancer(const std::vector<CadPiece>& docs, int n, const CadPlanOptions& o)
      : docs_(docs), n_(n), o_(o), load_(size_t(n), 0.0), head_(docs.size(), 0), tail_(docs.size(), 0) {
    if (o.split_align < 1) throw std::invalid_argument("plan_core_attention: split_align must be >= 1");
    if (n < 1) throw std::invalid_argument("plan_core_attention: needs at least one server");
    if (!(o.tolerance > 0)) throw std::invalid_argument("plan_core_attention: tolerance must be > 0");
    // a server's load: its other work plus its tasks' cost at its speed
    uneven_ = o.cost && (!o.base_seconds.empty() || !o.speed.empty());
    if (uneven_ && ((!o.base_seconds.empty() && int(o.base_seconds.size()) != n) ||
                    (!o.speed.empty() && int(o.speed.size()) != n)))
      throw std::invalid_argument("plan_core_attention: base_seconds and speed need one entry per server");
    for (int s = 0; uneven_ && !o.base_seconds.empty() && s < n; ++s) load_[size_t(s)] = o.base_seconds[size_t(s)];
    plan_.pairs_before.assign(size_t(n), 0);
    double attention = 0;
    for (const CadPiece& d : docs) {
      if (d.origin < 0 || d.origin >= n) throw std::invalid_argument("plan_core_attention: origin out of range");
      if (d.pos < 0 || d.len < 0) throw std::invalid_argument("plan_core_attention: negative piece");
      plan_.pairs_before[size_t(d.origin)] += attention_pairs(task(d, d.pos, d.len), o.mask);
      const double c = speed(d.origin) * cost(d, d.pos, d.len);
      load_[size_t(d.origin)] += c;
      attention += c;
    }
    mean_ = std::accumulate(load_.begin(), load_.end(), 0.0) / n;
    slack_ = o.tolerance * attention / n;  // a fraction of the mean attention
  }

  // 1. the paper's loop: deficient servers, most deficient first, fill from surpluses
  void fill_deficits() {
    std::vector<int> deficit;
    for (int s = 0; s < n_; ++s)
      if (mean_ - load_[size_t(s)] > slack_) deficit.push_back(s);
    std::stable_sort(deficit.begin(), deficit.end(),
                     [&](int x, int y) { return load_[size_t(x)] < load_[size_t(y)]; });
    for (int dst : deficit) {
      Candidate c;
      while (mean_ - load_[size_t(dst)] > slack_ && choose(dst, -1, mean_ - load_[size_t(dst)], c)) apply(dst, c);
    }
  }

  // 2. servers still above mean + slack (their excess was spread over servers that were
  //    each within tolerance) give to the least loaded, never pushing it past mean + slack
  void drain_surpluses() {
    for (int src = 0; src < n_; ++src) {
      while (load_[size_t(src)] - mean_ > slack_) {
        const int dst = int(std::min_element(load_.begin(), load_.end()) - load_.begin());
        Candidate c;
        if (!choose(dst, src, mean_ + slack_ - load_[size_t(dst)], c)) break;
        apply(dst, c);
      }
    }
  }

  // What was not moved runs where it is; tasks in a fixed order, and the figures.
  CadPlan finish() {
    for (size_t i = 0; i < docs_.size(); ++i) {
      const CadPiece& d = docs_[i];
      const int64_t rows = middle_rows(i);
      if (rows > 0)
        plan_.tasks.push_back(cad_task(d, d.origin, d.pos + head_[i], rows, o_.mask));
    }
    // by server, origin, document, first row
    std::sort(plan_.tasks.begin(), plan_.tasks.end(), [](const CadTask& x, const CadTask& y) {
      return std::tie(x.server, x.origin, x.doc, x.q_begin) < std::tie(y.server, y.origin, y.doc, y.q_begin);
    });
    plan_.pairs_after.assign(size_t(n_), 0);
    plan_.load_after.assign(size_t(n_), 0.0);
    for (const CadTask& t : plan_.tasks) {
      const AttentionTask a = t.attention_task(0, 0, 0);
      const int64_t pairs = attention_pairs(a, o_.mask);
      plan_.pairs_after[size_t(t.server)] += pairs;
      plan_.load_after[size_t(t.server)] += o_.cost ? o_.cost->seconds(a, o_.mask) : double(pairs);
    }
    return std::move(plan_);
  }

 private:
  // query rows [q0, q0 + rows) of piece d against the keys they read
  AttentionTask task(const CadPiece& d, int64_t q0, int64_t rows) const {
    return cad_task(d, d.origin, q0, rows, o_.mask).attention_task(0, 0, 0);
  }
  // their cost: the pairs the mask lets through, or a profile's time of them
  double cost(const CadPiece& d, int64_t q0, int64_t rows) const {
    const AttentionTask t = task(d, q0, rows);
    return o_.cost ? o_.cost->seconds(t, o_.mask) : double(attention_pairs(t, o_.mask));
  }
  double speed(int s) const { return uneven_ && !o_.speed.empty() ? o_.speed[size_t(s)] : 1.0; }

  // The best move to `dst` of at most `cap` pairs from a surplus server's documents
  // (only `src`'s when src >= 0): the most pairs per byte; ties keep (origin, doc) order.
  // Each piece keeps its middle [pos + head, pos + L - tail) on its origin (L its rows);
  // moves take rows from its ends.
  bool choose(int dst, int src, double cap, Candidate& best) const {
    double best_e = -1;
    for (size_t i = 0; i < docs_.size(); ++i) {
      const CadPiece& d = docs_[i];
      const double surplus = load_[size_t(d.origin)] - mean_;
      const int64_t P = d.pos, rows = middle_rows(i);
      if (surplus <= 0 || rows <= 0 || d.origin == dst || (src >= 0 && d.origin != src)) continue;
      const double remaining = cost(d, P + head_[i], rows);
      // in the cost model's units: the origin's surplus and dst's room at their speeds
      const double wanted = std::min({remaining, surplus / speed(d.origin), cap / speed(dst)});
      Candidate c;
      c.doc = i;
      if (wanted >= remaining) {
        c.whole = true;
        c.load = remaining;
        c.bytes = rows * o_.q_bytes_per_row + cad_task(d, d.origin, P + head_[i], rows, o_.mask).kv_read() * o_.kv_bytes_per_row;
      } else {
        std::tie(c.head, c.tail) = split_rows(i, largest_split(i, wanted));
        if (c.head + c.tail == 0) continue;
        c.load = split_cost(i, c.head, c.tail);
        c.bytes = (c.head + c.tail) * o_.q_bytes_per_row + cad_task(d, d.origin, P + head_[i], rows, o_.mask).kv_read() * o_.kv_bytes_per_row;
      }
      const double e = c.load / double(std::max<int64_t>(c.bytes, 1));
      if (e > best_e) best_e = e, best = c;
    }
    return best_e >= 0;
  }
  int64_t middle_rows(size_t i) const { return docs_[i].len - head_[i] - tail_[i]; }
  // The rows taken from each end of piece i's middle for m rows a side: in a piece of at
  // least kAlignedPieceTiles tiles the cuts fall on in-document positions that are
  // multiples of split_align (the kernel's query tile, so a split never changes a row's
  // arithmetic; core_attention.h), the head's end rounded down and the tail's start
  // rounded up, never crossing; shorter pieces are cut anywhere (a tile's granularity
  // would cost them their balance).
  std::pair<int64_t, int64_t> split_rows(size_t i, int64_t m) const {
    const CadPiece& d = docs_[i];
    const int64_t align =
        o_.align_short_pieces || d.len >= kAlignedPieceTiles * o_.split_align ? o_.split_align : 1;
    const int64_t lo = int64_t(d.pos) + head_[i], hi = int64_t(d.pos) + d.len - tail_[i];
    int64_t head_end = (lo + m) / align * align, tail_begin = (hi - m + align - 1) / align * align;
    head_end = std::max(head_end, lo), tail_begin = std::min(tail_begin, hi);
    if (head_end > tail_begin) head_end = tail_begin = std::max(lo, std::min(head_end, hi));
    return {head_end - lo, hi - tail_begin};
  }
  // the cost of `head` rows from the front and `tail` rows from the back of piece i's middle
  double split_cost(size_t i, int64_t head, int64_t tail) const {
    const CadPiece& d = docs_[i];
    return (head > 0 ? cost(d, d.pos + head_[i], head) : 0.0) +
           (tail > 0 ? cost(d, d.pos + d.len - tail_[i] - tail, tail) : 0.0);
  }
  // the largest m whose aligned head + tail cost fits `wanted` (m (L + 1) pairs for a
  // whole causal document without a profile and alignment); the cost grows with m
  int64_t largest_split(size_t i, double wanted) const {
    int64_t lo = 0, hi = (middle_rows(i) - 1) / 2;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      const auto [h, t] = split_rows(i, mid);
      if (split_cost(i, h, t) <= wanted) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
  void apply(int dst, const Candidate& c) {
    const CadPiece& d = docs_[c.doc];
    int64_t& head = head_[c.doc];
    int64_t& tail = tail_[c.doc];
    const int64_t L = d.len, P = d.pos;
    // the origin keeps the rest of the middle; with a measured cost, a split costs more
    // than its parts (smaller tasks), so its load drops by what its task really lost
    const double before = cost(d, P + head, middle_rows(c.doc));
    if (c.whole) {
      plan_.tasks.push_back(cad_task(d, dst, P + head, middle_rows(c.doc), o_.mask));
      head = L - tail;  // nothing left in the middle
    } else {
      if (c.head > 0) plan_.tasks.push_back(cad_task(d, dst, P + head, c.head, o_.mask));
      if (c.tail > 0) plan_.tasks.push_back(cad_task(d, dst, P + L - tail - c.tail, c.tail, o_.mask));
      head += c.head, tail += c.tail;
    }
    const int64_t left = middle_rows(c.doc);
    load_[size_t(d.origin)] -= speed(d.origin) * (before - (left > 0 ? cost(d, P + head, left) : 0.0));
    load_[size_t(dst)] += speed(dst) * c.load;
    plan_.bytes_moved += c.bytes;
  }

  const std::vector<CadPiece>& docs_;
  const int n_;
  const CadPlanOptions& o_;
  bool uneven_ = false;
  std::vector<double> load_;
  std::vector<int64_t> head_, tail_;  // per piece: rows moved from its front and back
  double mean_ = 0, slack_ = 0;
  CadPlan plan_;
};

}  // namespace

CadPlan plan_core_attention(const std::vector<CadPiece>& docs, int n, const CadPlanOptions& o) {
  Balancer b(docs, n, o);
  b.fill_deficits();
  b.drain_surpluses();
  return b.finish();
}

}  // namespace lct
