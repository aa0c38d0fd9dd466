// Context parallelism: the cp ranks of a group share every packed sequence (each holds
// the LocalBatch of data/context_shards.h) and exchange keys and values inside core
// attention only; every other layer phase is token-local and runs unchanged.
//
//   allgather  (Llama-3 style) per layer, MPI_Allgatherv of the group's K and V, put in
//              sequence order; each local query piece attends to its document's key
//              prefix [0, pos + len) in one kernel call. Backward gathers K and V again,
//              computes dK/dV for the whole sequence and MPI_Reduce_scatter returns each
//              rank the sum for its own rows.
//   ring       (ring attention / TransformerEngine P2P) K and V blocks travel around
//              the ring r -> r + 1; at step i a rank computes its queries against the
//              block of rank r - i while the next block travels (MPI progress is driven
//              between kernel calls), and merges the partial (O, LSE) in step order. In
//              backward the blocks travel again and each block's dK/dV accumulator
//              follows it, picking up every rank's contribution, back to its owner.
//   double_ring (LoongTrain) the ring split in two: inner rings of `inner_ring`
//              consecutive ranks and an outer ring across them (rank = g inner + u).
//              For each outer step the blocks of one group of ranks circulate in the
//              inner ring while, from the outer step's first inner step on, the block
//              of the next outer step travels over the outer ring (rank (g, u) to
//              (g + 1, u)); an accumulator follows its block through the same visits.
//              Every rank computes on every block once, as in the ring, in another
//              order: results equal the ring's up to the order of the partial merges
//              and dK/dV sums. inner_ring = cp is the ring itself.
//
// In a bf16 run (AttentionParams::precision) K and V travel in bf16: the kernel rounds
// them to bf16 anyway, so the results are the same and the bytes half. The backward's
// dK/dV accumulators and sums stay fp32.
//
// Positions inside a task are in-document, never shard-local, so DCA is exact too.
// Hidden exchange time is estimated from a bandwidth probe (PlacementStats).
// Both are deterministic for a given layout: the ring merges and sums in step order;
// the all-gather's dK/dV sum is MPI_Reduce_scatter's (fixed by the MPI library for a
// given group, not by lct).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "model/attention_placement.h"
#include "parallel/layout.h"

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
  void gather_sequence_kv(const AttentionInput& in, const float* k, const float* v);
  void allgather_forward(const AttentionInput& in, const float* q, const float* k,
                         const float* v, float* out, float* lse);
  void allgather_backward(const AttentionInput& in, const float* q, const float* k,
                          const float* v, const float* out, const float* lse,
                          const float* dout, float* dq, float* dk, float* dv);
  // ring and double ring
  // Calls of tasks of the local pieces against block `j`'s pieces, split so that no two
  // tasks of one call share query rows (a piece may see two pieces of j's document).
  void ring_tasks(const AttentionInput& in, int j);
  void ring_forward(const AttentionInput& in, const float* q, const float* k, const float* v,
                    float* out, float* lse);
  void ring_backward(const AttentionInput& in, const float* q, const float* k, const float* v,
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
  };
  int ring_rank(int g, int u) const;  // the rank at outer position g, inner position u (mod)
  int block_at(int s) const;          // whose block this rank computes on at ring step s
  Block own_block(const AttentionInput& in, const float* k, const float* v, int64_t n);
  Block arrived(Slot& slot, int64_t n);
  void post_block(const Block& cur, int64_t n, int dst, int src, int64_t n_next, Slot& slot, int tag,
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
  std::vector<float> part_out_, part_lse_, acc_k_[2], acc_v_[2], acc_in_k_, acc_in_v_;
  std::vector<uint16_t> own_k_, own_v_, gathered16_;  // bf16 on the wire
  std::vector<std::vector<AttentionTask>> calls_;
  std::vector<AttentionTask> tasks_;
  std::vector<int> counts_, displs_;
};

}  // namespace lct
