#include "src/train/heartbeat.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "src/util/log.h"

namespace lct {

namespace {
// stdout is a terminal a person watches: not under an MPI launcher, which gives its ranks
// a pseudo-terminal whatever their output goes to (a log file would fill with rewrites)
bool watched_terminal() {
  for (const char* launcher : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(launcher)) return false;
  return isatty(fileno(stdout)) != 0;
}

// 4.2 s, 75 s, 12.5 min, 3.1 h
std::string duration_text(double s) {
  if (s < 10) return fmt::format("{:.1f} s", s);
  if (s < 600) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}
}  // namespace

std::string Heartbeat::line(int64_t step, const StepProgress::Position& p, double total_flops, int layers,
                            int64_t micro_batches, double elapsed_s) {
  std::string where = p.phase[0] ? p.phase : "starting";
  if (p.layer >= 0) where += fmt::format(", layer {} of {}", p.layer + 1, layers);
  if (p.micro_batch >= 0 && micro_batches > 1) where += fmt::format(", micro-batch {} of {}", p.micro_batch + 1, micro_batches);
  const double share = total_flops > 0 ? std::clamp(p.done / total_flops, 0.0, 1.0) : 0.0;
  // the rest at the rate so far (none before the first pass ends)
  const std::string left = share > 0 && share < 1 ? ", about " + duration_text(elapsed_s * (1 - share) / share) + " to go" : "";
  return fmt::format("step {}: {} | {:.0f}% of the step's FLOPs | {} in{}", step, where, 100 * share,
                     duration_text(elapsed_s), left);
}

Heartbeat::Heartbeat(double interval_s, const StepProgress& progress, int layers, int64_t micro_batches)
    : interval_s_(interval_s),
      progress_(progress),
      layers_(layers),
      micro_batches_(micro_batches),
      terminal_(watched_terminal()) {
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

void Heartbeat::step_begins(int64_t step, double total_flops, Clock::time_point start) {
  if (interval_s_ <= 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  in_step_ = true;
  step_ = step;
  total_flops_ = total_flops;
  step_start_ = last_line_ = start;
}

void Heartbeat::step_ends() {
  if (interval_s_ <= 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  in_step_ = false;
  if (shown_) {  // the terminal's line goes, so the step's own line starts a clean row
    write_text(stdout, "\r\033[K");
    std::fflush(stdout);
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
    if (stop_ || !in_step_) continue;
    const Clock::time_point now = Clock::now();
    if (now - step_start_ < interval || now - last_line_ < interval) continue;
    last_line_ = now;
    const std::string text = line(step_, progress_.position(), total_flops_, layers_, micro_batches_,
                                  std::chrono::duration<double>(now - step_start_).count());
    if (terminal_) {
      write_text(stdout, "\r" + text + "\033[K");
      std::fflush(stdout);
      shown_ = true;
    } else {
      log_line(text);
    }
  }
}

}  // namespace lct
