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
// Rank 0's strings on every rank of comm (no-op for MPI_COMM_NULL). Collective.
void broadcast_strings(std::vector<std::string>& strings, MPI_Comm comm);
// Point-to-point bandwidth in bytes/s around a ring of comm: every rank sends 8 MiB to
// the next and receives from the previous, three times; the slowest rank's median time
// counts. Collective. The placements turn bytes sent into the transfer time they hide.
double probe_ring_bandwidth(MPI_Comm comm);
// A placement's figures with hidden_seconds filled in: what its bytes would have cost
// at that bandwidth, less the part it was seen waiting for (PlacementStats, >= 0).
PlacementStats with_hidden_estimate(PlacementStats stats, double bytes_per_second);

// One rank's figures of a step.
struct RankStepTimes {
  double compute_seconds = 0;  // step minus time inside MPI calls
  double comm_seconds = 0;     // time inside MPI calls
  double bubble = 0;           // pipeline: blocked on receives over the schedule's time
  int64_t activation_bytes = 0;  // peak activation slots x slot bytes
  double attention_pairs = 0;    // attention work of this rank's queries
  double attention_pairs_served = 0;  // attention work this rank computed (its placement)
  double exchange_bytes_sent = 0;      // context-parallel exchange, this step
  double exchange_exposed_seconds = 0, exchange_hidden_seconds = 0;
  int64_t peak_rss_bytes = 0;
};

// Over all ranks of the grid: slowest compute over mean compute, mean fraction of the
// step spent in communication, and per pipeline stage the worst bubble and activation
// peak. One all-gather over the world (none in a single process).
struct StepFigures {
  double compute_max_over_mean = 1.0, idle_fraction = 0.0;
  double attention_pairs_max_over_mean = 1.0;  // over ranks
  double attention_pairs_served_max_over_mean = 1.0;
  double exchange_bytes_sent = 0;                    // mean over ranks
  double exchange_exposed_fraction = 0, exchange_hidden_fraction = 0;  // mean over ranks, of the step
  int64_t peak_rss_bytes = 0;                  // max over ranks
  std::vector<double> stage_bubble;            // [pp]
  std::vector<int64_t> stage_activation_bytes;  // [pp]
};
StepFigures gather_step_figures(const ProcessGrid& grid, const RankStepTimes& mine,
                                double step_seconds);

}  // namespace lct
