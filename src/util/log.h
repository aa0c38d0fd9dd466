// Console output. Progress goes to stdout; warnings and errors to stderr with a
// "lct:" prefix so they stand out in mpirun's interleaved output. Every line is
// formatted by libfmt ("{}" fields, checked against the arguments at compile time).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

namespace lct {

// Writes text to a stream. Unlike fmt::print, a failed write does not throw: as with
// std::printf it leaves the stream's error flag set (main() checks stdout's once, after
// the command: a result that cannot be written is an error there), and a message to a
// broken stderr is lost rather than ending the process from inside an error handler.
void write_text(std::FILE* to, fmt::string_view text);

// fmt::print to stdout / stderr through write_text.
template <typename... Args>
void print_out(fmt::format_string<Args...> f, Args&&... args) {
  fmt::memory_buffer text;
  fmt::format_to(std::back_inserter(text), f, std::forward<Args>(args)...);
  write_text(stdout, {text.data(), text.size()});
}
template <typename... Args>
void print_err(fmt::format_string<Args...> f, Args&&... args) {
  fmt::memory_buffer text;
  fmt::format_to(std::back_inserter(text), f, std::forward<Args>(args)...);
  write_text(stderr, {text.data(), text.size()});
}

// A progress line (rank 0 prints it, with the newline, and flushes).
void log_line(fmt::string_view line);
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line(fmt::format(f, std::forward<Args>(args)...));
}
void log_warn(const std::string& message);
// Under MPI only rank 0 prints progress and warnings (errors are printed by every
// rank that has one, with its rank).
void set_log_rank(int rank);

}  // namespace lct
