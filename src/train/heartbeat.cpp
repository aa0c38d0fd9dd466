#include "src/train/heartbeat.h"

#include <fmt/format.h>

#include <algorithm>

#include "src/util/heartbeat.h"

namespace lct {

std::string step_heartbeat_line(int64_t step, const StepProgress::Position& p, double total_flops, int layers,
                                int64_t micro_batches, double elapsed_s) {
  std::string where = p.phase[0] ? p.phase : "starting";
  if (p.layer >= 0) where += fmt::format(", layer {} of {}", p.layer + 1, layers);
  if (p.micro_batch >= 0 && micro_batches > 1) where += fmt::format(", micro-batch {} of {}", p.micro_batch + 1, micro_batches);
  const double share = total_flops > 0 ? std::clamp(p.done / total_flops, 0.0, 1.0) : 0.0;
  return fmt::format("step {}: {} | {:.0f}% of the step's FLOPs | {}", step, where, 100 * share,
                     Heartbeat::time_text(elapsed_s, share));
}

}  // namespace lct
