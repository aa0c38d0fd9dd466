#include "attention/cad_plan.h"

#include "attention/cad_cost.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace lct {
namespace {
// Pairs of query rows [q0, q1) of a document against their causal prefixes.
int64_t prefix_pairs(int64_t q0, int64_t q1) { return (q1 * (q1 + 1) - q0 * (q0 + 1)) / 2; }

struct Candidate {
  size_t doc = 0;
  bool whole = false;  // the document's whole remaining middle
  int64_t m = 0;       // head/tail rows moved from each end (when not whole)
  double load = 0;     // its cost
  int64_t bytes = 0;
};
}  // namespace

CaPlanOptions ca_plan_options(const AttentionParams& p, double tolerance, const CaCostModel* cost) {
  const int64_t qd = int64_t(p.num_heads) * p.head_dim, kvd = int64_t(p.num_kv_heads) * p.head_dim;
  CaPlanOptions o;
  o.tolerance = tolerance;
  o.q_bytes_per_row = (2 * qd + p.num_heads) * int64_t(sizeof(float));  // Q there, O + LSE back
  o.kv_bytes_per_row = 2 * kvd * int64_t(sizeof(float));
  o.cost = cost;
  return o;
}

CaPlan plan_core_attention(const std::vector<CaPiece>& docs, int n, const CaPlanOptions& o) {
  if (n < 1) throw std::invalid_argument("plan_core_attention: needs at least one server");
  if (!(o.tolerance > 0)) throw std::invalid_argument("plan_core_attention: tolerance must be > 0");
  // cost of query rows [q0, q0 + rows) of a document against their causal prefixes
  const auto cost = [&](int64_t q0, int64_t rows) {
    return o.cost ? o.cost->seconds(rows, q0 + rows) : double(prefix_pairs(q0, q0 + rows));
  };
  // a server's load: its other work plus its tasks' cost at its speed
  const bool uneven = o.cost && (!o.base_seconds.empty() || !o.speed.empty());
  if (uneven && ((!o.base_seconds.empty() && int(o.base_seconds.size()) != n) ||
                 (!o.speed.empty() && int(o.speed.size()) != n)))
    throw std::invalid_argument("plan_core_attention: base_seconds and speed need one entry per server");
  const auto speed = [&](int s) { return uneven && !o.speed.empty() ? o.speed[size_t(s)] : 1.0; };
  CaPlan plan;
  std::vector<double> load(size_t(n), 0.0);
  for (int s = 0; uneven && !o.base_seconds.empty() && s < n; ++s) load[size_t(s)] = o.base_seconds[size_t(s)];
  plan.pairs_before.assign(size_t(n), 0);
  double attention = 0;
  for (const CaPiece& d : docs) {
    if (d.origin < 0 || d.origin >= n) throw std::invalid_argument("plan_core_attention: origin out of range");
    if (d.pos < 0 || d.len < 0) throw std::invalid_argument("plan_core_attention: negative piece");
    plan.pairs_before[size_t(d.origin)] += prefix_pairs(d.pos, d.pos + d.len);
    const double c = speed(d.origin) * cost(d.pos, d.len);
    load[size_t(d.origin)] += c;
    attention += c;
  }
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / n;
  const double slack = o.tolerance * attention / n;  // a fraction of the mean attention
  // each piece keeps the middle [pos + a, pos + L - a) on its origin (L its rows); moves
  // take rows from its ends
  std::vector<int64_t> a(docs.size(), 0);

  // The best move to `dst` of at most `cap` pairs from a surplus server's documents
  // (only `src`'s when src >= 0): the most pairs per byte; ties keep (origin, doc) order.
  const auto choose = [&](int dst, int src, double cap, Candidate& best) {
    double best_e = -1;
    for (size_t i = 0; i < docs.size(); ++i) {
      const CaPiece& d = docs[i];
      const double surplus = load[size_t(d.origin)] - mean;
      const int64_t L = d.len, P = d.pos, rows = L - 2 * a[i];
      if (surplus <= 0 || rows <= 0 || d.origin == dst || (src >= 0 && d.origin != src)) continue;
      const double remaining = cost(P + a[i], rows);
      // in the cost model's units: the origin's surplus and dst's room at their speeds
      const double wanted = std::min({remaining, surplus / speed(d.origin), cap / speed(dst)});
      Candidate c;
      c.doc = i;
      if (wanted >= remaining) {
        c.whole = true;
        c.load = remaining;
        c.bytes = rows * o.q_bytes_per_row + (P + L - a[i]) * o.kv_bytes_per_row;
      } else {
        // the largest m whose head + tail cost fits (m (L + 1) pairs for a whole
        // document without a profile)
        const auto pair_cost = [&](int64_t m) {
          return cost(P + a[i], m) + cost(P + L - a[i] - m, m);
        };
        int64_t lo = 0, hi = (rows - 1) / 2;
        while (lo < hi) {
          const int64_t mid = (lo + hi + 1) / 2;
          if (pair_cost(mid) <= wanted) lo = mid;
          else hi = mid - 1;
        }
        c.m = lo;
        if (c.m == 0) continue;
        c.load = pair_cost(c.m);
        c.bytes = 2 * c.m * o.q_bytes_per_row + (P + L - a[i]) * o.kv_bytes_per_row;
      }
      const double e = c.load / double(std::max<int64_t>(c.bytes, 1));
      if (e > best_e) best_e = e, best = c;
    }
    return best_e >= 0;
  };
  const auto apply = [&](int dst, const Candidate& c) {
    const CaPiece& d = docs[c.doc];
    int64_t& ai = a[c.doc];
    const int64_t L = d.len, P = d.pos;
    // the origin keeps the rest of the middle; with a measured cost, a split costs more
    // than its parts (smaller tasks), so its load drops by what its task really lost
    const double before = cost(P + ai, L - 2 * ai);
    if (c.whole) {
      plan.tasks.push_back({d.origin, dst, d.doc, int32_t(P + ai), int32_t(L - 2 * ai)});
      ai = (L + 1) / 2;  // nothing left in the middle
    } else {
      plan.tasks.push_back({d.origin, dst, d.doc, int32_t(P + ai), int32_t(c.m)});
      plan.tasks.push_back({d.origin, dst, d.doc, int32_t(P + L - ai - c.m), int32_t(c.m)});
      ai += c.m;
    }
    const int64_t left = L - 2 * ai;
    load[size_t(d.origin)] -= speed(d.origin) * (before - (left > 0 ? cost(P + ai, left) : 0.0));
    load[size_t(dst)] += speed(dst) * c.load;
    plan.bytes_moved += c.bytes;
  };

  // 1. the paper's loop: deficient servers, most deficient first, fill from surpluses
  std::vector<int> deficit;
  for (int s = 0; s < n; ++s)
    if (mean - load[size_t(s)] > slack) deficit.push_back(s);
  std::stable_sort(deficit.begin(), deficit.end(),
                   [&](int x, int y) { return load[size_t(x)] < load[size_t(y)]; });
  for (int dst : deficit) {
    Candidate c;
    while (mean - load[size_t(dst)] > slack && choose(dst, -1, mean - load[size_t(dst)], c)) apply(dst, c);
  }
  // 2. servers still above mean + slack (their excess was spread over servers that were
  //    each within tolerance) give to the least loaded, never pushing it past mean + slack
  for (int src = 0; src < n; ++src) {
    while (load[size_t(src)] - mean > slack) {
      const int dst = int(std::min_element(load.begin(), load.end()) - load.begin());
      Candidate c;
      if (!choose(dst, src, mean + slack - load[size_t(dst)], c)) break;
      apply(dst, c);
    }
  }
  // what was not moved runs where it is
  for (size_t i = 0; i < docs.size(); ++i) {
    const CaPiece& d = docs[i];
    const int64_t rows = d.len - 2 * a[i];
    if (rows > 0)
      plan.tasks.push_back({d.origin, d.origin, d.doc, int32_t(d.pos + a[i]), int32_t(rows)});
  }
  // a fixed order: by server, origin, document, first row
  std::sort(plan.tasks.begin(), plan.tasks.end(), [](const CaTask& x, const CaTask& y) {
    return std::tie(x.server, x.origin, x.doc, x.q_begin) < std::tie(y.server, y.origin, y.doc, y.q_begin);
  });
  plan.pairs_after.assign(size_t(n), 0);
  plan.load_after.assign(size_t(n), 0.0);
  for (const CaTask& t : plan.tasks) {
    plan.pairs_after[size_t(t.server)] += prefix_pairs(t.q_begin, t.kv_len());
    plan.load_after[size_t(t.server)] += cost(t.q_begin, t.q_len);
  }
  return plan;
}

}  // namespace lct
