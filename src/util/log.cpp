#include "src/util/log.h"

#include <cstdarg>
#include <cstdio>

namespace lct {

namespace {
int g_log_rank = 0;
}

void set_log_rank(int rank) { g_log_rank = rank; }

void log_info(const char* fmt, ...) {
  if (g_log_rank != 0) return;
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void log_warn(const std::string& message) {
  if (g_log_rank != 0) return;
  std::fprintf(stderr, "lct: warning: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace lct
