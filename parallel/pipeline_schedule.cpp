#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

namespace lct {

std::vector<PipeAction> pipeline_actions(PipelineSchedule schedule, int pp, int stage, int m) {
  if (pp < 1 || stage < 0 || stage >= pp || m < 1)
    throw std::invalid_argument("pipeline_actions: need pp >= 1, 0 <= stage < pp, m >= 1");
  const bool first = stage == 0, last = stage == pp - 1;
  std::vector<PipeAction> a;
  auto forward = [&](int mb) {
    if (!first) a.push_back({PipeOp::recv_forward, mb});
    a.push_back({PipeOp::forward, mb});
    if (!last) a.push_back({PipeOp::send_forward, mb});
  };
  auto backward = [&](int mb) {
    if (!last) a.push_back({PipeOp::recv_backward, mb});
    a.push_back({PipeOp::backward, mb});
    if (!first) a.push_back({PipeOp::send_backward, mb});
  };
  if (schedule == PipelineSchedule::ticks) {
    int tick = 0;
    // one tick: this stage's actions for micro-batch mb, or a dummy outside [0, m)
    const auto run_tick = [&](PipeOp op, int mb) {
      const size_t at = a.size();
      if (mb < 0 || mb >= m)
        a.push_back({op, -1});
      else if (op == PipeOp::forward)
        forward(mb);
      else
        backward(mb);
      for (size_t i = at; i < a.size(); ++i) a[i].tick = tick;
      ++tick;
    };
    const auto forward_tick = [&](int k) { run_tick(PipeOp::forward, k - stage); };
    const auto backward_tick = [&](int j) { run_tick(PipeOp::backward, j - (pp - 1 - stage)); };
    for (int k = 0; k < pp - 1; ++k) forward_tick(k);
    for (int j = 0; j < m; ++j) {
      forward_tick(pp - 1 + j);
      backward_tick(j);
    }
    for (int j = m; j < m + pp - 1; ++j) backward_tick(j);
    return a;
  }
  if (schedule == PipelineSchedule::gpipe) {
    for (int mb = 0; mb < m; ++mb) forward(mb);
    for (int mb = 0; mb < m; ++mb) backward(mb);
    return a;
  }
  const int warmup = std::min(pp - stage - 1, m);
  for (int mb = 0; mb < warmup; ++mb) forward(mb);
  for (int i = 0; i < m - warmup; ++i) {  // steady state: one forward, one backward
    forward(warmup + i);
    backward(i);
  }
  for (int mb = m - warmup; mb < m; ++mb) backward(mb);  // cool-down
  return a;
}

double theoretical_bubble(int pp, int m) { return double(pp - 1) / double(m + pp - 1); }

std::vector<size_t> replay_pipeline(const std::vector<std::vector<PipeAction>>& stages,
                                    const std::function<bool(int stage, size_t index)>& run) {
  const int pp = int(stages.size());
  std::vector<size_t> next(size_t(pp), 0);
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int s = 0; s < pp; ++s)
      while (next[size_t(s)] < stages[size_t(s)].size() && run(s, next[size_t(s)])) {
        ++next[size_t(s)];
        progressed = true;
      }
  }
  return next;
}

std::string simulate_pipeline(const std::vector<std::vector<PipeAction>>& stages,
                              std::vector<int>* max_slots) {
  const int pp = int(stages.size());
  // messages in flight: (from stage, to stage, forward?, micro-batch) -> count
  std::map<std::tuple<int, int, bool, int>, int> sent;
  std::vector<int> held(size_t(pp), 0), peak(size_t(pp), 0);
  std::string error;
  const std::vector<size_t> next = replay_pipeline(stages, [&](int s, size_t index) {
    const PipeAction& act = stages[size_t(s)][index];
    if (!error.empty()) return false;
    if (act.op == PipeOp::recv_forward || act.op == PipeOp::recv_backward) {
      const bool fwd = act.op == PipeOp::recv_forward;
      const auto key = std::make_tuple(fwd ? s - 1 : s + 1, s, fwd, act.micro_batch);
      auto it = sent.find(key);
      if (it == sent.end() || it->second == 0) return false;  // would block
      --it->second;
    } else if (act.op == PipeOp::send_forward || act.op == PipeOp::send_backward) {
      const bool fwd = act.op == PipeOp::send_forward;
      const int to = fwd ? s + 1 : s - 1;
      if (to < 0 || to >= pp) {
        error = "stage " + std::to_string(s) + " sends past the pipeline";
        return false;
      }
      ++sent[std::make_tuple(s, to, fwd, act.micro_batch)];
    }
    // a micro-batch occupies a slot from its first forward action to its backward
    if (act.micro_batch < 0) {  // a tick's dummy: no data, no slot
    } else if (act.op == PipeOp::recv_forward ||
               (act.op == PipeOp::forward && (index == 0 || stages[size_t(s)][index - 1].op != PipeOp::recv_forward)))
      peak[size_t(s)] = std::max(peak[size_t(s)], ++held[size_t(s)]);
    if (act.op == PipeOp::backward && act.micro_batch >= 0) --held[size_t(s)];
    return true;
  });
  if (!error.empty()) return error;
  if (max_slots) *max_slots = peak;
  for (int s = 0; s < pp; ++s)
    if (next[size_t(s)] < stages[size_t(s)].size()) {
      const PipeAction& act = stages[size_t(s)][next[size_t(s)]];
      return "stage " + std::to_string(s) + " blocked at " + pipe_op_name(act.op) +
             " of micro-batch " + std::to_string(act.micro_batch);
    }
  for (const auto& [key, count] : sent)
    if (count != 0)
      return "a message from stage " + std::to_string(std::get<0>(key)) + " to stage " +
             std::to_string(std::get<1>(key)) + " was never received";
  return {};
}

}  // namespace lct
