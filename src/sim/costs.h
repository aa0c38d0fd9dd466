// lct simulate's costs of a step's parts: attention per task, CAD's layer over every
// rank, a context-parallel group's layer, a replica's stages, and the gradient
// all-reduce's tail; and the step model's batches (src/train/step_model.h) as the
// prediction reads them.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "parallel/cad_cost.h"
#include "parallel/cad_plan.h"
#include "data/local_batch.h"
#include "data/packing.h"
#include "src/sim/calibration.h"
#include "src/sim/network.h"
#include "src/sim/options.h"
#include "src/sim/prediction.h"
#include "src/sim/replay.h"
#include "src/train/run_plan.h"
#include "src/train/step_model.h"

namespace lct {

// Attention seconds (forward + backward, one layer) of a task whose keys start at its
// document's start, under the model's mask.
struct AttentionCost {
  const Calibration& cal;
  const std::optional<CadCostModel>& profile;
  double scale;
  AttentionMask mask;
  double operator()(const AttentionTask& t) const {
    if (t.q_len <= 0) return 0;
    if (profile) return profile->seconds(t, mask) * scale;  // the task's measured time
    return cal.attention_per_pair_layer * double(attention_pairs(t, mask));
  }
  // a piece's queries against the keys they read
  double operator()(const DocPiece& p) const { return (*this)(p.task(0, 0, p.key_end(mask))); }
};

// CAD's cost of one decoder layer (forward + backward) over every rank's batch (possibly
// empty: a pipeline tick's dummy): lct's planner over the documents (or, with
// ping-pong, over each nano-batch), its tasks charged to their servers; a rank's layer
// time is its linear work + the attention it serves + its exchange not hidden (behind
// its own tasks, or with ping-pong behind the other nano-batch's linear layers), and the
// layer ends with the slowest rank. Bytes: Q (+ LSE) and O, dO, dQ of every shipped task;
// K, V (twice) and dK, dV of the keys a server's tasks read of each document, between
// the server and the query's holder (with cp the prefix has several holders: an
// approximation). The exchange runs in four phases, one after the other (forward there,
// back; backward there, back), each as long as the larger of what the rank sends and
// receives in it. A rank's bytes to and from ranks on other hosts travel at the host link
// and are not hidden (src/sim/network.h).
struct CadLayer {
  double seconds = 0;
  std::vector<double> busy;  // per rank: linear + attention served
  double bytes = 0;          // sent, summed over the ranks
  // per rank: what it sends (what lct train counts, exactly for an fp32 run without
  // context parallelism, whose key rows have one holder)
  std::vector<double> rank_bytes;
};

class CadLayerCost {
 public:
  CadLayerCost(const RunPlan& plan, const Calibration& cal, const AttentionCost& attn,
               const std::optional<CadCostModel>& profile, const Network& net)
      : mc_(plan.model), cal_(cal), attn_(attn), net_(net), lanes_(plan.lanes) {
    qd_ = mc_.num_attention_heads * mc_.head_dim();
    kvd_ = mc_.num_key_value_heads * mc_.head_dim();
    po_ = cad_plan_options(plan.attention, plan.cad.tolerance, profile ? &*profile : nullptr);
  }
  int lanes() const { return lanes_; }

  // `served` (per rank) accumulates the attention pairs each rank computes.
  CadLayer cost(const std::vector<LocalBatch>& batches, std::vector<double>& served) const;

 private:
  // One lane's (a batch, or one of its two nano-batches) seconds per rank: linear work,
  // attention served, of it the rank's own tasks, and the exchange within the host
  // (hideable) and with other hosts (not); `rank_bytes` accumulates what each rank sends.
  struct LaneCost {
    std::vector<double> linear, work, own, comm, remote;
  };
  LaneCost lane_cost(const std::vector<LocalBatch>& group, std::vector<double>& served,
                     std::vector<double>& rank_bytes) const;

