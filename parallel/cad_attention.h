// Core attention disaggregation (DistCA): every rank is an in-place attention server.
//
// Per round (AttentionInput::round: a micro-batch, a ping-pong nano-batch, or a pipeline
// tick: the same work on every rank), at its first attention (forward's first layer; a backward tick's last
// layer), the ranks all-gather their pieces of documents (six integers each: row,
// length, position, document length, document, first rank of the context-parallel
// group; two collectives) and all compute the same plan (parallel/cad_plan.h): CA-tasks, a
// run of query rows with the keys it reads, assigned to servers so that attention
// pairs are balanced within attention.cad_tolerance. Each layer then moves only what the
// plan moved, with one MPI_Ialltoallv each way:
//   forward   holder -> server: Q rows of its tasks there, and its K and V rows that
//             the server's tasks read of each document (once per document and server:
//             the union of what its tasks read under the mask, CadTask), which the
//             server assembles in a workspace (zeros between sinks and a window, which
//             nobody sends); server -> origin: O and LSE of the task's rows.
//   backward  holder -> server: Q, O, dO, LSE rows and K, V rows again (servers keep
//             nothing between forward and backward); server -> holder: dQ rows and the
//             dK, dV of the key rows it sent, summed over all the server's tasks of the
//             document. The holder adds them after its own share, in server rank order
//             (deterministic).
// Tasks whose server is their origin and whose keys lie in one local run from position 0 (every own
// task without context parallelism) run in place on the local arrays, in two halves
// (by pairs): the first while the exchange to the servers travels, the second while the
// replies travel; the exchanges are tested between kernel calls (OpenMPI progresses
// them only inside MPI calls), and what is still left to wait for is the exposed time.
// With ping-pong (attention.cad_pingpong) the model drives two nano-batches ("lanes")
// through the split phases instead: start (pack, send), serve (wait for the requests,
// compute the served tasks, send the replies, then the own tasks), finish (wait for the
// replies, unpack), while the other lane's token-linear layers compute; each lane has
// its own buffers and request, so both lanes' exchanges can be in flight at once.
// Under attention.mask = block_sparse (MoBA) which keys a task reads depends on their
// values: each layer, each origin computes its documents' block means (exact sums, within
// its context-parallel group: parallel/selected_keys.h), selects the blocks of its
// tasks' queries, tells the documents' other holders which spans each server reads (with
// context parallelism), and one blocking exchange tells each server which key rows and
// block means its requests bring; only the selected and own blocks move, the means ride
// after K and V, the server's workspace is zeros elsewhere and its kernels select from
// the means, reading exactly the rows that came (select_keys).
// Every query row is in exactly one task and every task sees every key it reads, so O, LSE and the
// gradients equal colocated attention. Works for any kernel (causal, DCA): positions
// are in-document.
//
// This placement needs every rank of the job at the same layer of the same round: data
// parallelism (dp ranks are in lockstep) and pipeline parallelism with same-phase ticks
// (parallel/pipeline_schedule.h: every stage runs a forward, or a backward, of some
// micro-batch or of a dummy with no tokens in every tick, and has as many layers; a
// backward tick holds other micro-batches than its forward ticks did, so it plans
// again at the stage's last layer). With context parallelism a rank holds pieces of
// documents: each piece is planned like a document whose keys are those of its document
// it reads, held by several ranks of its context-parallel group, so a server assembles every key run it needs
// in a workspace from the key pieces each holder sends (and sends their key gradients
// back to the same holders).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <span>
#include <vector>

#include "parallel/cad_cost.h"
#include "parallel/cad_plan.h"
#include "parallel/selected_keys.h"
#include "model/attention_placement.h"
#include "parallel/mpi_util.h"

namespace lct {

class CadAttention final : public AttentionPlacement {
 public:
  // cost: a measured cost model (parallel/cad_cost.h), or none to balance pairs.
  // rank_speeds (with a cost model): plan each round by time on ranks of unequal speed,
  // learnt from every step (observe_step): rank r's load is its token-linear time plus
  // its tasks' modelled time, both scaled by its measured speed.
  // align_every_cut: cut every document only at multiples of the kernel's query tile
  // (CadPlanOptions::align_short_pieces), so that two plans give its rows the same bits.
  // cp_comm: the context-parallel group of this rank (block_sparse's block means come
  // from it; null without context parallelism).
  CadAttention(MPI_Comm comm, double tolerance, std::optional<CadCostModel> cost = std::nullopt,
               bool rank_speeds = false, bool align_every_cut = false, MPI_Comm cp_comm = MPI_COMM_NULL);

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
  bool needs_every_rank() const override { return true; }
  // Collective: every rank's compute seconds, tokens and modelled attention seconds of
  // the step give each rank's speed (one slowness factor f_r for all its compute, with
  // a token-linear cost per token shared by all ranks), smoothed over steps.
  void observe_step(double compute_seconds, int64_t tokens) override;
  const std::vector<double>& rank_speeds() const { return speed_; }  // empty until learnt
  void reset_stats() override;
  // hidden_seconds: bytes sent over the probed bandwidth, less the exposed wait
  PlacementStats stats() const override;
  double probe_bandwidth() const { return bytes_per_second_; }  // bytes/s, point to point

