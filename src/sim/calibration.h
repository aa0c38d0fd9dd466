// This machine's costs for lct simulate (src/sim/options.h): measured from a few
// single-process steps, analytic at a given throughput (--tflops), or reused from an
// earlier --calibration-out.
#pragma once

#include <cstdint>

#include "src/sim/options.h"
#include "src/train/run_plan.h"

namespace lct {

class LlamaModel;

// Seconds of this machine's phases, from single-process steps (src/sim/options.h).
struct Calibration {
  double linear_per_token_layer = 0;  // before + after attention, forward + backward
  double head_per_token = 0;          // embedding and loss, forward + backward
  double attention_per_pair_layer = 0;
  double optimizer = 0;               // one step
  int64_t tokens = 0, pairs = 0;      // what was timed
  // the forward's share of the linear and the attention costs (what recomputation
  // repeats; src/train/flops.h's convention: a third)
  double linear_forward = 1.0 / 3, attention_forward = 1.0 / 3;
  // per token and layer / per pair and layer, already in the costs above: what
  // train.recompute adds (with_recompute)
  double recompute_linear = 0, recompute_attention = 0;
};

// The plan's costs as --calibration, --tflops or a measurement give them, scaled by
// --linear-scale and --attention-scale, with train.recompute's share added; written to
// --calibration-out when given.
Calibration calibrate(const RunPlan& plan, const SimulateOptions& o);

// The model a measured calibration times (a whole model built from plan.model): the run's
// arithmetic (precision and this machine's kernels) and token tiles, and the run's
// initial parameters.
void prepare_calibration_model(const RunPlan& plan, LlamaModel& model);

}  // namespace lct
