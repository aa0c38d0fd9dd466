#include "parallel/collectives.h"

#include <algorithm>
#include <chrono>

namespace lct {

void allreduce_sum(double* values, int count, MPI_Comm comm, double* comm_seconds) {
  if (comm == MPI_COMM_NULL) return;
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, comm);
  if (comm_seconds)
    *comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void barrier(MPI_Comm comm) {
  if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
}

StepFigures gather_step_figures(const ProcessGrid& grid, const RankStepTimes& mine,
                                double step_seconds) {
  const Layout& layout = grid.layout();
  const int n = grid.world_size();
  StepFigures f;
  f.stage_bubble.assign(size_t(layout.pp), 0.0);
  f.stage_activation_bytes.assign(size_t(layout.pp), 0);
  if (n == 1) {
    f.stage_bubble[0] = mine.bubble;
    f.stage_activation_bytes[0] = mine.activation_bytes;
    return f;
  }
  const double values[4] = {mine.compute_seconds, mine.comm_seconds, mine.bubble,
                            double(mine.activation_bytes)};
  std::vector<double> all(size_t(4 * n));
  MPI_Allgather(values, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, grid.world());
  double max_compute = 0, sum_compute = 0, sum_idle = 0;
  for (int k = 0; k < n; ++k) {
    const double* v = &all[size_t(4 * k)];
    max_compute = std::max(max_compute, v[0]);
    sum_compute += v[0];
    sum_idle += v[1] / std::max(step_seconds, 1e-9);
    const size_t s = size_t(grid_coordinates(layout, k).pp_rank);
    f.stage_bubble[s] = std::max(f.stage_bubble[s], v[2]);
    f.stage_activation_bytes[s] = std::max(f.stage_activation_bytes[s], int64_t(v[3]));
  }
  f.compute_max_over_mean = max_compute / std::max(sum_compute / n, 1e-12);
  f.idle_fraction = sum_idle / n;
  return f;
}

}  // namespace lct
