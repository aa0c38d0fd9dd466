// lct: command line entry point (every command's flags: lct COMMAND --help).
//   lct train [--config FILE] [--section.key VALUE ...] [--dry-run]
//   lct simulate [--config FILE] [--section.key VALUE ...] --ranks N [--tflops T ...]
//   lct eval --checkpoint FILE --batch-file B.h5 [--grads-out G.h5] [--per-position-out P.csv]
//            [--attention.kernel dca --attention.dca_chunk_size C ...]
//   lct generate --checkpoint FILE|DIR --prompt TEXT | --prompt-file F | --prompt-tokens F
//            [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S] [--attention.* ...]
//   lct make-batch [--config FILE] [--section.key VALUE ...] --out B.h5 [--sequences N]
//   lct inspect FILE [--json] | lct inspect --compare A.h5 B.h5 [--json]
//   lct bench [--config FILE] [--section.key VALUE ...] [--json] [--attention-lengths ...]
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "parallel/process_grid.h"
#include "src/cli/dispatch.h"
#include "src/util/log.h"
#include "src/util/machine.h"

using namespace lct;

namespace {
// glibc calls an executable's .preinit_array before any shared library's constructor:
// OpenBLAS's maps a 128 MiB buffer for each of its threads and, under an address-space
// limit those do not fit, retries forever (ignoring SIGTERM). So a limit lct cannot
// start under is one line and exit 1 here, before any library runs (src/util/machine.h).
void before_the_libraries(int, char**, char** envp) { refuse_address_space_below_start(envp); }
__attribute__((section(".preinit_array"), used)) void (*preinit_entry)(int, char**, char**) = before_the_libraries;
}  // namespace

int main(int argc, char** argv) {
  choose_blas_kernels(argv);  // may re-execute lct once (src/util/machine.h)
  // Under mpirun every rank runs this; without a launcher there is no MPI at all.
  mpi_init_if_launched(&argc, &argv);
  const int rank = mpi_world_rank(), world = mpi_world_size();
  set_log_rank(rank);
  int code = run_command(argc, argv, rank, world);
  // results printed on stdout (eval, inspect --json, simulate --json) are lost when it
  // cannot be written (a full device, a closed pipe): that is a failure, not exit 0
  std::cout.flush();
  const bool written = std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (!written) {
    const int err = errno;
    print_err("lct: error: cannot write the results to standard output: {}\n",
              err ? std::strerror(err) : "write error");
    code = 1;
  }
  mpi_finalize_if_active();
  return code;
}
