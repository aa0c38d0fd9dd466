// The MPI process grid shared by data, pipeline and context parallelism, built from a
// resolved layout (parallel/layout.h: degrees and rank order).
// Communicators: one per axis (ranks that differ only in that coordinate) and dp x cp
// (ranks holding the same weights: gradient and loss reduction).
//
// A process started without an MPI launcher has no MPI at all: world size 1, every
// communicator MPI_COMM_NULL, every collective a no-op.
#pragma once

#include <mpi.h>

#include <string>

#include "parallel/layout.h"

namespace lct {

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
  // Single-process grid (no MPI); single_process_grid() gives one shared.
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
  MPI_Comm dp_cp_ = MPI_COMM_NULL, pp_ = MPI_COMM_NULL, cp_ = MPI_COMM_NULL,
           tied_ = MPI_COMM_NULL;
};

// The single-process grid (no MPI) of this process, shared by whoever needs one: a run
// in one process, the simulator's calibration.
const ProcessGrid& single_process_grid();

}  // namespace lct
