// Console output. Progress goes to stdout; warnings and errors to stderr with a
// "lct:" prefix so they stand out in mpirun's interleaved output.
#pragma once

#include <string>

namespace lct {

void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const std::string& message);

}  // namespace lct
