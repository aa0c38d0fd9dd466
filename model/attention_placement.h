// Where core attention runs: the seam between the model's phases and the kernel.
//
// For one layer of one micro-batch the model hands its local Q/K/V rows to a placement
// and gets O and LSE back (backward: dQ/dK/dV). `tasks` are the local view: every piece
// of the rank's LocalBatch against its own rows, exactly what colocated attention runs.
// A placement that moves work between ranks (parallel/) learns where every key lives
// from `batch`: context parallelism from the group's pieces, CAD by gathering every
// rank's pieces. The model never knows which placement runs.
#pragma once

#include <span>

#include "attention/core_attention.h"
#include "data/context_shards.h"

namespace lct {

struct AttentionInput {
  const AttentionParams& params;
  std::span<const AttentionTask> tasks;  // local pieces against their own rows
  const LocalBatch& batch;
  // Work that runs together on every rank (a micro-batch, a nano-batch or a pipeline
  // tick), named the same on all of them: a round. Placements that plan (CAD) plan per
  // round. (A "group" is always a set of ranks, e.g. a context-parallel group.)
  int round = 0;
  // The stage's first attention of the round: forward's first layer, or, when the round
  // is a backward pipeline tick (a new set of micro-batches), backward's last layer.
  bool starts_round = false;
  int lane = 0;              // ping-pong: which of the two nano-batches in flight (0, 1)
  // A forward repeated in backward (train.recompute = full, model/recompute.h): it must
  // give the same O and LSE; placements leave it out of their work counts (pairs_served,
  // plans), not out of the bytes and waits, which it really costs.
  bool recomputed = false;
};

// Communication and work of a placement since the last reset.
//   exposed: this rank waited for data (or sat in a blocking collective), measured;
//   hidden:  what the transfers would have cost without overlap, bytes sent over the
//            group's measured point-to-point bandwidth (a probe at start-up), minus the
//            exposed part (>= 0). OpenMPI completes requests only when tested, and lct
//            tests between kernel calls, so when a transfer actually finished inside a
//            compute piece cannot be observed; the probe gives its cost instead.
//   pairs_served: attention pairs this rank computed in forward (all layers).
struct PlacementStats {
  int64_t bytes_sent = 0;
  double exposed_seconds = 0;
  double hidden_seconds = 0;
  double pairs_served = 0;
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
  virtual PlacementStats stats() const { return stats_; }
  virtual void reset_stats() { stats_ = {}; }

  // Split phases, for ping-pong: two nano-batches (in.lane 0 and 1) are in flight at
  // once and the model computes one's token-linear layers while the other's attention
  // traffic travels. start sends what other ranks need, serve computes this rank's
  // share (waiting for its inputs), finish collects the results; the arrays passed to
  // start must stay valid until finish. Lanes are started, served and finished in the
  // same order on every rank. A placement with nothing to hide does all the work in
  // start (the default).
  virtual void forward_start(const AttentionInput& in, const float* q, const float* k,
                             const float* v, float* out, float* lse) {
    forward(in, q, k, v, out, lse);
  }
  virtual void forward_serve(int /*lane*/) {}
  virtual void forward_finish(int /*lane*/) {}
  virtual void backward_start(const AttentionInput& in, const float* q, const float* k,
                              const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv) {
    backward(in, q, k, v, out, lse, dout, dq, dk, dv);
  }
  virtual void backward_serve(int /*lane*/) {}
  virtual void backward_finish(int /*lane*/) {}
  // Drives transfers in flight (OpenMPI progresses them only inside MPI calls); the
  // model's phases call it between compute pieces.
  virtual void progress() {}
  // Whether the placement runs every task where its rows are and reads nothing but the
  // rows it is handed (colocated attention): the model may then hand it a layer's tasks
  // one piece of whole documents at a time and hold only those pieces' attention rows
  // (model/llama.h). The placements that move rows between ranks see the whole sequence.
  virtual bool document_local() const { return false; }
  // Whether every rank of the job must join every layer's attention (CAD: ranks of
  // other pipeline stages serve each other), so a stage with nothing to compute in a
  // pipeline tick still runs a dummy micro-batch through its layers.
  virtual bool needs_every_rank() const { return false; }
  // After every step, on every rank: this rank's compute seconds (the step less its
  // waits) and the tokens it held. A placement that plans by time learns the ranks'
  // speeds from it (collective for such a placement).
  virtual void observe_step(double /*compute_seconds*/, int64_t /*tokens*/) {}

 protected:
  PlacementStats stats_;
};

// Colocated attention: every task runs on the rank that holds its tokens.
class ColocatedAttention final : public AttentionPlacement {
 public:
  bool document_local() const override { return true; }
  void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
               float* out, float* lse) override {
    if (!in.recomputed) stats_.pairs_served += double(attention_pairs(in.tasks, in.params.mask));
    attention_forward(in.params, in.tasks, q, k, v, out, lse);
  }
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                float* dv) override {
    attention_backward(in.params, in.tasks, q, k, v, out, lse, dout, dq, dk, dv);
  }
};

}  // namespace lct
