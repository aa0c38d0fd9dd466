#include "src/util/log.h"

#include <cstdio>

namespace lct {

namespace {
int g_log_rank = 0;
}

void set_log_rank(int rank) { g_log_rank = rank; }

void write_text(std::FILE* to, fmt::string_view text) {
  const size_t written = std::fwrite(text.data(), 1, text.size(), to);
  (void)written;  // a short write sets the stream's error flag (see log.h)
}

void log_line(fmt::string_view line) {
  if (g_log_rank != 0) return;
  write_text(stdout, line);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void log_warn(const std::string& message) {
  if (g_log_rank != 0) return;
  print_err("lct: warning: {}\n", message);
  std::fflush(stderr);
}

}  // namespace lct
