#include "src/sim/replay.h"

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

namespace lct {

// One replica's pipeline: every stage's action list (parallel/pipeline_schedule.h) run
// against the others, a receive waiting for its message (message[m]: the transfer time
// of micro-batch m's activations or gradients). Timeline spans go to the ranks
// rank_of(stage, piece).
StageClocks run_stage_lists(PipelineSchedule schedule, int mb, int cp, const StageCosts& t,
                            const std::vector<double>& message, const std::function<int(int, int)>& rank_of,
                            SimTimeline& timeline) {
  const int pp = int(t.fwd.size());
  std::vector<std::vector<PipeAction>> lists;
  for (int s = 0; s < pp; ++s) lists.push_back(pipeline_actions(schedule, pp, s, mb));
  StageClocks out{std::vector<double>(size_t(pp), 0.0), std::vector<double>(size_t(pp), 0.0)};
  std::map<std::tuple<int, bool, int>, double> ready;  // (to stage, forward?, mb) -> arrival
  // a stage's compute of one action: each piece's own part, then the wait for the group
  const auto run = [&](int s, const char* name, double begin, double group, const std::vector<double>& own) {
    for (int c = 0; c < cp; ++c) {
      const int rank = rank_of(s, c);
      timeline.compute(rank, name, begin, begin + own[size_t(c)]);
      timeline.wait(rank, "context-parallel ring", begin + own[size_t(c)], begin + group);
    }
  };
  const std::vector<size_t> done = replay_pipeline(lists, [&](int s, size_t index) {
    const PipeAction& act = lists[size_t(s)][index];
    double& c = out.clock[size_t(s)];
    const size_t m = size_t(act.micro_batch);
    if (act.micro_batch < 0) {  // a tick's dummy: colocated attention, nothing to do
    } else if (act.op == PipeOp::recv_forward || act.op == PipeOp::recv_backward) {
      const auto it = ready.find({s, act.op == PipeOp::recv_forward, act.micro_batch});
      if (it == ready.end()) return false;  // not sent yet
      if (it->second > c) {
        for (int k = 0; k < cp; ++k)
          timeline.wait(rank_of(s, k),
                        act.op == PipeOp::recv_forward ? "pipeline receive (activations)" : "pipeline receive (gradients)",
                        c, it->second);
        out.wait[size_t(s)] += it->second - c, c = it->second;
      }
    } else if (act.op == PipeOp::forward) {
      run(s, "stage forward", c, t.fwd[size_t(s)][m], t.own_f[size_t(s)][m]);
      c += t.fwd[size_t(s)][m];
    } else if (act.op == PipeOp::backward) {
      run(s, "stage backward", c, t.bwd[size_t(s)][m], t.own_b[size_t(s)][m]);
      c += t.bwd[size_t(s)][m];
    } else if (act.op == PipeOp::send_forward) {
      ready[{s + 1, true, act.micro_batch}] = c + message[m];
    } else {
      ready[{s - 1, false, act.micro_batch}] = c + message[m];
    }
    return true;
  });
  for (int s = 0; s < pp; ++s)
    if (done[size_t(s)] != lists[size_t(s)].size())
      throw std::logic_error("lct simulate: pipeline stage " + std::to_string(s) + " stalled");
  return out;
}

}  // namespace lct
