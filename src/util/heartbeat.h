// A heartbeat inside long work: while a piece of work (a training step, a generation,
// a bench section) has run longer than the interval, rank 0 prints where it is every
// interval, from a thread of its own that asks the work's line function:
//   step 3: backward, layer 2 of 4, micro-batch 1 of 2 | 37% of the step's FLOPs | 92 s in, about 2.6 min to go
//   generate: prompt 1 of 2, decoding | 1200 of 4000 new tokens (30%) | 31 s in, about 72 s to go
// On a terminal (not under an MPI launcher, whose ranks write to a pseudo-terminal
// wherever the output goes) it is one line rewritten in place and cleared when the work
// ends; otherwise a line each time, on stdout or stderr. Nothing the work computes or
// writes otherwise changes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace lct {

class Heartbeat {
 public:
  using Clock = std::chrono::steady_clock;
  // The line for the work's position, given the seconds since it began.
  using LineFunction = std::function<std::string(double elapsed_s)>;

  // interval_s <= 0: off (no thread). `to`: stdout or stderr (a command whose stdout is
  // its result, lct generate, writes progress to stderr).
  explicit Heartbeat(double interval_s, std::FILE* to = stdout);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Work began at `start`; its lines come from `line`, called on the heartbeat's thread
  // (it must only read what the work publishes atomically).
  void begin(LineFunction line, Clock::time_point start = Clock::now());
  // It ended: no line is printed after this returns until the next begin (a terminal's
  // line is cleared), so the work's own lines stand alone.
  void end();

  // 4.2 s, 75 s, 12.5 min, 3.1 h
  static std::string duration_text(double s);
  // "N s in", and ", about M to go" for the rest at the rate so far when 0 < share < 1
  static std::string time_text(double elapsed_s, double share);

 private:
  void run();
  const double interval_s_;
  std::FILE* const to_;
  const bool terminal_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, busy_ = false, shown_ = false;  // shown_: a terminal line is up
  LineFunction line_;
  Clock::time_point start_, last_line_;
  std::thread thread_;
};

// Begins on construction and ends on destruction, however the work ends (a null
// heartbeat: nothing, and the line function is never made into a std::function, so a
// training step without a heartbeat allocates nothing for it).
class HeartbeatScope {
 public:
  template <typename Line>
  HeartbeatScope(Heartbeat* h, Line&& line, Heartbeat::Clock::time_point start = Heartbeat::Clock::now())
      : h_(h) {
    if (h_) h_->begin(Heartbeat::LineFunction(std::forward<Line>(line)), start);
  }
  ~HeartbeatScope() {
    if (h_) h_->end();
  }
  HeartbeatScope(const HeartbeatScope&) = delete;
  HeartbeatScope& operator=(const HeartbeatScope&) = delete;

 private:
  Heartbeat* h_;
};

}  // namespace lct
