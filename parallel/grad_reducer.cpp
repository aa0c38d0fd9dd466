#include "parallel/grad_reducer.h"

#include <chrono>
#include <stdexcept>

#include "parallel/mpi_util.h"

namespace lct {
namespace {
int bucket_count(const ArenaRange& r) { return mpi_count(r.end - r.begin, "a gradient bucket"); }
}  // namespace

GradReducer::GradReducer(const TensorTable& table, const std::vector<ArenaRange>& owned,
                         MPI_Comm comm, int64_t bucket_size, bool overlap)
    : comm_(comm), overlap_(overlap) {
  if (bucket_size < 1) throw std::invalid_argument("parallel.bucket_size must be >= 1");
  if (comm_ != MPI_COMM_NULL) MPI_Comm_size(comm_, &comm_size_);
  const auto is_owned = [&](const TensorSpec& s) {
    for (const ArenaRange& r : owned)
      if (s.offset >= r.begin && s.offset + s.numel <= r.end) return true;
    return false;
  };
  // Whole tensors from the end of the table until a bucket holds >= bucket_size; a
  // bucket also ends where the owned tensors stop being adjacent.
  const auto& specs = table.specs();
  int64_t end = -1, begin = -1;
  for (size_t i = specs.size(); i-- > 0;) {
    const TensorSpec& s = specs[i];
    if (!is_owned(s)) continue;
    if (end >= 0 && s.offset + s.numel != begin) {  // gap: close the open bucket
      buckets_.push_back({begin, end});
      end = -1;
    }
    if (end < 0) end = s.offset + s.numel;
    begin = s.offset;
    if (end - begin >= bucket_size) {
      buckets_.push_back({begin, end});
      end = -1;
    }
  }
  if (end >= 0) buckets_.push_back({begin, end});
  requests_.reserve(buckets_.size());
}

void GradReducer::begin(float* grads) {
  grads_ = grads;
  next_bucket_ = 0;
  requests_.clear();
  comm_seconds_ = 0;
}

void GradReducer::start_bucket(size_t b) {
  const ArenaRange& r = buckets_[b];
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, grads_ + r.begin, bucket_count(r), MPI_FLOAT, MPI_SUM, comm_,
                 &req);
  requests_.push_back(req);
}

void GradReducer::grads_final_from(int64_t offset) {
  if (!active() || !overlap_ || !grads_) return;
  const auto t0 = SteadyClock::now();
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= offset)
    start_bucket(next_bucket_++);
  if (!requests_.empty()) {  // drive the collectives in flight
    int done = 0;
    MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
  }
  comm_seconds_ += waited_since(t0, "gradient reduction");
}

void GradReducer::finish() {
  if (!active() || !grads_) return;
  const auto t0 = SteadyClock::now();
  if (!overlap_) {
    for (const ArenaRange& r : buckets_)
      MPI_Allreduce(MPI_IN_PLACE, grads_ + r.begin, bucket_count(r), MPI_FLOAT, MPI_SUM,
                    comm_);
  } else {
    while (next_bucket_ < buckets_.size()) start_bucket(next_bucket_++);
    MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }
  comm_seconds_ += waited_since(t0, "gradient reduction");
  grads_ = nullptr;
}

}  // namespace lct
