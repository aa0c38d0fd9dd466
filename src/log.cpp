#include "src/log.h"

#include <cstdarg>
#include <cstdio>

namespace lct {

void log_info(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void log_warn(const std::string& message) {
  std::fprintf(stderr, "lct: warning: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace lct
