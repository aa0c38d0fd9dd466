// Data-parallel gradient reduction: bucketed, in reverse layer order, overlapped with
// the backward pass.
//
// The gradient arena is laid out in layer order (model/tensor_table.h), and backward
// finishes it from the end: LM head and final norm, then layer L-1 ... layer 0, then
// the embedding. Buckets are runs of whole, adjacent tensors of the stage's owned
// ranges, taken from the end of the table until they hold at least bucket_size
// elements. During the last micro-batch's
// backward the model reports "gradients from offset x on are final" after each
// layer; every bucket lying entirely past x starts an MPI_Iallreduce (sum, in place)
// at once. OpenMPI does not progress non-blocking collectives in the background, so
// each report also tests the requests in flight. finish() waits for the rest before
// the optimizer step. With overlap off, finish() reduces every bucket, blocking.
//
// The loss is normalised by the global target count before backward, so the summed
// gradient is exactly the single-process gradient of the same global batch.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "model/tensor_table.h"

namespace lct {

class GradReducer {
 public:
  // comm: ranks holding the same weights (dp x cp); MPI_COMM_NULL or size 1 = no-op.
  // owned: the arena ranges this rank's pipeline stage updates (all of it without
  // pipeline parallelism); buckets never leave them.
  GradReducer(const TensorTable& table, const std::vector<ArenaRange>& owned, MPI_Comm comm,
              int64_t bucket_size, bool overlap);

  const std::vector<ArenaRange>& buckets() const { return buckets_; }
  bool active() const { return comm_ != MPI_COMM_NULL && comm_size_ > 1; }

  // Call before the last micro-batch's backward; grads is the arena being reduced.
  void begin(float* grads);
  // Gradients at arena offsets >= offset are final (called by the model's backward).
  void grads_final_from(int64_t offset);
  // All buckets reduced (waits, or reduces them all now when overlap is off).
  void finish();
  // Seconds spent inside MPI calls since begin() (the rank's communication wait).
  double comm_seconds() const { return comm_seconds_; }

 private:
  void start_bucket(size_t b);
  MPI_Comm comm_;
  int comm_size_ = 1;
  bool overlap_;
  std::vector<ArenaRange> buckets_;  // in reduction order (from the end of the arena)
  std::vector<MPI_Request> requests_;
  size_t next_bucket_ = 0;
  float* grads_ = nullptr;
  double comm_seconds_ = 0;
};

}  // namespace lct
