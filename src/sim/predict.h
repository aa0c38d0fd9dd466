// lct simulate's prediction (src/sim/options.h): the steps of a plan on its ranks,
// from the step model's batches (src/train/step_model.h), lct's own CAD planner and
// pipeline action lists, and this machine's costs (src/sim/calibration.h).
#pragma once

#include <string>
#include <vector>

#include "src/sim/calibration.h"
#include "src/sim/options.h"
#include "src/sim/prediction.h"
#include "src/train/run_plan.h"

namespace lct {

struct Prediction {
  std::string layout, placement;   // as the report names them
  Calibration calibration;         // the costs charged (per stage under pipeline parallelism)
  bool profile = false;            // attention time per task came from a CAD cost model
  int threads = 0;                 // threads of the calibration (0: analytic)
  std::vector<StepPrediction> steps;
  double bubble = 0;               // pipeline bubble, mean over the steps
};

// Predicts options.steps steps of `plan` (made for options.ranks ranks), writing the
// predicted timeline to plan.run.trace_path when set.
Prediction predict(const RunPlan& plan, const SimulateOptions& options);

}  // namespace lct
