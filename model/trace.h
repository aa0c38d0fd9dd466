// Timelines (trace.path): the spans one process records while a Trace is active, for
// Chrome trace-event JSON that Perfetto opens (parallel/trace_gather.h merges the ranks).
//
// Four tracks per rank: `compute` (the model's phases, the optimizer, checkpoints),
// `wait` (every interval a rank spends blocked in MPI: pipeline receives and sends,
// attention exchanges, gradient reduction, all-reduces; the same intervals the trainer
// sums into its idle figure), `step` (one span per training step) and `products` (every
// matrix product of the linear layers, model/ops.h). Spans on one track never overlap:
// phases are leaves, and a wait or a product happens inside a phase but on its own
// track, so a phase's time less its products' is everything else it did (norms, RoPE,
// SwiGLU, residual adds, rounding passes).
//
// Off by default: with no active Trace, recording is one pointer test per span. MPI-free,
// so the model records its phases itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lct {

using TraceClock = std::chrono::steady_clock;

enum class TraceTrack : int { compute = 0, wait = 1, step = 2, product = 3 };

struct TraceSpan {
  const char* name;  // a string literal
  TraceTrack track;
  TraceClock::time_point begin, end;
  int64_t arg = -1;  // e.g. the step number (-1: none)
};

class Trace {
 public:
  // The process's trace while one is active (nullptr: tracing is off).
  static Trace* active() { return active_; }
  static void activate(Trace* trace) { active_ = trace; }

  explicit Trace(TraceClock::time_point epoch) : epoch_(epoch) {}
  void add(const TraceSpan& span) { spans_.push_back(span); }
  const std::vector<TraceSpan>& spans() const { return spans_; }
  TraceClock::time_point epoch() const { return epoch_; }  // time 0 of the timeline
  void clear() { spans_.clear(); }

 private:
  static inline Trace* active_ = nullptr;
  TraceClock::time_point epoch_;
  std::vector<TraceSpan> spans_;
};

// Records [begin, end) when tracing is on.
inline void trace_span(const char* name, TraceTrack track, TraceClock::time_point begin,
                       TraceClock::time_point end, int64_t arg = -1) {
  if (Trace* t = Trace::active()) t->add({name, track, begin, end, arg});
}

// A span from construction to destruction (for phases).
class ScopedSpan {
 public:
  explicit ScopedSpan(const char* name, TraceTrack track = TraceTrack::compute)
      : name_(name), track_(track), on_(Trace::active() != nullptr) {
    if (on_) begin_ = TraceClock::now();
  }
  ~ScopedSpan() {
    if (on_) trace_span(name_, track_, begin_, TraceClock::now());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  const char* name_;
  TraceTrack track_;
  bool on_;
  TraceClock::time_point begin_{};
};

// What a phase of the compute track took in a set of spans: its total time, the time of
// the product spans inside it (TraceTrack::product), and how many spans of it there
// were. The rest, seconds - product_seconds, is its elementwise work and overhead.
struct PhaseTime {
  double seconds = 0, product_seconds = 0;
  int64_t count = 0;
};
// Per name of the compute track's spans (lct bench's profile, the simulator's calibration).
std::map<std::string, PhaseTime> phase_times(const std::vector<TraceSpan>& spans);

// Whether a phase of the model (model/llama.cpp) is core attention, softmax(QK^T)V and
// its backward in every placement ("attention", "attention backward start", "attention
// serve", "recompute attention", ...), not the linear layers around it ("before
// attention", "after attention backward").
inline bool is_core_attention_phase(const std::string& name) {
  return name.rfind("attention", 0) == 0 || name == "recompute attention";
}

// A rank's spans as events in microseconds since the trace's epoch, named for the file
// (src/io/trace_json.h writes them).
struct TraceEvent {
  TraceTrack track;
  double begin_us, end_us;
  int64_t arg = -1;  // the step (-1: none)
  std::string name;  // without quotes or backslashes
};

struct TraceProcess {
  std::string name;  // e.g. "rank 3 (dp 1, pp 1, cp 0)"
  std::vector<TraceEvent> events;
};

}  // namespace lct
