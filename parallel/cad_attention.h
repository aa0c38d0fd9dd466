// Core attention disaggregation (DistCA): every rank is an in-place attention server.
//
// Per group (a micro-batch, a ping-pong nano-batch, or a pipeline tick: the same work on
// every rank), at its first layer, the ranks exchange their documents' sizes (one
// small all-gather) and all compute the same plan (attention/cad_plan.h): CA-tasks, a
// run of query rows with its causal key prefix, assigned to servers so that attention
// pairs are balanced within attention.cad_tolerance. Each layer then moves only what the
// plan moved, with one MPI_Ialltoallv each way:
//   forward   origin -> server: Q rows of the task, K and V of the document's prefix
//             (once per document and server, the longest prefix its tasks need);
//             server -> origin: O and LSE of the task's rows.
//   backward  origin -> server: Q, O, dO, LSE rows and K, V prefixes again (servers keep
//             nothing between forward and backward); server -> origin: dQ rows and the
//             prefix's dK, dV, which the origin adds after its own share, in server
//             rank order (deterministic).
// Tasks whose server is their origin run in place on the local arrays, in two halves
// (by pairs): the first while the exchange to the servers travels, the second while the
// replies travel; the exchanges are tested between kernel calls (OpenMPI progresses
// them only inside MPI calls), and what is still left to wait for is the exposed time.
// With ping-pong (attention.cad_pingpong) the model drives two nano-batches ("lanes")
// through the split phases instead: start (pack, send), serve (wait for the requests,
// compute the served tasks, send the replies, then the own tasks), finish (wait for the
// replies, unpack), while the other lane's token-linear layers compute; each lane has
// its own buffers and request, so both lanes' exchanges can be in flight at once.
// Every query row
// is in exactly one task and every task sees its whole causal prefix, so O, LSE and the
// gradients equal colocated attention. Works for any kernel (causal, DCA): positions
// are in-document.
//
// This placement needs every rank of the job at the same layer of the same group: data
// parallelism (dp ranks are in lockstep) and pipeline parallelism with same-phase ticks
// (parallel/pipeline_schedule.h: every stage runs a forward, or a backward, of some
// micro-batch or of a dummy with no tokens in every tick, and has as many layers; a
// backward tick groups other micro-batches than its forward ticks did, so it plans
// again at the stage's last layer). Context-parallel groups are not planned yet; the
// trainer refuses that combination.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "attention/cad_cost.h"
#include "attention/cad_plan.h"
#include "model/attention_placement.h"
#include "parallel/mpi_util.h"

namespace lct {

class CadAttention final : public AttentionPlacement {
 public:
  // cost: a measured cost model (attention/cad_cost.h), or none to balance pairs.
  CadAttention(MPI_Comm comm, double tolerance, std::optional<CaCostModel> cost = std::nullopt);

