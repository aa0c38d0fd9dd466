#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

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

}  // namespace lct
