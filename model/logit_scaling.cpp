#include "model/logit_scaling.h"

#include <algorithm>
#include <cmath>

namespace lct {

float logit_scale(const LogitScaling& s, int64_t position) {
  if (!s.on()) return 1.0f;
  const double f = std::log(double(position) + 1.0) / std::log(double(s.length));
  return float(s.kind == LogitScalingKind::logn_beyond ? std::max(1.0, f) : f);
}

std::string logit_scaling_text(const LogitScaling& s) {
  if (!s.on()) return {};
  return std::string("logit scaling ") + logit_scaling_name(s.kind) + " (L " + std::to_string(s.length) + ")";
}

}  // namespace lct
