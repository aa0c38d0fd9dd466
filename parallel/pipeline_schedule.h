// Pipeline schedules as pure functions: the ordered list of actions one stage runs for
// one training step of m micro-batches. No MPI here; the executor
// (parallel/pipeline_executor.h) runs the list, and the unit tests check it alone.
//
// Receives block, sends do not (the executor posts them and completes them later).
// A stage therefore only ever waits for data a neighbour sends earlier in its own
// list, and the three schedules below are deadlock-free for any pp and m (checked by
// simulate_pipeline in the tests).
//
//   gpipe: every forward, then every backward (in the same micro-batch order); a
//          stage holds all m micro-batches' activations at once.
//   1f1b:  warm-up of min(pp - stage - 1, m) forwards, then one forward and one
//          backward (oldest first) until all forwards are done, then the remaining
//          backwards; stage s holds at most pp - s micro-batches. Same bubble as
//          GPipe, (pp - 1) / (m + pp - 1) of the step with equal micro-batch times.
//   ticks: same-phase ticks (DistCA §4.1, for CAD, whose per-layer all-to-all needs
//          every rank of the job at the same layer): m + pp - 1 forward ticks and as
//          many backward ticks, in the order F_0 .. F_{pp-2}, then F_{pp-1+j}, B_j for
//          j = 0 .. m - 1, then B_m .. B_{m+pp-2}. In forward tick k stage s runs
//          micro-batch k - s, in backward tick j micro-batch j - (pp - 1 - s); where
//          that is outside [0, m) the stage runs a dummy (micro_batch -1: no tokens,
//          it only serves attention). Every stage runs every tick, so each tick's
//          attention can be balanced over all ranks. Stage s holds at most
//          2 (pp - 1 - s) + 1 micro-batches; the bubble of the token-linear layers is
//          that of 1f1b.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compute/enum_names.h"

namespace lct {

enum class PipelineSchedule { one_f_one_b, gpipe, ticks };
inline constexpr EnumName<PipelineSchedule> kPipelineScheduleNames[] = {
    {PipelineSchedule::one_f_one_b, "1f1b"},
    {PipelineSchedule::gpipe, "gpipe"},
    {PipelineSchedule::ticks, "ticks", "same-phase ticks with dummy micro-batches; CAD with pp > 1 always uses them"},
};
inline PipelineSchedule parse_pipeline_schedule(const std::string& name) { return parse_enum(kPipelineScheduleNames, name, "pipeline schedule"); }
inline const char* pipeline_schedule_name(PipelineSchedule value) { return enum_name(kPipelineScheduleNames, value); }

enum class PipeOp {
  recv_forward,   // activations of micro-batch mb from stage - 1
  forward,        // this stage's forward (the last stage also runs the loss and its gradient)
  send_forward,   // activations to stage + 1
  recv_backward,  // gradient w.r.t. this stage's output from stage + 1
  backward,       // this stage's backward
  send_backward,  // gradient w.r.t. this stage's input to stage - 1
};
inline constexpr EnumName<PipeOp> kPipeOpNames[] = {
    {PipeOp::recv_forward, "recv_forward"},   {PipeOp::forward, "forward"},
    {PipeOp::send_forward, "send_forward"},   {PipeOp::recv_backward, "recv_backward"},
    {PipeOp::backward, "backward"},           {PipeOp::send_backward, "send_backward"},
};
inline const char* pipe_op_name(PipeOp value) { return enum_name(kPipeOpNames, value); }

struct PipeAction {
  PipeOp op;
  int micro_batch;  // -1: a tick's dummy forward or backward
  int tick = -1;    // ticks schedule: the tick (0, 1, ... in run order), the same on all stages
  bool operator==(const PipeAction&) const = default;
};

std::vector<PipeAction> pipeline_actions(PipelineSchedule schedule, int pp, int stage,
                                         int micro_batches);

// Bubble fraction of the step with equal micro-batch times: (pp - 1) / (m + pp - 1).
double theoretical_bubble(int pp, int micro_batches);

// The one replay of stage action lists (the tests' deadlock check, and lct simulate's
// timed replay, src/sim/replay.h): round-robin over the stages, each runs its actions in
// order while `run(stage, index)` accepts them; an action it refuses (a receive whose
// message is not there yet) blocks that stage until another stage has progressed.
// Returns, per stage, how many of its actions ran (its list's size when it completed).
std::vector<size_t> replay_pipeline(const std::vector<std::vector<PipeAction>>& stages,
                                    const std::function<bool(int stage, size_t index)>& run);

}  // namespace lct
