// Core attention disaggregation (DistCA): every rank is an in-place attention server.
//
// Per micro-batch, at its first layer, the ranks exchange their documents' sizes (one
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
// Every query row
// is in exactly one task and every task sees its whole causal prefix, so O, LSE and the
// gradients equal colocated attention. Works for any kernel (causal, DCA): positions
// are in-document.
//
// This placement needs every rank of the job at the same layer of the same micro-batch:
// data parallelism (dp ranks are in lockstep). Pipeline ticks and context-parallel
// groups are not planned yet; the trainer refuses those combinations.
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
  void reset_stats() override;
  // Attention pairs per server of this step's plans (summed over micro-batches):
  // before planning (each rank's own documents) and after.
  const std::vector<int64_t>& pairs_before() const { return pairs_before_; }
  const std::vector<int64_t>& pairs_after() const { return pairs_after_; }

 private:
  struct Plan {
    CaPlan plan;
    std::vector<CaDocument> docs;  // every rank's documents (origin, doc, row, len)
    std::vector<size_t> first_doc;  // index in docs of each rank's first document
  };
  void make_plan(const AttentionInput& in);
  const CaDocument& doc_of(const Plan& p, const CaTask& t) const {
    return p.docs[p.first_doc[size_t(t.origin)] + size_t(t.doc)];
  }
  // rows a peer exchange carries: query rows of the tasks, prefix rows of their documents
  struct Rows {
    int64_t q = 0, kv = 0;
  };
  Rows rows_between(const Plan& p, int origin, int server) const;
  // One exchange in flight at a time: started, driven between kernel calls, finished.
  void start_alltoallv(const std::vector<float>& send, const std::vector<int>& send_counts,
                       std::vector<float>& recv, const std::vector<int>& recv_counts);
  void progress();
  void finish_alltoallv();
  void run_local(const Plan& p, int part, int parts,
                 const std::function<void(std::span<const AttentionTask>)>& compute);
  // An exchange carries per-query-row arrays, then per-prefix-row arrays (widths in floats).
  struct Widths {
    std::vector<int64_t> q, kv;
  };
  struct RowArray {
    const float* data;
    int64_t width;
  };
  int64_t message_floats(const Plan& p, int origin, int server, const Widths& w) const;
  const Plan& plan_of(const AttentionInput& in) const;
  // Sends this rank's rows of every array to the servers of its moved tasks (recv_
  // gets the tasks this rank serves, from every origin).
  void pack_to_servers(const Plan& p, const std::vector<RowArray>& q_arrays,
                       const std::vector<RowArray>& kv_arrays);
  // For each origin: tasks_ set to its tasks on this rank (rows relative to its message),
  // compute(inputs, replies) run, and the replies sent back (into back_recv_).
  using ServeFn =
      std::function<void(const std::vector<const float*>&, const std::vector<float*>&)>;
  void serve(const Plan& p, const Widths& in, const Widths& reply, const ServeFn& compute);
  // A whole layer exchange: arrays to the servers, own tasks in two halves around
  // serving the others', replies back (into back_recv_).
  void exchange(const Plan& p, const std::vector<RowArray>& q_arrays,
                const std::vector<RowArray>& kv_arrays, const Widths& reply,
                const std::function<void(std::span<const AttentionTask>)>& own,
                const ServeFn& serve_tasks);
  // f(server, reply arrays) for every other server's reply to this rank, in rank order.
  void for_replies(const Plan& p, const Widths& reply,
                   const std::function<void(int, const std::vector<const float*>&)>& f) const;
  void local_tasks(const Plan& p);  // tasks_ = this rank's tasks it runs itself

  MPI_Comm comm_;
  double tolerance_;
  std::optional<CaCostModel> cost_;
  int rank_ = 0, size_ = 1;
  std::map<int, Plan> plans_;  // by micro-batch of the step
  std::vector<int64_t> pairs_before_, pairs_after_;
  std::vector<float> send_, recv_, back_, back_recv_;
  std::vector<int> send_counts_, recv_counts_, reply_counts_, reply_recv_counts_, sdispl_, rdispl_;
  std::vector<AttentionTask> tasks_;
  MPI_Request exchange_ = MPI_REQUEST_NULL;
};

}  // namespace lct