 private:
  // Key rows of one document moving from a holder to a server: the holder's local rows
  // [row, row + len), in-document positions [pos, pos + len).
  struct KvPiece {
    int32_t gdoc = 0, row = 0, pos = 0, len = 0;
  };
  // What one rank sends another for a plan (origin/holder -> server; replies go back
  // in the same layout): the query rows of its tasks there, in plan order, and the key
  // rows of its pieces of every document the server needs keys of, by (document, pos).
  struct Flow {
    std::vector<int32_t> tasks;  // indices into plan.tasks
    std::vector<KvPiece> kv;
    int64_t q_rows = 0, kv_rows = 0;
  };
  struct Plan {
    CadPlan plan;
    std::vector<CadPiece> docs;   // every rank's pieces (origin, index, row, len, pos)
    std::vector<size_t> first_doc;  // index in docs of each rank's first piece
    std::vector<int32_t> gdoc;      // per docs entry: its document, numbered over the job
    std::vector<int32_t> doc_len;   // per document: tokens of the whole document
    std::vector<std::vector<std::pair<int32_t, size_t>>> doc_pieces;  // per document: (holder, index in docs) by position
    std::vector<Flow> out;          // [server]: this rank's rows to each server
    std::vector<Flow> in;           // [origin]: each rank's rows to this one
    // This rank as a server: every document it needs keys of (for tasks not run in
    // place) gets the runs its tasks' kernels read ([kv_begin, kv_end), merged)
    // contiguous in a workspace, filled from the holders' segments (own_kv: its own
    // rows), and zeros where no task reads (between sinks and a window).
    struct WsRun {
      int32_t begin = 0, end = 0;  // in-document positions
      int64_t row = 0;             // workspace row of position begin
    };
    std::map<int32_t, std::vector<WsRun>> ws_runs;  // document -> its runs
    std::vector<std::pair<int64_t, int64_t>> ws_zero;  // (row, rows) of zeros
    int64_t ws_rows = 0;
    int64_t ws_at(int32_t gdoc, int32_t pos) const;  // the workspace row of a key
    std::vector<KvPiece> own_kv;
    std::vector<int32_t> own_ws_tasks;     // indices into plan.tasks of own_ws
    std::vector<AttentionTask> own_local;  // own tasks whose keys are one local run
    std::vector<AttentionTask> own_ws;     // own tasks reading keys from the workspace
    std::vector<std::vector<AttentionTask>> served;  // [origin]: queries in its message
  };
  // The key rows one layer of a lane moves: the plan's (every key a task's mask lets it
  // read), or under attention.mask = block_sparse the ones its queries select
  // (select_keys): then a server's workspace is zeros but for what arrived, its kernels
  // select from the block means the origins send with their queries, and each message
  // ends with those means (doubles, after K and V).
  struct Keys {
    bool selected = false;
    std::vector<std::vector<KvPiece>> out, in;  // [server] this rank's rows to it, [holder] its rows here
    std::vector<KvPiece> own;                   // this rank's rows into its own workspace
    std::vector<int64_t> out_kv_rows, in_kv_rows;
    // block means: [server] the documents whose means go there, with this rank's piece
    // of each; [origin] the (document, stride) of the means that come from there
    std::vector<std::vector<std::pair<int32_t, size_t>>> means_out;
    std::vector<std::vector<std::pair<int32_t, int64_t>>> means_in;
    std::vector<int64_t> out_means_floats, in_means_floats;
    SelectedKeys sel;                          // this rank's pieces' block means
    std::vector<std::vector<double>> received;  // [origin] the means that came, in order
    std::vector<std::vector<BlockMeans>> task_means;  // [origin] per served task; [rank] per own_ws task
    void reset(size_t ranks, bool selects);  // no rows, no means, for `ranks` ranks
  };
  // A message's arrays by name, in start_lane's order. Requests: forward Q (then K, V);
  // backward Q, O, dO, LSE (then K, V). Replies: forward O, LSE; backward dQ, dK, dV.
  struct Request {
    float *q = nullptr, *out = nullptr, *dout = nullptr, *lse = nullptr;
  };
  struct Reply {
    float *out = nullptr, *lse = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  };
  static Request request_of(const std::vector<float*>& arrays, bool backward);
  static Reply reply_of(const std::vector<float*>& arrays, bool backward);
  // An exchange carries per-query-row arrays, then per-key-row arrays (widths in values
  // per row). In a bf16 run Q, K, V, O and dO travel as bf16 bits, two to a float of the
  // message: the kernel depends only on their bf16 values (AttentionParams::precision),
  // so a server widening them back, and an owner widening the O it receives, compute
  // exactly what they would on fp32 rows. The LSE and the gradients stay fp32.
  struct Widths {
    std::vector<int64_t> q, kv;
    std::vector<bool> q_bf16;  // per query-row array
    bool kv_bf16 = false;      // K and V
    static int64_t floats(int64_t width, bool bf16) { return bf16 ? (width + 1) / 2 : width; }
  };
  // One round's layer in flight: its plan, arrays and buffers.
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
    Keys keys;         // this layer's key rows
    std::vector<float> send, recv, back, back_recv;
    std::vector<float> ws_k, ws_v, ws_dk, ws_dv;  // the server's key workspace
    std::vector<float> wide;  // the server's fp32 copies of one message's bf16 query arrays
    std::vector<int> send_counts, recv_counts, reply_counts, reply_recv_counts, sdispl, rdispl;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  struct RowArray {
    const float* data;
    int64_t width;
    bool bf16 = false;  // travels as bf16 bits
  };

