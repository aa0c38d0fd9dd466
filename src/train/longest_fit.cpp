#include "src/train/longest_fit.h"

#include <fmt/format.h>
#include <numeric>

#include "src/train/run_plan.h"

namespace lct {
namespace {

struct Candidate {
  bool fits = false;
  MemoryEstimate estimate;  // when the plan is valid
  std::string refusal;      // a rule's line when the plan is not
};

Candidate try_seq_len(const Config& config, int world, const MemoryAvailable& available, int64_t seq_len) {
  Candidate c;
  Config at = config;
  at.data.seq_len = seq_len;
  try {
    validate_config(at);
    const RunPlan plan = make_run_plan(at, world);
    c.estimate = estimate_rank_memory(plan);
    c.fits = check_memory_budget(c.estimate, available).empty();
  } catch (const ConfigError& e) {
    c.refusal = e.what();
  }
  return c;
}

}  // namespace

LongestFit longest_fitting_seq_len(const Config& config, const RunPlan& configured, const MemoryAvailable& available) {
  LongestFit f;
  const int world = configured.world;
  f.granularity = std::lcm(int64_t(1024), int64_t(2) * configured.layout.cp);
  const int64_t g = f.granularity;
  Candidate first = try_seq_len(config, world, available, g);
  const auto refused = [&f](int64_t seq_len, const Candidate& c) {
    f.next = seq_len;
    f.next_bytes = c.refusal.empty() ? c.estimate.total() : 0;
    f.next_refusal = c.refusal;
  };
  if (!first.fits) {
    refused(g, first);
    return f;
  }
  // doubling: k fits, then the first 2^i k that does not (or the cap)
  int64_t lo = 1, hi = 0;
  Candidate at_lo = first, at_hi;
  for (int64_t k = 2; k * g <= kMaxSeqLen; k *= 2) {
    Candidate c = try_seq_len(config, world, available, k * g);
    if (!c.fits) {
      hi = k, at_hi = c;
      break;
    }
    lo = k, at_lo = c;
  }
  if (hi == 0) {  // fits up to the config's bound, which refuses the next multiple
    hi = kMaxSeqLen / g + 1;
    at_hi = try_seq_len(config, world, available, hi * g);
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    Candidate c = try_seq_len(config, world, available, mid * g);
    if (c.fits)
      lo = mid, at_lo = c;
    else
      hi = mid, at_hi = c;
  }
  f.seq_len = lo * g;
  f.estimate = at_lo.estimate;
  refused(hi * g, at_hi);
  return f;
}

std::string describe_longest_fit(const LongestFit& f, const MemoryAvailable& available) {
  const std::string next = f.next_refusal.empty()
                               ? fmt::format("{} tokens would need about {}", f.next, bytes_text(f.next_bytes))
                               : fmt::format("{} tokens: {}", f.next, f.next_refusal);
  if (f.seq_len == 0)
    return fmt::format("longest data.seq_len that fits: none, {} of {} available ({})", next,
                       bytes_text(available.bytes), available.limit);
  return fmt::format("longest data.seq_len that fits: {} tokens (a multiple of {}), a rank needing about {} of {} "
                     "available ({}); {}",
                     f.seq_len, f.granularity, bytes_text(f.estimate.total()), bytes_text(available.bytes),
                     available.limit, next);
}

}  // namespace lct
