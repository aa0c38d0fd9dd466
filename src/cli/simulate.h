// lct simulate: predicts training steps on N ranks without running them (the model and
// its options: src/sim/options.h; the prediction: src/sim/predict.h), and reports the
// means over the simulated steps, as text or one JSON object.
#pragma once

#include "src/sim/options.h"
#include "src/train/run_plan.h"

namespace lct {

int run_simulate(const RunPlan& plan, const SimulateOptions& options);

}  // namespace lct
