// The attention placement a run plan chose, built in one place: colocated attention,
// the context-parallel exchange (ring, all-gather, double ring; Ulysses and hybrid) or
// CAD with the plan's machine-resolved cost model (resolve_machine_choices first).
#pragma once

#include <memory>

#include "model/attention_placement.h"
#include "parallel/cad_attention.h"
#include "parallel/process_grid.h"
#include "src/train/run_plan.h"

namespace lct {

struct PlacementChoice {
  std::unique_ptr<AttentionPlacement> placement;
  CadAttention* cad = nullptr;  // placement, when it is CAD
  double probed_bandwidth = 0;  // the exchange's probed point-to-point bandwidth, bytes/s (0: colocated)
};

PlacementChoice make_placement(const RunPlan& plan, const ProcessGrid& grid);

}  // namespace lct
