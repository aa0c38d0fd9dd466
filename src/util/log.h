// Console output. Progress goes to stdout; warnings and errors to stderr with a
// "lct:" prefix so they stand out in mpirun's interleaved output.
#pragma once

#include <string>

namespace lct {

void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const std::string& message);
// Under MPI only rank 0 prints progress and warnings (errors are printed by every
// rank that has one, with its rank).
void set_log_rank(int rank);

}  // namespace lct
