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
  ContextParallelAttention(MPI_Comm cp_comm, CpComm method);

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
  // ring
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
  Block own_block(const AttentionInput& in, const float* k, const float* v, int64_t n);
  Block received_block(int i);  // what pass_block(i) received, after it arrived
  void pass_block(const AttentionInput& in, int i, const Block& cur, int64_t n, int tag);
  bool bf16_wire_ = false;   // this call's K and V travel in bf16
  int64_t received_n_ = 0;   // elements of K (and of V) in the block the last pass_block receives
  void begin_transfers();
  void progress();
  void finish_transfers();

  MPI_Comm comm_;
  CpComm method_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;  // transfers of the current ring step
  double bytes_per_second_ = 0;
  // grow-only buffers
  std::vector<float> gathered_, ks_, vs_, dks_, dvs_, reduced_;
  std::vector<float> block_k_[2], block_v_[2], part_out_, part_lse_, acc_k_[2], acc_v_[2],
      acc_in_k_, acc_in_v_;
  std::vector<uint16_t> wire_k_[2], wire_v_[2], own_k_, own_v_, gathered16_;  // bf16 on the wire
  std::vector<std::vector<AttentionTask>> calls_;
  std::vector<AttentionTask> tasks_;
  std::vector<int> counts_, displs_;
};

}  // namespace lct
