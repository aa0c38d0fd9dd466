// The longest sequence that fits (lct train --max-seq-len): the largest data.seq_len, a
// multiple of 1024 tokens (and of the context-parallel split's 2 x cp), whose run fits
// the memory available to a rank by lct's own estimate (src/train/memory_budget.h), every
// other key as configured. Nothing is allocated: each candidate is a run plan and its
// estimate. The estimate grows with the length, so a doubling search and a bisection
// find it in about 2 log2(length / 1024) plans.
#pragma once

#include <cstdint>
#include <string>

#include "src/config/config.h"
#include "src/train/memory_budget.h"

namespace lct {

struct LongestFit {
  int64_t granularity = 1024;  // candidates are multiples of it
  int64_t seq_len = 0;         // the largest that fits; 0 when not even `granularity` does
  MemoryEstimate estimate;     // at seq_len
  int64_t next = 0;            // seq_len + granularity, the shortest that does not fit
  double next_bytes = 0;       // its estimate when memory refuses it, else 0
  std::string next_refusal;    // when a rule refuses it: that rule's line
};

// `configured` is config's own run plan (its layout sets the granularity).
LongestFit longest_fitting_seq_len(const Config& config, const RunPlan& configured, const MemoryAvailable& available);

// The answer in one line.
std::string describe_longest_fit(const LongestFit& f, const MemoryAvailable& available);

}  // namespace lct
