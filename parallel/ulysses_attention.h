// Head-parallel context parallelism: DeepSpeed-Ulysses, and its hybrid with the ring
// (USP, Megatron's cp_comm_type "a2a+p2p").
//
//   ulysses  Before core attention the U ranks of the group trade with one all-to-all:
//            each sends every other rank its rows of that rank's heads and receives
//            every rank's rows of its own heads, so it holds the whole sequence for
//            H / U query heads (and their KV heads). Attention runs locally on whole
//            documents; a second all-to-all returns O and the LSE to the rows' owners.
//            Backward trades Q, K, V, O, dO and the LSE the same way and returns dQ, dK
//            and dV. Every rank computes all of the sequence's attention pairs for its
//            heads, so the work is equal whatever the split (parallel.cp_split then only
//            decides which rows a rank holds for the token-linear layers).
//   hybrid   cp = U x R. The all-to-all runs inside groups of U consecutive cp ranks,
//            each of which then holds its group's pieces (the zigzag pieces of its U
//            ranks, merged where contiguous) for H / U heads; a ring of K/V blocks
//            (parallel/context_parallel.h) runs across the R groups, between the ranks
//            that hold the same heads.
//
// Heads: rank u of a group takes query heads [u H/U, (u + 1) H/U). With KV >= U heads it
// takes KV / U of them; with fewer, each rank takes the one KV head its query heads read
// (replicated over U / KV ranks), and the replicas' dK/dV are summed back at the owner
// in rank order (deterministic). The run plan refuses head counts that do not split.
//
// In a bf16 run Q, K, V, O and dO travel in bf16 (the kernel reads only their bf16
// values, core_attention.h); the forward's O, the LSE and the gradients travel in fp32.
// Positions stay in-document, so packed documents and DCA are exact.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/attention_placement.h"

namespace lct {

class ContextParallelAttention;

class UlyssesAttention final : public AttentionPlacement {
 public:
  // cp_comm: the context-parallel group (collective: splits it). ulysses: ranks per
  // all-to-all group U, dividing the group's size; the size itself is plain Ulysses.
  UlyssesAttention(MPI_Comm cp_comm, int ulysses);
  ~UlyssesAttention() override;

  void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
               float* out, float* lse) override;
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                float* dv) override;

  PlacementStats stats() const override;
  void reset_stats() override;
  double probe_bandwidth() const { return bytes_per_second_; }  // bytes/s, point to point

 private:
  // One array's part of an exchange: local rows [T, width] of which destination s's part
  // is the columns [offset(s), offset(s) + cols); union rows are [rows, cols].
  struct Field {
    const float* local;   // to_union: read; from_union: unused
    float* local_out;     // from_union: written (accumulated when `add`)
    int64_t width;        // elements per local row
    int64_t per_head;     // elements per head (hd, or 1 for the LSE)
    bool kv;              // slices by KV heads (else query heads)
    bool bf16;            // travels as bf16 bits
    float* union_rows;    // to_union: written; from_union: read
    bool add = false;
  };
  void prepare(const AttentionInput& in);
  int64_t slice_heads(bool kv) const { return kv ? hk_ : hq_; }
  int64_t slice_first_head(int member, bool kv) const;
  void size_exchange(const std::vector<Field>& fields, bool toward_union);
  // An exchange's two sides, each in its message order: sent from (send) or received
  // into the fields.
  //   local_side  my rows, destination by destination (one slice of heads each); received:
  //               into local_out (added when `add`)
  //   union_side  every member's rows of my heads, member by member, in union rows
  void local_side(const std::vector<Field>& fields, bool send);
  void union_side(const std::vector<Field>& fields, bool send);
  void to_union(const std::vector<Field>& fields);
  void from_union(const std::vector<Field>& fields);
  void exchange(const std::vector<int>& send_bytes, const std::vector<int>& recv_bytes);
  void attend_forward(const float* q, const float* k, const float* v, float* out, float* lse);
  void attend_backward(const float* q, const float* k, const float* v, const float* out,
                       const float* lse, const float* dout, float* dq, float* dk, float* dv);

  MPI_Comm cp_comm_, a2a_comm_ = MPI_COMM_NULL, ring_comm_ = MPI_COMM_NULL;
  int U_ = 1, R_ = 1, u_ = 0, group_ = 0;
  double bytes_per_second_ = 0;
  std::unique_ptr<ContextParallelAttention> ring_;  // R > 1
  PlacementStats own_stats_;

  // this call's view (prepare)
  AttentionParams params_{};  // the local heads
  const AttentionInput* in_ = nullptr;
  int64_t H_ = 0, KV_ = 0, hd_ = 0, hq_ = 0, hk_ = 0;
  LocalBatch union_batch_;  // my group's pieces in union rows, every group's pieces
  // member j's local rows -> union rows: segments {j, local row, union row, len}
  struct Segment {
    int member;
    int64_t local_row, union_row, len;
  };
  std::vector<Segment> segments_;
  std::vector<int64_t> member_rows_;  // local rows of each member
  int64_t union_rows_ = 0;
  std::vector<AttentionTask> tasks_;  // R == 1: whole documents in union rows

  // grow-only buffers
  std::vector<unsigned char> send_, recv_;
  std::vector<int> send_bytes_, recv_bytes_, send_displs_, recv_displs_;
  std::vector<float> uq_, uk_, uv_, uo_, ulse_, udo_, udq_, udk_, udv_;
};

}  // namespace lct
