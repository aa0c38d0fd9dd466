#include "parallel/process_grid.h"

#include <cstdio>
#include <cstdlib>

namespace lct {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
         std::getenv("PMI_RANK");
}

void mpi_init_if_launched(int* argc, char*** argv) {
  if (!launched_by_mpi() || mpi_active()) return;
  int provided = 0;
  // The gradient all-reduce (MPI_Iallreduce, parallel/grad_reducer.h) as a ring, unless
  // the user chose: OpenMPI's non-blocking collectives (libnbc) pick a binomial tree
  // below 4 ranks, a reduce to one rank and a broadcast back, which uses each direction
  // of a link half the time. Across two hosts on a 200 Mbit/s link a 4 MiB bucket took
  // 298 ms that way and 177 ms as a ring (docs/clusters.md). With two ranks both sum
  // a + b, so results do not change; with three the order of the sum does (float
  // rounding, as between any two layouts).
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", 0);
  // Only the main thread calls MPI (OpenMP threads never do).
  // MPI's default error handler stays (errors are fatal to the whole job).
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
}

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void mpi_finalize_if_active() {
  if (mpi_active()) MPI_Finalize();
}

int mpi_world_rank() {
  int r = 0;
  if (mpi_active()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_world_size() {
  int s = 1;
  if (mpi_active()) MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void mpi_abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_active() && mpi_world_size() > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

ProcessGrid::ProcessGrid(const Layout& layout) : layout_(layout) {
  if (!mpi_active()) return;  // single process: no communicators
  world_rank_ = mpi_world_rank();
  world_size_ = mpi_world_size();
  coords_ = grid_coordinates(layout, world_rank_);
  const int c = coords_.cp_rank, d = coords_.dp_rank, p = coords_.pp_rank;
  // color = the coordinates that stay fixed inside the group; key = world rank
  MPI_Comm_split(MPI_COMM_WORLD, d + layout.dp * p, world_rank_, &cp_);
  MPI_Comm_split(MPI_COMM_WORLD, c + layout.cp * d, world_rank_, &pp_);
  MPI_Comm_split(MPI_COMM_WORLD, p, world_rank_, &dp_cp_);
  const bool holds_copy = layout.pp > 1 && (p == 0 || p == layout.pp - 1);
  MPI_Comm_split(MPI_COMM_WORLD, holds_copy ? c + layout.cp * d : MPI_UNDEFINED, world_rank_, &tied_);
}

const ProcessGrid& single_process_grid() {
  static const ProcessGrid grid;
  return grid;
}

ProcessGrid::~ProcessGrid() {
  if (!mpi_active()) return;
  for (MPI_Comm* comm : {&cp_, &pp_, &dp_cp_, &tied_})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

}  // namespace lct
