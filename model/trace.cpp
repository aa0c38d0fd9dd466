#include "model/trace.h"

#include <algorithm>

namespace lct {

std::map<std::string, PhaseTime> phase_times(const std::vector<TraceSpan>& spans) {
  std::vector<const TraceSpan*> phases, products;
  for (const TraceSpan& s : spans) {
    if (s.track == TraceTrack::compute) phases.push_back(&s);
    if (s.track == TraceTrack::product) products.push_back(&s);
  }
  const auto by_begin = [](const TraceSpan* a, const TraceSpan* b) { return a->begin < b->begin; };
  std::sort(phases.begin(), phases.end(), by_begin);
  std::sort(products.begin(), products.end(), by_begin);
  const auto seconds = [](TraceClock::time_point a, TraceClock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::map<std::string, PhaseTime> out;
  size_t p = 0;  // spans on one track never overlap, so one pass over both lists
  for (const TraceSpan* phase : phases) {
    PhaseTime& t = out[phase->name];
    t.seconds += seconds(phase->begin, phase->end);
    ++t.count;
    while (p < products.size() && products[p]->end <= phase->begin) ++p;
    for (size_t q = p; q < products.size() && products[q]->begin < phase->end; ++q)
      t.product_seconds += seconds(std::max(products[q]->begin, phase->begin), std::min(products[q]->end, phase->end));
  }
  return out;
}

}  // namespace lct