  const LlamaConfig& mc_;
  const Calibration& cal_;
  const AttentionCost& attn_;
  Network net_;
  int lanes_;
  int64_t qd_ = 0, kvd_ = 0;
  CadPlanOptions po_;
};

// The links of options --hosts, --bandwidth, --host-bandwidth, ... (src/sim/network.h).
Network network_of(const SimulateOptions& o);

// The gradient all-reduce after the last backward over the ranks `reducers`, of one
// stage's share of the arena (1/stages): with overlap only the last bucket (the embedding
// end) is left when backward ends (within a host; across hosts all of it); a ring
// all-reduce moves 2 (n - 1) / n of it.
double allreduce_tail_seconds(const RunPlan& plan, const LlamaConfig& mc, int stages,
                              const std::vector<int>& reducers, const Network& net);

// Replica d's micro-batches of a step's global batch, as the trainer takes them
// (src/train/step_model.h): [m][c], micro-batch m's piece on context-parallel rank c.
std::vector<std::vector<LocalBatch>> replica_pieces(const RunPlan& plan, const std::vector<PackedBatch>& global,
                                                    int d);
// Every rank's micro-batches of a step (without pipeline parallelism), as the trainer
// takes them (src/train/step_model.h): rank d * cp + c holds piece c of replica d's.
std::vector<std::vector<LocalBatch>> ranks_micro_batches(const RunPlan& plan,
                                                         const std::vector<PackedBatch>& global);

// One layer of a context-parallel group on one micro-batch (pieces[c]: rank c's piece of
// a sequence of `tokens` tokens): each rank's compute (token-linear rows + the attention
// it computes) and its layer time, the compute plus the exchange it waits for; and the
// bytes each rank sends per layer (forward and backward). K, V, Q, O and dO travel in
// the run's precision, the LSE and every gradient in fp32, as lct sends them.
//   ring, double_ring  K, V rows travel while the rank computes the rows in hand (the
//                      ring: to each rank the rows it reads; the double ring: whole
//                      blocks relayed, cp_rank_bytes); the part not hidden behind the
//                      rank's attention waits.
//   allgather          the same rows as the ring, in blocking collectives: all exposed.
//   ulysses, hybrid    two blocking all-to-alls per direction inside groups of U ranks;
//                      each rank computes its group's attention for H / U heads
//                      (hybrid: its group's pieces against the sequence, with a K/V ring
//                      of R = cp / U groups on H / U heads, hidden as the ring's).
// ranks[c] is piece c's world rank: an exchange whose ranks span hosts runs at the host
// link and is exposed in full (src/sim/network.h).
struct CpLayer {
  std::vector<double> busy, time;
  double bytes = 0;  // mean over the group's ranks
  // ring, all-gather, double ring: what each rank sends in the layer's forward and
  // backward (cp_rank_bytes), exactly as the trainer counts it
  std::vector<double> rank_forward, rank_backward;
};
std::vector<double> cp_rank_bytes(const RunPlan& plan, const std::vector<LocalBatch>& pieces);
CpLayer cp_layer_cost(const RunPlan& plan, const std::vector<LocalBatch>& pieces, double tokens,
                      const AttentionCost& attn, const Calibration& cal, const Network& net,
                      const std::vector<int>& ranks);

// One replica's StageCosts: per stage and micro-batch the group's forward and backward
// seconds (the slowest rank's layer time, exchange included) and each piece's own
// compute; pieces[m][c] is micro-batch m's piece on context-parallel rank c, holding
// seq_tokens[m] tokens in all. Adds the replica's tokens, compute and exchange bytes to
// p, and its attention pairs to pairs (per rank_of(stage, piece)).
StageCosts replica_stage_costs(const RunPlan& plan, const std::vector<std::vector<LocalBatch>>& pieces,
                               const std::vector<double>& seq_tokens, const AttentionCost& attn,
                               const Calibration& cal, const SimulateOptions& o,
                               const std::function<int(int, int)>& rank_of, StepPrediction& p,
                               std::vector<double>& pairs);

}  // namespace lct
