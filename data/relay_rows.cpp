#include "data/relay_rows.h"

#include <algorithm>
#include <stdexcept>

namespace lct {

int64_t rows_in(const RowSpans& spans) {
  int64_t n = 0;
  for (const auto& [a, b] : spans) n += b - a;
  return n;
}

RelayReads relay_reads(const std::vector<std::vector<DocPiece>>& group, const AttentionMask& mask) {
  const size_t cp = group.size();
  RelayReads reads(cp, std::vector<RowSpans>(cp));
  std::vector<KeyRun> runs;
  for (size_t r = 0; r < cp; ++r)
    for (size_t j = 0; j < cp; ++j) {
      read_runs(group[j], group[r], mask, runs);
      for (const KeyRun& x : runs) reads[r][j].emplace_back(x.row, int64_t(x.row) + x.len);
    }
  return reads;
}

RelayPlan plan_relay(const RelayReads& reads, int inner, int me) {
  const int cp = int(reads.size());
  if (inner < 1 || cp % inner != 0) throw std::invalid_argument("plan_relay: inner rings must divide the group");
  for (const auto& row : reads)
    if (int(row.size()) != cp) throw std::invalid_argument("plan_relay: reads must name every rank's block");
  const int outer = cp / inner;
  const auto rank = [&](int g, int u) { return ((g % outer + outer) % outer) * inner + (u % inner + inner) % inner; };
  const auto read_by = [&](int j, const std::vector<int>& readers) {
    KeySpans s;
    for (int r : readers) s.insert(s.end(), reads[size_t(r)][size_t(j)].begin(), reads[size_t(r)][size_t(j)].end());
    merge_spans(s);
    return RowSpans(s.begin(), s.end());
  };
  // the ranks that compute on block j at steps [1, last] (its owner, at step 0, keeps its part)
  const auto visitors = [&](int j, int last) {
    std::vector<int> v;
    for (int t = 1; t <= last; ++t) v.push_back(rank(j / inner + t / inner, j % inner + t % inner));
    return v;
  };
  // after an inner hop that arrives at step with inner index i, at rank (g, u): (g, u + t), t < inner - i
  const auto inner_readers = [&](int g, int u, int i) {
    std::vector<int> v;
    for (int t = 0; t < inner - i; ++t) v.push_back(rank(g, u + t));
    return v;
  };
  // after an outer hop that arrives at outer step o at group g: groups g ... g + outer - 1 - o
  const auto outer_readers = [&](int g, int o) {
    std::vector<int> v;
    for (int a = 0; a < outer - o; ++a)
      for (int u = 0; u < inner; ++u) v.push_back(rank(g + a, u));
    return v;
  };
  const int g = me / inner, u = me % inner;
  RelayPlan p;
  p.steps.resize(size_t(cp));
  for (int s = 0; s < cp; ++s) {
    const int o = s / inner, i = s % inner;
    RelayStep& st = p.steps[size_t(s)];
    st.block = rank(g - o, u - i);
    if (s > 0) {
      st.arrive = i > 0 ? read_by(st.block, inner_readers(g, u, i)) : read_by(st.block, outer_readers(g, o));
      st.acc_arrive = read_by(st.block, visitors(st.block, s - 1));
    }
    st.inner = i + 1 < inner;
    if (st.inner) st.inner_rows = read_by(st.block, inner_readers(g, u + 1, i + 1));
    st.outer = i == 0 && o + 1 < outer;
    if (st.outer) st.outer_rows = read_by(st.block, outer_readers(g + 1, o + 1));
    st.acc_send = read_by(st.block, visitors(st.block, s));
  }
  p.home = read_by(me, visitors(me, cp - 1));
  return p;
}

}  // namespace lct
