// The small collectives of a training step: sums of a few doubles, a barrier, and the
// per-rank timing figures gathered for the log. No-ops without MPI.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/attention_placement.h"
#include "parallel/process_grid.h"

namespace lct {

// In-place sum of a few doubles over comm (no-op for MPI_COMM_NULL); adds the time spent
// to *comm_seconds.
void allreduce_sum(double* values, int count, MPI_Comm comm, double* comm_seconds);
void barrier(MPI_Comm comm);  // no-op for MPI_COMM_NULL
// A barrier that waits asleep (a nonblocking barrier tested every millisecond), for
// ranks that wait long while one rank measures: a blocking MPI wait spins on its core.
void barrier_sleeping(MPI_Comm comm);
// Whether every rank of comm shares one node's memory (one host). Collective.
bool all_ranks_on_one_host(MPI_Comm comm);
// Every rank's string, on rank 0 (in rank order; other ranks get an empty list).
// Collective.
std::vector<std::string> gather_strings(const std::string& mine, MPI_Comm comm);
// Every rank's string on every rank (in rank order; {mine} for MPI_COMM_NULL). Collective.
std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm);
// Rank 0's strings on every rank of comm (no-op for MPI_COMM_NULL). Collective.
void broadcast_strings(std::vector<std::string>& strings, MPI_Comm comm);
// Point-to-point bandwidth in bytes/s around a ring of comm: every rank sends 2 MiB to
// the next and receives from the previous, three times; the slowest rank's median time
// counts. Collective. The placements turn bytes sent into the transfer time they hide.
double probe_ring_bandwidth(MPI_Comm comm);
// A placement's figures with hidden_seconds filled in: what its bytes would have cost
// at that bandwidth, less the part it was seen waiting for (PlacementStats, >= 0).
PlacementStats with_hidden_estimate(PlacementStats stats, double bytes_per_second);

// Every rank's row of doubles (all rows of the same width), rank-major, on every rank:
// the step's per-rank figures (src/metrics/step_metrics.h reduces them). One
// MPI_Allgather; without MPI (comm == MPI_COMM_NULL) just this rank's row.
std::vector<double> allgather_rows(const std::vector<double>& mine, MPI_Comm comm);

}  // namespace lct
