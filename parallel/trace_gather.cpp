#include "parallel/trace_gather.h"

#include "parallel/collectives.h"

#include <mpi.h>

#include <sstream>
#include <stdexcept>
#include <vector>

#include "parallel/mpi_util.h"

namespace lct {

Trace start_aligned_trace(const ProcessGrid& grid) {
  barrier(grid.world());  // a single process without mpirun has no world to wait for
  return Trace(TraceClock::now());
}

std::vector<TraceProcess> gather_trace(const Trace& trace, const ProcessGrid& grid) {
  // this rank's spans as text lines: track begin_us end_us arg name
  std::ostringstream mine;
  mine.precision(15);
  for (const TraceSpan& s : trace.spans()) {
    const auto us = [&](TraceClock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - trace.epoch()).count();
    };
    mine << int(s.track) << ' ' << us(s.begin) << ' ' << us(s.end) << ' ' << s.arg << ' ' << s.name
         << '\n';
  }
  const std::string text = mine.str();
  const int n = grid.world_size(), rank = grid.world_rank();
  int count = mpi_count(int64_t(text.size()), "a rank's trace");
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  std::vector<char> all;
  if (grid.world() == MPI_COMM_NULL) {  // one process without mpirun
    counts[0] = count;
    all.assign(text.begin(), text.end());
  } else {
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, grid.world());
    int64_t total = 0;
    for (int r = 0; r < n; ++r) displs[size_t(r)] = mpi_count(total, "the job's trace"), total += counts[size_t(r)];
    all.resize(rank == 0 ? static_cast<size_t>(total) : 0);
    MPI_Gatherv(text.data(), count, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0,
                grid.world());
  }
  if (rank != 0) return {};

  std::vector<TraceProcess> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ranks[size_t(r)].name = rank_name(grid.layout(), r);
    std::istringstream lines(std::string(all.data() + displs[size_t(r)], size_t(counts[size_t(r)])));
    TraceEvent e;
    int track = 0;
    long long arg = -1;
    while (lines >> track >> e.begin_us >> e.end_us >> arg && std::getline(lines >> std::ws, e.name)) {
      e.track = TraceTrack(track);
      e.arg = arg;
      ranks[size_t(r)].events.push_back(e);
    }
  }
  return ranks;
}

}  // namespace lct
