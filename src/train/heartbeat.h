// The training step's heartbeat line (train.heartbeat_s; the thread that prints it is
// src/util/heartbeat.h): where the step is, from the model's StepProgress
// (model/progress.h), how much of its FLOPs are done and how long the rest takes:
//   step 3: backward, layer 2 of 4, micro-batch 1 of 2 | 37% of the step's FLOPs | 92 s in, about 2.6 min to go
// (the share is this rank's layer passes, weighted by their FLOPs; the estimate assumes
// the rest runs at the rate so far). metrics.jsonl is unchanged, and nothing the step
// computes is.
#pragma once

#include <cstdint>
#include <string>

#include "model/progress.h"

namespace lct {

// `layers`: the model's; `micro_batches`: a step's on this rank.
std::string step_heartbeat_line(int64_t step, const StepProgress::Position& p, double total_flops, int layers,
                                int64_t micro_batches, double elapsed_s);

}  // namespace lct
