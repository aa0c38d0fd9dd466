// lct's command line (src/cli/dispatch.cpp), apart from CLI11's header so that
// src/main.cpp compiles without it.
#pragma once

namespace lct {

// Builds the options of the command named in argv (every command's for --help,
// --help-all or no command), parses them, has the ranks agree under MPI (world > 1) and
// runs the command. Returns the exit code: 0, or 1 after one error line (from rank 0 for
// an error every rank meets; a rank's own failure ends the whole job).
int run_command(int argc, char** argv, int rank, int world);

}  // namespace lct
