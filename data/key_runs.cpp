#include "data/key_runs.h"

#include <algorithm>

namespace lct {

void add_key_spans(const MaskKeys& k, KeySpans& spans) {
  if (k.sink_end > 0) spans.emplace_back(0, k.sink_end);
  if (k.lo < k.hi) spans.emplace_back(k.lo, k.hi);
}

void merge_spans(KeySpans& spans) {
  std::sort(spans.begin(), spans.end());
  size_t out = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (out > 0 && spans[i].first <= spans[out - 1].second)
      spans[out - 1].second = std::max(spans[out - 1].second, spans[i].second);
    else
      spans[out++] = spans[i];
  }
  spans.resize(out);
}

void read_runs(std::span<const DocPiece> holder, std::span<const DocPiece> reader, const AttentionMask& mask,
               std::vector<KeyRun>& runs) {
  runs.clear();
  KeySpans spans;  // what the reader reads of one holder piece
  for (const DocPiece& h : holder) {
    auto it = std::lower_bound(reader.begin(), reader.end(), h.doc,
                               [](const DocPiece& x, int32_t doc) { return x.doc < doc; });
    spans.clear();
    for (; it != reader.end() && it->doc == h.doc; ++it) add_key_spans(it->keys(mask), spans);
    append_runs(h, spans, runs);
  }
}

void append_runs(const DocPiece& h, KeySpans& spans, std::vector<KeyRun>& runs) {
  for (auto& [a, b] : spans) a = std::max<int64_t>(a, h.pos), b = std::min<int64_t>(b, h.end());  // of h's rows
  std::erase_if(spans, [](const auto& x) { return x.first >= x.second; });
  merge_spans(spans);
  for (const auto& [a, b] : spans) {
    const int32_t row = int32_t(h.row + (a - h.pos));
    KeyRun* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->doc == h.doc && last->end() == a && last->row + last->len == row)
      last->len += int32_t(b - a);  // continues the last run (consecutive pieces)
    else
      runs.push_back({h.doc, h.doc_start, int32_t(a), int32_t(b - a), row});
  }
}

int64_t rows_of(std::span<const KeyRun> runs) {
  int64_t n = 0;
  for (const KeyRun& r : runs) n += r.len;
  return n;
}

bool reads(const DocPiece& p, const KeyRun& r, const AttentionMask& mask) {
  if (p.doc != r.doc) return false;
  const MaskKeys k = p.keys(mask);
  return (r.pos < k.sink_end) || (r.pos < k.hi && r.end() > k.lo);
}

void KeyExchange::plan(const std::vector<std::vector<DocPiece>>& group, int me, const AttentionMask& mask) {
  const size_t n = group.size();
  to.resize(n);
  from.resize(n);
  for (size_t r = 0; r < n; ++r) {
    if (int(r) == me) {
      to[r].clear();
      from[r].clear();
      continue;
    }
    read_runs(group[size_t(me)], group[r], mask, to[r]);
    read_runs(group[r], group[size_t(me)], mask, from[r]);
  }
}

int64_t KeyExchange::rows_to() const {
  int64_t n = 0;
  for (const auto& runs : to) n += rows_of(runs);
  return n;
}

int64_t KeyExchange::rows_from() const {
  int64_t n = 0;
  for (const auto& runs : from) n += rows_of(runs);
  return n;
}

}  // namespace lct
