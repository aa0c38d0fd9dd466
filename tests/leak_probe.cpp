// Built in the sanitizer build only (tests/CMakeLists.txt): a process that starts MPI as
// lct does (parallel/process_grid.h) and then loses memory that its own code allocated,
// so that sanitizer_reports_leaks checks the sanitizer suite's settings (the library
// suppressions of tests/sanitizer.supp, tests/lsan_preload.c, symbolize=0) still report
// a leak of lct's code, under mpirun and without it.
//   lct_leak_probe leak | no-leak | leak-last-rank   (the last: only the last MPI rank
//   leaks, so the report cannot race mpirun ending the job for an earlier rank's exit)
#include <cstdio>
#include <cstring>
#include <string>

#include "parallel/process_grid.h"

namespace {
char* volatile kept = nullptr;  // volatile: the allocation cannot be optimized away
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "leak" && mode != "no-leak" && mode != "leak-last-rank") {
    std::fprintf(stderr, "usage: lct_leak_probe leak|no-leak|leak-last-rank\n");
    return 2;
  }
  lct::mpi_init_if_launched(&argc, &argv);
  const bool leaks = mode == "leak" || (mode == "leak-last-rank" && lct::mpi_world_rank() == lct::mpi_world_size() - 1);
  kept = new char[4321];
  std::memset(kept, 1, 4321);
  if (!leaks) delete[] kept;
  kept = nullptr;
  lct::mpi_finalize_if_active();
  return 0;
}
