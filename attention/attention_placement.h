// Where core attention runs: the seam between the model's phases and the kernel.
//
// The model hands one layer's Q/K/V rows of a micro-batch and its task list to a
// placement and gets O and LSE back (backward: dQ/dK/dV). LocalAttention runs the
// kernel in this process. Context-parallel and CAD placements (parallel/) move shards
// between ranks behind the same interface, so the model never knows which one runs.
#pragma once

#include <span>

#include "attention/core_attention.h"

namespace lct {

class AttentionPlacement {
 public:
  virtual ~AttentionPlacement() = default;
  virtual void forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                       const float* q, const float* k, const float* v, float* out,
                       float* lse) = 0;
  // Accumulates (+=) into dq, dk, dv (the caller zeroes them).
  virtual void backward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                        const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk,
                        float* dv) = 0;
};

// Colocated attention: every task runs on the rank that holds its tokens.
class LocalAttention final : public AttentionPlacement {
 public:
  void forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
               const float* q, const float* k, const float* v, float* out, float* lse) override {
    attention_forward(params, tasks, q, k, v, out, lse);
  }
  void backward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                const float* q, const float* k, const float* v, const float* out,
                const float* lse, const float* dout, float* dq, float* dk, float* dv) override {
    attention_backward(params, tasks, q, k, v, out, lse, dout, dq, dk, dv);
  }
};

}  // namespace lct
