#include "parallel/process_grid.h"

#include <cstdio>
#include <cstdlib>

#include "model/stage.h"

namespace lct {

std::string resolve_layout(const LayoutRequest& r, int world_size, int num_layers,
                           int64_t seq_len, Layout& layout) {
  const auto text = [](int64_t v) { return std::to_string(v); };
  const std::string factors = "parallel.dp = " + text(r.dp) + ", parallel.pp = " + text(r.pp) +
                              ", parallel.cp = " + text(r.cp);
  int inferred = 0;
  for (const auto& [name, v] : {std::pair{"parallel.dp", r.dp}, {"parallel.pp", r.pp},
                                {"parallel.cp", r.cp}}) {
    if (v == -1) {
      ++inferred;
    } else if (v < 1) {
      return std::string(name) + " must be a positive degree or -1 (infer), got " + text(v);
    }
  }
  if (inferred > 1) return "only one of parallel.dp/pp/cp may be -1 (infer); got " + factors;
  // products are checked: 2^63 / 7 x 7 must not wrap around to a small layout
  int64_t known = 1;
  for (int64_t v : {r.dp, r.pp, r.cp})
    if (v > 0 && __builtin_mul_overflow(known, v, &known))
      return "parallel.dp x parallel.pp x parallel.cp overflows (" + factors + ")";
  int64_t dp = r.dp, pp = r.pp, cp = r.cp;
  if (inferred == 1) {
    if (world_size % known != 0)
      return "cannot infer the -1 degree: the MPI world has " + text(world_size) +
             " ranks, not a multiple of the other degrees' product " + text(known) + " (" +
             factors + ")";
    const int64_t v = world_size / known;
    (dp == -1 ? dp : pp == -1 ? pp : cp) = v;
  }
  int64_t product = 0;
  if (__builtin_mul_overflow(dp, pp, &product) || __builtin_mul_overflow(product, cp, &product))
    return "parallel.dp x parallel.pp x parallel.cp overflows (" + factors + ")";
  if (product != world_size)
    return "parallel.dp x parallel.pp x parallel.cp = " + text(dp) + " x " + text(pp) + " x " +
           text(cp) + " = " + text(product) + " but the MPI world has " + text(world_size) +
           " rank" + (world_size == 1 ? "" : "s") + " (launch with mpirun -np " +
           text(product) + ", or set one degree to -1)";
  std::vector<StageSpec> stages;
  if (std::string e = split_pipeline_stages(num_layers, int(pp), r.pp_layers, stages); !e.empty())
    return e;
  if (cp > 1 && seq_len % (2 * cp) != 0)
    return "data.seq_len = " + text(seq_len) + " must be a multiple of 2 x parallel.cp = " +
           text(2 * cp) + " (load-balanced context-parallel split)";
  layout.dp = int(dp);
  layout.pp = int(pp);
  layout.cp = int(cp);
  return {};
}

GridCoordinates grid_coordinates(const Layout& l, int world_rank) {
  GridCoordinates c;
  c.cp_rank = world_rank % l.cp;
  c.dp_rank = (world_rank / l.cp) % l.dp;
  c.pp_rank = world_rank / (l.cp * l.dp);
  return c;
}

int world_rank_of(const Layout& l, const GridCoordinates& c) {
  return c.cp_rank + l.cp * (c.dp_rank + l.dp * c.pp_rank);
}

std::string layout_name(const Layout& l) {
  return "dp " + std::to_string(l.dp) + " x pp " + std::to_string(l.pp) + " x cp " + std::to_string(l.cp);
}

std::string rank_name(const Layout& l, int world_rank) {
  const GridCoordinates c = grid_coordinates(l, world_rank);
  return "rank " + std::to_string(world_rank) + " (dp " + std::to_string(c.dp_rank) + ", pp " +
         std::to_string(c.pp_rank) + ", cp " + std::to_string(c.cp_rank) + ")";
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
         std::getenv("PMI_RANK");
}

void mpi_init_if_launched(int* argc, char*** argv) {
  if (!launched_by_mpi() || mpi_active()) return;
  int provided = 0;
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
  MPI_Comm_split(MPI_COMM_WORLD, c + layout.cp * p, world_rank_, &dp_);
  MPI_Comm_split(MPI_COMM_WORLD, c + layout.cp * d, world_rank_, &pp_);
  MPI_Comm_split(MPI_COMM_WORLD, p, world_rank_, &dp_cp_);
  const bool holds_copy = layout.pp > 1 && (p == 0 || p == layout.pp - 1);
  MPI_Comm_split(MPI_COMM_WORLD, holds_copy ? c + layout.cp * d : MPI_UNDEFINED, world_rank_, &tied_);
}

ProcessGrid::~ProcessGrid() {
  if (!mpi_active()) return;
  for (MPI_Comm* comm : {&cp_, &dp_, &pp_, &dp_cp_, &tied_})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

}  // namespace lct
