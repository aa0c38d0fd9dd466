#include "src/util/heartbeat.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "src/util/log.h"

namespace lct {

namespace {
// the stream is a terminal a person watches: not under an MPI launcher, which gives its
// ranks a pseudo-terminal whatever their output goes to (a log file would fill with rewrites)
bool watched_terminal(std::FILE* to) {
  for (const char* launcher : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(launcher)) return false;
  return isatty(fileno(to)) != 0;
}
}  // namespace

std::string Heartbeat::duration_text(double s) {
  if (s < 10) return fmt::format("{:.1f} s", s);
  if (s < 600) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

std::string Heartbeat::time_text(double elapsed_s, double share) {
  // the rest at the rate so far (none before any of the work is done)
  const std::string left =
      share > 0 && share < 1 ? ", about " + duration_text(elapsed_s * (1 - share) / share) + " to go" : "";
  return duration_text(elapsed_s) + " in" + left;
}

Heartbeat::Heartbeat(double interval_s, std::FILE* to)
    : interval_s_(interval_s), to_(to), terminal_(watched_terminal(to)) {
  if (interval_s_ > 0) thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::begin(LineFunction line, Clock::time_point start) {
  if (interval_s_ <= 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  busy_ = true;
  line_ = std::move(line);
  start_ = last_line_ = start;
}

void Heartbeat::end() {
  if (interval_s_ <= 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  busy_ = false;
  line_ = nullptr;
  if (shown_) {  // the terminal's line goes, so the work's own next line starts a clean row
    write_text(to_, "\r\033[K");
    std::fflush(to_);
    shown_ = false;
  }
}

void Heartbeat::run() {
  const auto interval = std::chrono::duration<double>(interval_s_);
  // wakes often enough to print within a quarter interval of when a line is due (at most
  // a second late, at least a millisecond between wakes whatever the interval)
  const auto tick = std::chrono::duration_cast<Clock::duration>(
      std::clamp(interval / 4, std::chrono::duration<double>(1e-3), std::chrono::duration<double>(1.0)));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, tick);
    if (stop_ || !busy_) continue;
    const Clock::time_point now = Clock::now();
    if (now - start_ < interval || now - last_line_ < interval) continue;
    last_line_ = now;
    const std::string text = line_(std::chrono::duration<double>(now - start_).count());
    if (terminal_) {
      write_text(to_, "\r" + text + "\033[K");
      std::fflush(to_);
      shown_ = true;
    } else if (to_ == stdout) {
      log_line(text);
    } else {
      write_text(to_, text + "\n");
      std::fflush(to_);
    }
  }
}

}  // namespace lct
