// Chrome trace-event JSON (https://ui.perfetto.dev, chrome://tracing) of per-rank spans:
// one process per rank, one thread per track (compute, wait, steps, products), every span a
// complete event ("ph": "X") in microseconds. Shared by the training timeline (spans
// gathered from the ranks by parallel/trace_gather.h) and `lct simulate`'s predicted
// timeline. Written atomically (a temporary file, then a rename).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/trace.h"

namespace lct {

// `what` names the setting in error messages (e.g. "trace.path").
void write_trace_json(const std::string& path, const std::vector<TraceProcess>& ranks,
                      const std::string& what);

}  // namespace lct