  void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
               float* out, float* lse) override;
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                float* dv) override;
  void forward_start(const AttentionInput& in, const float* q, const float* k, const float* v,
                     float* out, float* lse) override;
  void forward_serve(int lane) override { serve_lane(lane_at(lane)); }
  void forward_finish(int lane) override { finish_lane(lane_at(lane)); }
  void backward_start(const AttentionInput& in, const float* q, const float* k, const float* v,
                      const float* out, const float* lse, const float* dout, float* dq,
                      float* dk, float* dv) override;
  void backward_serve(int lane) override { serve_lane(lane_at(lane)); }
  void backward_finish(int lane) override { finish_lane(lane_at(lane)); }
  void progress() override;
  void reset_stats() override;
  // Attention pairs per server of this step's forward plans (summed over groups):
  // before planning (each rank's own documents) and after.
  const std::vector<int64_t>& pairs_before() const { return pairs_before_; }
  const std::vector<int64_t>& pairs_after() const { return pairs_after_; }

 private:
  struct Plan {
    CaPlan plan;
    std::vector<CaDocument> docs;  // every rank's documents (origin, doc, row, len)
    std::vector<size_t> first_doc;  // index in docs of each rank's first document
  };
  // An exchange carries per-query-row arrays, then per-prefix-row arrays (widths in floats).
  struct Widths {
    std::vector<int64_t> q, kv;
  };
  // One micro-batch's (or nano-batch's) layer in flight: its plan, arrays and buffers.
  struct Lane {
    const Plan* plan = nullptr;
    const AttentionParams* params = nullptr;
    bool backward = false;
    // the micro-batch's arrays, valid from start to finish (dout..dv: backward only)
    const float *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
    const float *out_in = nullptr, *lse_in = nullptr;  // backward reads O and LSE
    float *out = nullptr, *lse = nullptr;              // forward writes them
    float *dq = nullptr, *dk = nullptr, *dv = nullptr;
    Widths in, reply;  // what goes to the servers and what comes back
    std::vector<float> send, recv, back, back_recv;
    std::vector<int> send_counts, recv_counts, reply_counts, reply_recv_counts, sdispl, rdispl;
    std::vector<AttentionTask> own;     // this rank's tasks it runs itself
    std::vector<AttentionTask> served;  // one origin's tasks on this rank (serve scratch)
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // rows a peer exchange carries: query rows of the tasks, prefix rows of their documents
  struct Rows {
    int64_t q = 0, kv = 0;
  };
  struct RowArray {
    const float* data;
    int64_t width;
  };

  Lane& lane_at(int lane);
  void make_plan(const AttentionInput& in, bool counted);  // counted: into pairs_before/after
  const Plan& plan_of(const AttentionInput& in) const;
  const CaDocument& doc_of(const Plan& p, const CaTask& t) const {
    return p.docs[p.first_doc[size_t(t.origin)] + size_t(t.doc)];
  }
  Rows rows_between(const Plan& p, int origin, int server) const;
  int64_t message_floats(const Plan& p, int origin, int server, const Widths& w) const;

  // The split phases of one lane (forward and backward alike):
  //   start_lane   own tasks listed, this rank's rows packed and sent to their servers
  //   serve_lane   wait for the requests, run the tasks served here, send the replies,
  //                then run the own tasks (while the replies travel)
  //   finish_lane  wait for the replies, then copy (forward) or add (backward) them
  // forward()/backward() run the own tasks in two halves around serving instead.
  void start_lane(Lane& L, const std::vector<RowArray>& q_arrays,
                  const std::vector<RowArray>& kv_arrays);
  void serve_lane(Lane& L, bool with_own = true);
  void finish_lane(Lane& L);
  void run_own(Lane& L, int part, int parts);  // part `part` of `parts`, by pairs
  void compute_own(Lane& L, std::span<const AttentionTask> tasks);
  void compute_served(Lane& L, std::span<const AttentionTask> tasks,
                      const std::vector<const float*>& in, const std::vector<float*>& out);
  void start_alltoallv(Lane& L, const std::vector<float>& send, const std::vector<int>& send_counts,
                       std::vector<float>& recv, const std::vector<int>& recv_counts);
  void wait(Lane& L);  // the lane's exchange in flight; the time blocked is exposed
  // f(server, reply arrays) for every other server's reply to this rank, in rank order.
  template <typename F>
  void for_replies(const Lane& L, F f) const;
  void start_forward(const AttentionInput& in, const float* q, const float* k, const float* v,
                     float* out, float* lse);
  void start_backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                      const float* out, const float* lse, const float* dout, float* dq,
                      float* dk, float* dv);

  MPI_Comm comm_;
  double tolerance_;
  std::optional<CaCostModel> cost_;
  int rank_ = 0, size_ = 1;
  std::map<int, Plan> plans_;  // by group (AttentionInput::group) of the step
  std::vector<int64_t> pairs_before_, pairs_after_;
  Lane lanes_[2];
};

}  // namespace lct
