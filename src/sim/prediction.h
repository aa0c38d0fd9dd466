// What lct simulate predicts for one step, and its predicted timeline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "model/trace.h"
#include "parallel/layout.h"
#include "src/io/trace_json.h"

namespace lct {

// max / mean of per-rank figures (1 when they are all 0)
inline double max_over_mean(const std::vector<double>& v) {
  const double mx = *std::max_element(v.begin(), v.end());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return mean > 0 ? mx / mean : 1.0;
}


struct StepPrediction {
  double seconds = 0;
  std::vector<double> compute;  // per rank
  double pairs_before = 1, pairs_after = 1;  // max/mean over ranks
  double bytes_per_rank = 0;    // exchanged per step (CAD, context parallelism)
  double exposed_per_rank = 0;  // seconds a rank waits for its own context-parallel exchange
  int64_t tokens = 0;
  // per rank: the tokens it trains and the attention pairs its queries read (the step
  // model's batches, as lct train's metrics.jsonl records them)
  std::vector<double> rank_tokens, rank_pairs;
  // per rank: the bytes its attention exchange sends (lct train's rank_exchange_bytes),
  // exact where rank_bytes_exact (no exchange, the ring, the all-gather, the double
  // ring); Ulysses, the hybrid and CAD only estimate their bytes (bytes_per_rank), and
  // block_sparse under any cp > 1 is priced as the causal superset (an estimate: the
  // selected blocks, block sums and runs it moves depend on the content)
  std::vector<double> rank_bytes;
  bool rank_bytes_exact = true;
};

// The predicted timeline (trace.path): every rank's compute and wait spans of each
// simulated step, steps laid end to end, in the training timeline's format
// (src/io/trace_json.h), so a prediction and a measured run open side by side. Times are
// seconds from the step's start; a rank's compute spans sum to its predicted compute
// and its wait spans to the rest of the step (the idle figure).
class SimTimeline {
 public:
  SimTimeline(const std::string& path, int ranks) : path_(path), ranks_(static_cast<size_t>(ranks)) {}
  bool on() const { return !path_.empty(); }
  void compute(int r, const char* name, double begin, double end) { add(r, TraceTrack::compute, name, begin, end); }
  void wait(int r, const char* name, double begin, double end) { add(r, TraceTrack::wait, name, begin, end); }
  void end_step(double seconds) {
    for (size_t r = 0; r < ranks_.size(); ++r) add(int(r), TraceTrack::step, "step", 0.0, seconds);
    origin_ += seconds;
    ++step_;
  }
  void write(const Layout& layout) {
    if (!on()) return;
    for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r].name = rank_name(layout, int(r)) + " simulated";
    write_trace_json(path_, ranks_, "trace.path");
  }

 private:
  void add(int r, TraceTrack track, const char* name, double begin, double end) {
    if (!on() || !(end > begin)) return;
    ranks_[size_t(r)].events.push_back({track, 1e6 * (origin_ + begin), 1e6 * (origin_ + end), step_ + 1, name});
  }
  std::string path_;
  std::vector<TraceProcess> ranks_;
  double origin_ = 0;
  int64_t step_ = 0;
};

}  // namespace lct
