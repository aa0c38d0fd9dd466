// Context parallelism: the cp ranks of a group share every packed sequence (each holds
// the LocalBatch of data/context_shards.h) and exchange keys and values inside core
// attention only; every other layer phase is token-local and runs unchanged.
//
// Which rows move is the mask's (data/key_runs.h): rank r receives from rank o only the
// rows of o's pieces some query of r's pieces reads (DocPiece::keys), as runs of rows;
// under a window that is the W keys before each piece, under causal what lies before
// its last query; sinks, a question and a bidirectional prefix the same way.
//
//   allgather  (Llama-3 style) per layer one MPI_Alltoallv gives every rank the rows of
//              K and V it reads, put in sequence order; each local query piece attends
//              to its keys in one kernel call. Backward exchanges K and V again, and a
//              second MPI_Alltoallv returns the dK/dV of every row read to its holder,
//              which sums its own part and then the others' in rank order.
//   ring       at step s = 1 .. cp - 1 rank r sends rank r + s the rows it reads and
//              receives from rank r - s the rows it reads of r - s (nothing is posted
//              for an empty direction, so a mask that needs no neighbour skips the
//              step), while it computes its queries against the rows of step s - 1
//              (MPI progress is driven between kernel calls) and merges the partial
//              (O, LSE) in step order. Backward: the rows travel again, and the dK/dV
//              of the rows read from r - s go back to r - s while the next step
//              computes; a rank sums its own part and then the returns in step order.
//              Direct sends, not a relay: a relayed block passes ranks that do not read
//              it, which is what a mask should not pay for.
//   double_ring (LoongTrain) K and V blocks relayed rank to rank, in two levels: inner
//              rings of `inner_ring` consecutive ranks and an outer ring across them
//              (rank = g inner + u). For each outer step the blocks of one group of
//              ranks circulate in the inner ring while, from the outer step's first
//              inner step on, the block of the next outer step travels over the outer
//              ring (rank (g, u) to (g + 1, u)); an accumulator follows its block
//              through the same visits. Every rank computes on every block once. Each
//              hop carries only the rows of the block some rank still to come reads,
//              and each accumulator only the rows some rank before has read
//              (data/relay_rows.h): a window's block stops travelling once no rank
//              ahead reads it; the rows that do not travel are zeros on arrival.
//
// Under attention.mask = block_sparse every rank first gets the block means its queries
// select from (parallel/selected_keys.h); the all-gather and the ring then move only the
// key blocks the receiver's queries select and their own blocks, the double ring the
// selected and own rows of the ranks ahead (every rank's reads gathered), and the kernel computes each query's part of its attention in the rows
// in hand (attention/block_sparse.h), merged as under any mask.
//
// In a bf16 run (AttentionParams::precision) K and V travel in bf16: the kernel rounds
// them to bf16 anyway, so the results are the same and the bytes half. The backward's
// dK/dV returns, accumulators and sums stay fp32.
//
// Positions inside a task are in-document, never shard-local, so DCA is exact too.
// Hidden exchange time is estimated from a bandwidth probe (PlacementStats).
// Every method is deterministic for a given layout: merges and sums run in step or
// rank order.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "data/key_runs.h"
#include "data/relay_rows.h"
#include "model/attention_placement.h"
#include "parallel/layout.h"
#include "parallel/selected_keys.h"

namespace lct {

class ContextParallelAttention final : public AttentionPlacement {
 public:
  // inner_ring: ranks per inner ring (double_ring only; divides the group's size)
  ContextParallelAttention(MPI_Comm cp_comm, CpComm method, int inner_ring = 0);

