#include "model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compute/gemm.h"

namespace lct {

double learning_rate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * double(step + 1) / double(c.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
  const double progress = std::clamp(double(step - c.warmup_steps) / double(decay_steps), 0.0, 1.0);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

namespace {
double sum_of_squares_of(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  static thread_local std::vector<double> scratch;  // grow-only, calling thread's
  if (scratch.size() < size_t(chunks)) scratch.resize(size_t(chunks));
  double* const partial = scratch.data();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) s += double(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}
}  // namespace

double sum_of_squares(const std::vector<float>& g, const std::vector<ArenaRange>& ranges) {
  double total = 0.0;
  for (const ArenaRange& r : ranges) total += sum_of_squares_of(g.data() + r.begin, r.end - r.begin);
  return total;
}

double global_grad_norm(const std::vector<float>& g) {
  return std::sqrt(sum_of_squares_of(g.data(), int64_t(g.size())));
}

bool Optimizer::owns(const TensorSpec& s) const {
  if (owned_.empty()) return true;
  for (const ArenaRange& r : owned_)
    if (s.offset >= r.begin && s.offset + s.numel <= r.end) return true;
  return false;
}

Optimizer::Optimizer(const OptimizerConfig& config, const TensorTable& table)
    : config_(config), table_(table) {
  if (config.kind == OptimizerKind::adamw) {
    m_.assign(size_t(table.total()), 0.0f);
    v_.assign(size_t(table.total()), 0.0f);
  }
}

void Optimizer::step(std::vector<float>& params, const std::vector<float>& grads, double lr,
                     double grad_multiplier, const WeightCopies& copies) {
  ++step_count_;
  const float mult = float(grad_multiplier);
  // where tensor s's bf16 copy goes (null: none)
  const auto copy_of = [&](const TensorSpec& s) -> uint16_t* {
    if (!copies.bits) return nullptr;
    for (const ArenaRange& r : copies.ranges)
      if (s.offset >= r.begin && s.offset + s.numel <= r.end) return copies.bits + s.offset;
    return nullptr;
  };
  if (config_.kind == OptimizerKind::sgd) {
    const float a = float(lr);
    for (const TensorSpec& s : table_.specs()) {
      if (!owns(s)) continue;
      float* p = params.data() + s.offset;
      const float* g = grads.data() + s.offset;
      uint16_t* c = copy_of(s);
      if (c) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < s.numel; ++i) {
          p[i] -= a * mult * g[i];
          c[i] = bf16_bits(p[i]);
        }
      } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < s.numel; ++i) p[i] -= a * mult * g[i];
      }
    }
    return;
  }
  const double b1 = config_.beta1, b2 = config_.beta2;
  const float bias1 = float(1.0 - std::pow(b1, double(step_count_)));
  const float bias2 = float(1.0 - std::pow(b2, double(step_count_)));
  const float eps = float(config_.eps), flr = float(lr);
  const float fb1 = float(b1), fb2 = float(b2);
  // One parallel region over the flat arena; tensors differ only in weight decay and
  // whether a bf16 copy is written.
#pragma omp parallel
  for (const TensorSpec& s : table_.specs()) {
    if (!owns(s)) continue;
    float* p = params.data() + s.offset;
    const float* g = grads.data() + s.offset;
    float* m = m_.data() + s.offset;
    float* v = v_.data() + s.offset;
    uint16_t* c = copy_of(s);
    const float decay = s.weight_decay ? float(config_.weight_decay) : 0.0f;
    const auto update = [&](int64_t i) {
      const float gi = g[i] * mult;
      m[i] = fb1 * m[i] + (1.0f - fb1) * gi;
      v[i] = fb2 * v[i] + (1.0f - fb2) * gi * gi;
      const float mhat = m[i] / bias1, vhat = v[i] / bias2;
      p[i] -= flr * (mhat / (std::sqrt(vhat) + eps) + decay * p[i]);
    };
    if (c) {
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < s.numel; ++i) {
        update(i);
        c[i] = bf16_bits(p[i]);
      }
    } else {
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < s.numel; ++i) update(i);
    }
  }
}

}  // namespace lct
