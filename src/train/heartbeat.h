// A heartbeat inside long steps (train.heartbeat_s): while a step has run longer than
// the interval, rank 0 prints where it is every interval, from a thread of its own that
// reads the model's StepProgress (model/progress.h):
//   step 3: backward, layer 2 of 4, micro-batch 1 of 2 | 37% of the step's FLOPs | 92 s in, about 2.6 min to go
// (the share is this rank's layer passes, weighted by their FLOPs; the estimate assumes
// the rest runs at the rate so far). On a terminal (not under an MPI launcher, whose
// ranks write to a pseudo-terminal wherever the output goes) it is one line rewritten in
// place and cleared when the step ends; otherwise a line each time. metrics.jsonl is unchanged, and
// nothing the step computes is.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "model/progress.h"

namespace lct {

class Heartbeat {
 public:
  // interval_s <= 0: off (no thread). `layers`: the model's layers; `micro_batches`: a
  // step's on this rank.
  Heartbeat(double interval_s, const StepProgress& progress, int layers, int64_t micro_batches);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Step `step` started at `start`, this rank's passes adding up to `total_flops`.
  void step_begins(int64_t step, double total_flops, std::chrono::steady_clock::time_point start);
  // It ended: no heartbeat line is printed after this returns until the next step
  // begins (a terminal's line is cleared), so the step's own log line stands alone.
  void step_ends();

  // The line for a position (for tests).
  static std::string line(int64_t step, const StepProgress::Position& p, double total_flops, int layers,
                          int64_t micro_batches, double elapsed_s);

 private:
  void run();
  using Clock = std::chrono::steady_clock;
  const double interval_s_;
  const StepProgress& progress_;
  const int layers_;
  const int64_t micro_batches_;
  const bool terminal_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, in_step_ = false, shown_ = false;  // shown_: a terminal line is up
  int64_t step_ = 0;
  double total_flops_ = 0;
  Clock::time_point step_start_, last_line_;
  std::thread thread_;
};

}  // namespace lct
