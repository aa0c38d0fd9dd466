#include "parallel/collectives.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "parallel/mpi_util.h"

namespace lct {

void allreduce_sum(double* values, int count, MPI_Comm comm, double* comm_seconds) {
  if (comm == MPI_COMM_NULL) return;
  const auto t0 = SteadyClock::now();
  MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, comm);
  if (comm_seconds) *comm_seconds += waited_since(t0, "all-reduce");
}

void barrier(MPI_Comm comm) {
  if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
}

bool all_ranks_on_one_host(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return true;
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int here = 0, all = 0;
  MPI_Comm_size(node, &here);
  MPI_Comm_size(comm, &all);
  MPI_Comm_free(&node);
  int one = here == all ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_INT, MPI_MIN, comm);
  return one == 1;
}

std::vector<std::string> gather_strings(const std::string& mine, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return {mine};
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  int count = mpi_count(int64_t(mine.size()), "a rank's text");
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  int64_t total = 0;
  for (int r = 0; rank == 0 && r < n; ++r)
    displs[size_t(r)] = mpi_count(total, "the ranks' texts"), total += counts[size_t(r)];
  std::vector<char> all(static_cast<size_t>(total));
  MPI_Gatherv(mine.data(), count, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0, comm);
  std::vector<std::string> out;
  for (int r = 0; rank == 0 && r < n; ++r)
    out.emplace_back(all.data() + displs[size_t(r)], size_t(counts[size_t(r)]));
  return out;
}

void broadcast_strings(std::vector<std::string>& strings, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  std::vector<int64_t> sizes;
  for (const std::string& s : strings) sizes.push_back(int64_t(s.size()));
  int64_t n = int64_t(sizes.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  sizes.resize(size_t(n));
  MPI_Bcast(sizes.data(), int(n), MPI_INT64_T, 0, comm);
  strings.resize(size_t(n));
  for (size_t i = 0; i < size_t(n); ++i) {
    strings[i].resize(size_t(sizes[i]));
    if (sizes[i] > 0) MPI_Bcast(strings[i].data(), int(sizes[i]), MPI_CHAR, 0, comm);
  }
}

std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm) {
  std::vector<std::string> all = gather_strings(mine, comm);
  broadcast_strings(all, comm);
  return all;
}

void barrier_sleeping(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::vector<double> allgather_rows(const std::vector<double>& mine, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return mine;
  int n = 1;
  MPI_Comm_size(comm, &n);
  std::vector<double> all(mine.size() * size_t(n));
  MPI_Allgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, comm);
  return all;
}

double probe_ring_bandwidth(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int n = 1 << 19;  // floats: 2 MiB, past the size where shared memory and TCP reach their rate
  std::vector<float> out(static_cast<size_t>(n), 1.0f), in(static_cast<size_t>(n));
  std::vector<double> times;
  for (int rep = 0; rep < 3; ++rep) {
    MPI_Barrier(comm);
    const auto t0 = SteadyClock::now();
    MPI_Sendrecv(out.data(), n, MPI_FLOAT, (rank + 1) % size, 99, in.data(), n, MPI_FLOAT,
                 (rank - 1 + size) % size, 99, comm, MPI_STATUS_IGNORE);
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  double t = times[1];
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  return double(n) * sizeof(float) / std::max(t, 1e-9);
}

PlacementStats with_hidden_estimate(PlacementStats stats, double bytes_per_second) {
  const double cost = double(stats.bytes_sent) / bytes_per_second;
  stats.hidden_seconds = std::max(0.0, cost - stats.exposed_seconds);
  return stats;
}

}  // namespace lct
