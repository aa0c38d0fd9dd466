// Optimizers over the flat parameter arena (one loop, driven by the tensor table for
// per-tensor weight decay), the learning-rate schedule and global-norm clipping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor_table.h"
#include "compute/enum_names.h"

namespace lct {

enum class OptimizerKind { adamw, sgd };
inline constexpr EnumName<OptimizerKind> kOptimizerNames[] = {
    {OptimizerKind::adamw, "adamw"},
    {OptimizerKind::sgd, "sgd"},
};
inline OptimizerKind parse_optimizer(const std::string& name) { return parse_enum(kOptimizerNames, name, "optimizer"); }
inline const char* optimizer_name(OptimizerKind value) { return enum_name(kOptimizerNames, value); }

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;          // peak learning rate
  double min_lr = 1e-4;      // floor of the cosine decay
  int64_t warmup_steps = 0;  // linear warm-up from lr/warmup to lr
  int64_t total_steps = 1;   // cosine decays to min_lr at this step
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  // decoupled (AdamW); tensors flagged weight_decay only
  double grad_clip = 1.0;     // clip to this global L2 norm; <= 0 disables
};

// Learning rate at 0-based step: linear warm-up, then cosine from lr to min_lr.
double learning_rate(const OptimizerConfig& config, int64_t step);

// Sum of squares over arena ranges, in double over fixed chunks of each range
// (deterministic); global_grad_norm is its square root over the whole arena.
double sum_of_squares(const std::vector<float>& values, const std::vector<ArenaRange>& ranges);
double global_grad_norm(const std::vector<float>& grads);

// bf16 runs: the products' weight copies (bf16 bits, the arena's layout) that a step
// writes as it updates each weight, for the tensors inside `ranges`: the update and the
// rounding in one pass over the arena instead of a second pass that reads every weight
// again. A tensor the step does not update (another stage's) keeps its copy.
struct WeightCopies {
  uint16_t* bits = nullptr;         // null: no copies (fp32 runs)
  std::vector<ArenaRange> ranges;   // whole tensors
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, const TensorTable& table);

  // One update with learning rate lr; grads are multiplied by grad_multiplier first
  // (clipping). Increments step_count(). With `copies`, each updated weight inside its
  // ranges is also written there rounded to bf16 (bf16_bits of the new value).
  void step(std::vector<float>& params, const std::vector<float>& grads, double lr,
            double grad_multiplier, const WeightCopies& copies = {});

  // Only tensors inside these ranges are updated (a pipeline stage's own); default: all.
  void set_owned_ranges(const std::vector<ArenaRange>& ranges) { owned_ = ranges; }

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }
  std::vector<float>& exp_avg() { return m_; }
  std::vector<float>& exp_avg_sq() { return v_; }
  const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  const TensorTable& table_;
  bool owns(const TensorSpec& s) const;
  std::vector<float> m_, v_;  // AdamW moments, arena layout (empty for SGD)
  std::vector<ArenaRange> owned_;  // empty = the whole arena
  int64_t step_count_ = 0;
};

}  // namespace lct