  Lane& lane_at(int lane);
  void make_plan(const AttentionInput& in, bool counted);  // counted: into pairs_before/after
  void route(Plan& p) const;  // the flows, workspace and task lists of this rank
  void list_tasks(Plan& p, const Flow& own) const;  // route's task lists
  static size_t piece_of(const Plan& p, const CadTask& t);
  static int64_t in_place_row(const Plan& p, const CadTask& t);
  const Plan& plan_of(const AttentionInput& in) const;
  // the plan's key rows (every mask), or block_sparse's selected ones (collective)
  void plan_keys(Lane& L) const;
  void select_keys(Lane& L, const AttentionInput& in, const float* q, const float* k);
  // the kernels, with the lane's block means under block_sparse's selected keys
  void run_forward(const Lane& L, std::span<const AttentionTask> tasks, int who, const float* q,
                   const float* k, const float* v, float* out, float* lse) const;
  void run_backward(const Lane& L, std::span<const AttentionTask> tasks, int who, const float* q,
                    const float* k, const float* v, const float* out, const float* lse,
                    const float* dout, float* dq, float* dk, float* dv) const;
  // a message of q_rows query rows and kv_rows key rows laid out by w (means come after)
  static int64_t message_floats(int64_t q_rows, int64_t kv_rows, const Widths& w);

  // The split phases of one lane (forward and backward alike):
  //   start_lane   this rank's rows packed and sent to their servers
  //   serve_lane   wait for the requests, assemble the key workspace, run the tasks
  //                served here (and own tasks on the workspace), send the replies, then
  //                run the own in-place tasks (while the replies travel)
  //   finish_lane  wait for the replies, then copy (forward) or add (backward) them
  // forward()/backward() run the own in-place tasks in two halves around serving instead.
  void start_lane(Lane& L, const std::vector<RowArray>& q_arrays,
                  const std::vector<RowArray>& kv_arrays);
  void serve_lane(Lane& L, bool with_own = true);
  std::vector<std::vector<float*>> gather_keys(Lane& L);   // serve_lane's parts
  std::vector<std::vector<float*>> reply_arrays(Lane& L);
  void return_key_gradients(Lane& L, const std::vector<std::vector<float*>>& reply);
  void finish_lane(Lane& L);
  void run_own(Lane& L, int part, int parts);  // part `part` of `parts`, by pairs
  void start_alltoallv(Lane& L, const std::vector<float>& send, const std::vector<int>& send_counts,
                       std::vector<float>& recv, const std::vector<int>& recv_counts);
  void wait(Lane& L);  // the lane's exchange in flight; the time blocked is exposed
  // Pointers to each array of a message laid out by `w`, starting at base.
  static std::vector<float*> arrays_of(float* base, int64_t q_rows, int64_t kv_rows, const Widths& w);

  MPI_Comm comm_;
  MPI_Comm cp_comm_;  // MPI_COMM_SELF without context parallelism
  double tolerance_;
  std::optional<CadCostModel> cost_;
  int rank_ = 0, size_ = 1, cp_size_ = 1, cp_rank_ = 0;
  double bytes_per_second_ = 1;
  std::map<int, Plan> plans_;  // by round (AttentionInput::round) of the step
  bool rank_speeds_ = false;
  bool align_every_cut_ = false;  // CadPlanOptions::align_short_pieces
  double modelled_seconds_ = 0;       // this rank's tasks' cost-model seconds, this step
  int64_t plans_counted_ = 0, layers_ = 0;  // this step's forward plans and layers run with them
  double layers_per_plan_ = 1;        // how many layers one plan serves (base per plan)
  std::vector<double> speed_;         // [rank] slowness factor (1 = the mean), once learnt
  double linear_per_token_ = 0;       // token-linear seconds per token at speed 1
  Lane lanes_[2];
};

}  // namespace lct
