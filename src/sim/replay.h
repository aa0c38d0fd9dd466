// lct simulate's replay of a replica's pipeline (the stages' action lists of
// parallel/pipeline_schedule.h, run by its one replay_pipeline) with each action's time.
#pragma once

#include <functional>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "src/sim/prediction.h"

namespace lct {

// Per stage and micro-batch: the stage's forward and backward seconds (its context-
// parallel group's slowest piece, ring included), and each piece's own compute.
struct StageCosts {
  std::vector<std::vector<double>> fwd, bwd;                     // [stage][micro-batch]
  std::vector<std::vector<std::vector<double>>> own_f, own_b;    // [stage][micro-batch][piece]
};
struct StageClocks {
  std::vector<double> clock, wait;  // per stage: when its last action ends, time blocked
};

// One replica's pipeline: every stage's action list (parallel/pipeline_schedule.h) run
// against the others, a receive waiting for its message (message[m]: the transfer time
// of micro-batch m's activations or gradients). Timeline spans go to the ranks
// rank_of(stage, piece).
StageClocks run_stage_lists(PipelineSchedule schedule, int mb, int cp, const StageCosts& t,
                            const std::vector<double>& message, const std::function<int(int, int)>& rank_of,
                            SimTimeline& timeline);

}  // namespace lct
