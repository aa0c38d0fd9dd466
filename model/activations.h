// Activations of one micro-batch (or nano-batch) in flight, laid out by one table.
//
// ActivationTable lists the per-token tensors a pipeline stage saves between its
// forward and its backward, by name, width (values per token) and storage precision
// (fp32, or bf16 bits for what a bf16 run only feeds to bf16 products), like
// TensorTable does for parameters. A slot is one buffer of capacity T tokens in which
// tensor i occupies T * span_i floats from offset_i * T, span_i = width_i for fp32 and
// ceil(width_i / 2) for bf16: every tensor is [T, width], row-major. A stage with several micro-batches in flight (1F1B holds up to
// pp - stage, GPipe all m) takes one slot per micro-batch from a SlotPool, which only
// ever grows, so the steady state allocates nothing.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/core_attention.h"
#include "compute/gemm.h"

namespace lct {

struct ActivationSpec {
  std::string name;  // e.g. "layers.3.q", "x_out"
  int64_t width = 0;   // values per token
  int64_t offset = 0;  // in floats per token: the tensor starts at offset * T floats
  Precision storage = Precision::fp32;
  int64_t span() const { return storage == Precision::bf16 ? (width + 1) / 2 : width; }  // floats per token
};

class ActivationTable {
 public:
  int add(std::string name, int64_t width, Precision storage = Precision::fp32);  // returns the id
  const std::vector<ActivationSpec>& specs() const { return specs_; }
  int id(const std::string& name) const;     // throws if absent
  int64_t floats_per_token() const { return per_token_; }

 private:
  std::vector<ActivationSpec> specs_;
  int64_t per_token_ = 0;
};

struct LocalBatch;

// Rows of a slot's attention arrays, by the rows they follow: Q, O, LSE (of a recomputed
// layer) and dO by the query rows attention is working on; K, V, dK, dV and dQ by the
// keys those queries read (dQ waits with dK and dV for the product that sums all three,
// attn_in_backward). The whole slot (both T) unless a layer runs piece by piece.
struct AttentionRows {
  int64_t query = 0, key = 0;
};

// One micro-batch's saved activations plus the metadata its phases need.
class ActivationSlot {
 public:
  // Sizes the buffer for T tokens of `table` (grow-only) and forgets the batch.
  void reset(const ActivationTable& table, int64_t T);
  float* tensor(int id) {
    assert(!bf16_[size_t(id)]);
    return data_.data() + offsets_[size_t(id)] * tokens_;
  }
  uint16_t* bf16_tensor(int id) {  // a tensor the table stores as bf16 bits
    assert(bf16_[size_t(id)]);
    return reinterpret_cast<uint16_t*>(data_.data() + offsets_[size_t(id)] * tokens_);
  }
  int64_t tokens() const { return tokens_; }
  int64_t capacity_bytes() const { return int64_t(data_.capacity() * sizeof(float)); }

  // The micro-batch this slot holds (owned by the caller, alive while the slot is used),
  // its attention tasks and, for DCA, each key's RoPE position, and under
  // attention.logit_scaling each query's factor.
  const LocalBatch* batch = nullptr;
  // The placement's round (AttentionInput::round) of its forward, and of its backward
  // when that runs in a different round (pipeline ticks; -1: the forward's).
  int round = -1;
  int backward_round = -1;
  int lane = 0;  // ping-pong: nano-batch 0 or 1 of its micro-batch (own backward scratch)
  std::vector<AttentionTask> tasks;
  int64_t pairs = 0;  // the attention pairs of `tasks` under the model's mask (when a progress is set)
  std::vector<int32_t> key_positions;
  std::vector<float> q_scale;  // attention.logit_scaling: each row's query factor (empty: none)
  // The rows in pieces of whole documents, one of the attention kernel's runs each
  // (attention_runs; one piece [0, T) unless the tasks make several): a placement that
  // runs documents where they are lets a layer run piece by piece (model/llama.h), its
  // tasks in piece_tasks [task_begin, task_end), rebased to the piece's first row.
  // A piece of a document longer than the kernel's runs is one of its query slices, whose
  // keys start at the document's first row (key_begin < row_begin); the tasks' key rows
  // are rebased to key_begin.
  struct Piece {
    int64_t row_begin = 0, row_end = 0;
    int64_t key_begin = 0;  // the first key row its tasks read (row_begin but in a slice)
    int64_t keys_from = 0;  // the first key row it or a later piece reads
    size_t task_begin = 0, task_end = 0;
    int64_t pairs = 0;  // (only with a progress, as `pairs`)
  };
  std::vector<Piece> pieces;
  std::vector<AttentionTask> piece_tasks;
  // Rows of the attention arrays a layer run piece by piece holds at once (model/llama.h)
  AttentionRows window;

 private:
  std::vector<float> data_;
  std::vector<int64_t> offsets_;  // per tensor id, in floats per token
  std::vector<bool> bf16_;        // per tensor id: stored as bf16 bits
  int64_t tokens_ = 0;
};

// Grow-only pool of slots: acquire() reuses a released slot or makes a new one.
class SlotPool {
 public:
  ActivationSlot& acquire();
  void release(ActivationSlot& slot);
  int in_use() const { return in_use_; }
  int free_count() const { return int(free_.size()); }
  int peak_in_use() const { return peak_in_use_; }
  void reset_peak() { peak_in_use_ = in_use_; }
  // Bytes of the largest slot times the peak number in use (activation memory high-water).
  int64_t peak_bytes() const;

 private:
  std::vector<std::unique_ptr<ActivationSlot>> slots_;
  std::vector<ActivationSlot*> free_;
  int in_use_ = 0, peak_in_use_ = 0;
};

}  // namespace lct