  void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
               float* out, float* lse) override;
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                float* dv) override;

  PlacementStats stats() const override;
  void reset_stats() override { stats_ = {}; }
  double probe_bandwidth() const { return bytes_per_second_; }  // bytes/s, point to point

 private:
  // all-gather
  void gather_read_kv(const AttentionInput& in, const float* k, const float* v);
  void allgather_forward(const AttentionInput& in, const float* q, const float* k,
                         const float* v, float* out, float* lse);
  void allgather_backward(const AttentionInput& in, const float* q, const float* k,
                          const float* v, const float* out, const float* lse,
                          const float* dout, float* dq, float* dk, float* dv);
  // ring: direct sends of the rows each rank reads
  void own_runs(const AttentionInput& in);
  void run_calls(const AttentionInput& in, const std::vector<KeyRun>& runs, bool in_place);
  void post_direct(const AttentionInput& in, int s, const float* k, const float* v);
  void direct_forward(const AttentionInput& in, const float* q, const float* k, const float* v,
                      float* out, float* lse);
  void direct_backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                       const float* out, const float* lse, const float* dout, float* dq,
                       float* dk, float* dv);
  // double ring: blocks relayed rank to rank
  // Calls of tasks of the local pieces against block `j`'s pieces, split so that no two
  // tasks of one call share query rows (a piece may see two pieces of j's document).
  void relay_tasks(const AttentionInput& in, int j);
  void relay_forward(const AttentionInput& in, const float* q, const float* k, const float* v,
                     float* out, float* lse);
  void relay_backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                      const float* out, const float* lse, const float* dout, float* dq,
                      float* dk, float* dv);
  // The K and V block in hand at a ring step: as it travels (fp32, or bf16 bits in a
  // bf16 run) and as the kernel reads it (fp32).
  struct Block {
    const void *k_wire, *v_wire;
    const float *k, *v;
  };
  // Where a travelling block is received (and, in bf16, widened for the kernel).
  struct Slot {
    std::vector<float> k, v;
    std::vector<uint16_t> wire_k, wire_v;
    std::vector<unsigned char> packed_k, packed_v;  // the double ring's rows as they arrive
  };
  int ring_rank(int g, int u) const;  // the rank at outer position g, inner position u (mod)
  int block_at(int s) const;          // whose block this rank computes on at ring step s
  Block own_block(const AttentionInput& in, const float* k, const float* v, int64_t n);
  Block arrived(Slot& slot, int64_t n);
  // the double ring's block whose `rows` (of block_rows) arrived packed in slot
  Block arrived_rows(Slot& slot, const RowSpans& rows, int64_t block_rows, int64_t w);
  Block direct_block(const AttentionInput& in, int s);
  // the kernel calls of calls_ (forward merged into out, lse; backward added)
  void begin_merge(const AttentionParams& prm, int64_t T, float* out, float* lse);
  void merge_calls(const AttentionParams& prm, const float* q, const Block& cur, int64_t T, float* out, float* lse);
  void backward_calls(const AttentionParams& prm, const float* q, const float* k, const float* v, const float* out,
                      const float* lse, const float* dout, float* dq, float* dk, float* dv);
  // Sends the rows `send` of the block in hand (w values a row) to dst, packed into
  // send_k/send_v, and receives the rows `recv` of the next from src into slot (packed).
  void post_block(const Block& cur, const RowSpans& send, int64_t w, int dst, int src, const RowSpans& recv,
                  Slot& slot, std::vector<unsigned char>& send_k, std::vector<unsigned char>& send_v, int tag,
                  std::vector<MPI_Request>& requests);
  Slot& start_passes(const AttentionInput& in, int s, const Block& cur, int tag);
  void progress();
  void finish(std::vector<MPI_Request>& requests);
  static constexpr int kOuterTag = 30000;  // + 2 outer step: above every inner-step tag
  bool bf16_wire_ = false;  // this call's K and V travel in bf16
  int inner_ = 1, outer_ = 1, g_ = 0, u_ = 0;  // ring: inner_ = size_

  MPI_Comm comm_;
  CpComm method_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;        // inner transfers of the current ring step
  std::vector<MPI_Request> outer_requests_;  // the outer transfer of the current outer step
  double bytes_per_second_ = 0;
  // grow-only buffers
  std::vector<float> gathered_, ks_, vs_, dks_, dvs_, reduced_;
  Slot inner_slot_[2], outer_slot_[2];
  RelayPlan relay_;  // the double ring's rows of this call (data/relay_rows.h)
  RelayReads relay_reads_;  // block_sparse: every rank's selected reads
  std::vector<unsigned char> inner_send_k_, inner_send_v_, outer_send_k_, outer_send_v_;
  std::vector<unsigned char> acc_send_k_[2], acc_send_v_[2];  // fp32 rows, packed
  std::vector<float> part_out_, part_lse_, acc_k_[2], acc_v_[2], acc_in_k_, acc_in_v_;
  std::vector<uint16_t> own_k_, own_v_, gathered16_;  // bf16 on the wire
  std::vector<std::vector<AttentionTask>> calls_;
  std::vector<std::vector<BlockMeans>> call_means_;  // block_sparse: per task of calls_
  void clear_calls();
  void add_task(const AttentionInput& in, size_t call, size_t piece, const AttentionTask& t);
  std::vector<AttentionTask> tasks_;
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
  KeyExchange exchange_;  // this call's rows to and from every rank (data/key_runs.h; not the double ring's)
  // block_sparse: the block means, and the selection's exchange (selected_keys.h)
  bool selects(const AttentionInput& in) const;
  void plan(const AttentionInput& in, const float* q, const float* k);
  SelectedKeys selected_;
  std::vector<KeyRun> own_runs_;
  std::vector<int64_t> run_at_;
  std::vector<float> send_, ret_[2], out_[2];
  std::vector<uint16_t> send16_;
  std::vector<char> pack_;
  Slot direct_slot_[2];
};

}  // namespace lct
