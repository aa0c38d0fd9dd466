// Chrome trace-event JSON (https://ui.perfetto.dev, chrome://tracing) of per-rank spans:
// one process per rank, one thread per track (compute, wait, steps), every span a
// complete event ("ph": "X") in microseconds. Shared by the training timeline
// (parallel/trace_writer.h, spans gathered from the ranks) and `lct simulate`'s
// predicted timeline. Written atomically (a temporary file, then a rename).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/trace.h"

namespace lct {

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

// `what` names the setting in error messages (e.g. "trace.path").
void write_trace_json(const std::string& path, const std::vector<TraceProcess>& ranks,
                      const std::string& what);

}  // namespace lct
