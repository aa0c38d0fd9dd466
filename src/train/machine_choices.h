// The run's machine-dependent choices, made once after planning: train.fp32_gemm resolved
// (fp32 runs; src/tune/gemm_choice.h) and attention.cad_profile's cost model (CAD runs;
// src/tune/cad_profile.h), both from the cache of this machine's measurements or
// measured now. Rank 0 decides (it may measure while the others wait asleep: a spinning
// wait would share the cores being measured) and every rank receives the same choice, so
// every rank runs one library and plans with one cost model.
#pragma once

#include "parallel/process_grid.h"
#include "src/train/run_plan.h"

namespace lct {

// Fills plan.machine on every rank of `grid` (collective over its world when it has more
// than one rank). An error on rank 0 (an unreadable cost-model file, a library that
// fails) becomes one ConfigError with its message on every rank.
void resolve_machine_choices(RunPlan& plan, const ProcessGrid& grid);

}  // namespace lct
