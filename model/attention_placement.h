// Where core attention runs: the seam between the model's phases and the kernel.
//
// For one layer of one micro-batch the model hands its local Q/K/V rows to a placement
// and gets O and LSE back (backward: dQ/dK/dV). `tasks` are the local view: every piece
// of the rank's LocalBatch against its own rows, exactly what colocated attention runs.
// A placement that moves work between ranks (context parallelism, CAD; parallel/)
// reads the group's pieces from `batch` to know where every key lives. The model never
// knows which placement runs.
#pragma once

#include <span>

#include "attention/core_attention.h"
#include "data/context_shards.h"

namespace lct {

struct AttentionInput {
  const AttentionParams& params;
  std::span<const AttentionTask> tasks;  // local pieces against their own rows
  const LocalBatch& batch;
};

class AttentionPlacement {
 public:
  virtual ~AttentionPlacement() = default;
  virtual void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
                       float* out, float* lse) = 0;
  // Accumulates (+=) into dq, dk, dv (the caller zeroes them).
  virtual void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq,
                        float* dk, float* dv) = 0;
};

// Colocated attention: every task runs on the rank that holds its tokens.
class LocalAttention final : public AttentionPlacement {
 public:
  void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
               float* out, float* lse) override {
    attention_forward(in.params, in.tasks, q, k, v, out, lse);
  }
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                float* dv) override {
    attention_backward(in.params, in.tasks, q, k, v, out, lse, dout, dq, dk, dv);
  }
};

}  // namespace lct
