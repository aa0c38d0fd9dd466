// The MPI process grid shared by data, pipeline and context parallelism.
//
// Degrees dp x pp x cp must equal the MPI world size (one degree may be -1: inferred).
// Rank order (fixed, documented): cp varies fastest, then dp, then pp:
//     world_rank = cp_rank + cp * (dp_rank + dp * pp_rank)
// so the ranks of one context-parallel group are neighbours (same node first) and a
// pipeline stage is a contiguous block of dp * cp ranks.
// Communicators: one per axis (ranks that differ only in that coordinate) and dp x cp
// (ranks holding the same weights: gradient and loss reduction).
//
// A process started without an MPI launcher has no MPI at all: world size 1, every
// communicator MPI_COMM_NULL, every collective a no-op.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lct {

struct LayoutRequest {
  int64_t dp = -1, pp = 1, cp = 1;  // parallel.* keys; -1 = infer from the world size
  std::vector<int64_t> pp_layers;   // layers per pipeline stage (empty = even split)
};

struct Layout {
  int dp = 1, pp = 1, cp = 1;
};

// Resolves -1 and checks every layout rule against the world size and the model; the
// error (empty when valid) is one line naming the keys and printing every factor.
std::string resolve_layout(const LayoutRequest& request, int world_size, int num_layers,
                           int64_t seq_len, Layout& layout);

struct GridCoordinates {
  int dp_rank = 0, pp_rank = 0, cp_rank = 0;
};
GridCoordinates grid_coordinates(const Layout& layout, int world_rank);
int world_rank_of(const Layout& layout, const GridCoordinates& c);
// "dp 2 x pp 1 x cp 2", and "rank 3 (dp 1, pp 0, cp 1)" (logs, timelines, simulate).
std::string layout_name(const Layout& layout);
std::string rank_name(const Layout& layout, int world_rank);

// MPI lifetime: initialises MPI only when the process was started by an MPI launcher
// (mpirun/srun set OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK).
bool launched_by_mpi();
void mpi_init_if_launched(int* argc, char*** argv);
bool mpi_active();  // initialised and not finalised
void mpi_finalize_if_active();
int mpi_world_rank();  // 0 without MPI
int mpi_world_size();  // 1 without MPI
// Ends every rank of the job (after printing on this one); never returns.
[[noreturn]] void mpi_abort_job(int exit_code);

class ProcessGrid {
 public:
  // Single-process grid (no MPI).
  ProcessGrid() = default;
  // Splits MPI_COMM_WORLD by layout (collective over all ranks).
  explicit ProcessGrid(const Layout& layout);
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const Layout& layout() const { return layout_; }
  const GridCoordinates& coords() const { return coords_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  bool is_root() const { return world_rank_ == 0; }
  // Ranks sharing weights (gradient and loss reduction); MPI_COMM_NULL without MPI.
  MPI_Comm dp_cp() const { return dp_cp_; }
  MPI_Comm dp() const { return dp_; }
  MPI_Comm pp() const { return pp_; }
  MPI_Comm cp() const { return cp_; }
  // The first and the last pipeline stage of this rank's (dp, cp) position: the two
  // holders of tied embedding copies. MPI_COMM_NULL on other stages and when pp = 1.
  MPI_Comm tied_embedding() const { return tied_; }
  MPI_Comm world() const { return world_size_ > 1 || mpi_active() ? MPI_COMM_WORLD : MPI_COMM_NULL; }

 private:
  Layout layout_;
  GridCoordinates coords_;
  int world_rank_ = 0, world_size_ = 1;
  MPI_Comm dp_cp_ = MPI_COMM_NULL, dp_ = MPI_COMM_NULL, pp_ = MPI_COMM_NULL, cp_ = MPI_COMM_NULL,
           tied_ = MPI_COMM_NULL;
};

}  // namespace lct
