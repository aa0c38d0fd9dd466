// Writes the job's timeline: every rank's spans (model/trace.h) gathered to rank 0 and
// written as one Chrome trace-event JSON file (open it in https://ui.perfetto.dev or
// chrome://tracing). One process per rank (pid = world rank, named with its dp/pp/cp
// coordinates), one thread per track (compute, wait, step); every span a complete
// event ("ph": "X") in microseconds since the trace's epoch, which every rank takes
// right after one barrier, so the ranks' clocks line up to within the barrier's exit
// skew. Collective over the world; rank 0 writes `path` atomically (a temporary file,
// then a rename).
#pragma once

#include <string>

#include "model/trace.h"
#include "parallel/process_grid.h"

namespace lct {

// A trace whose epoch every rank of the world takes right after one barrier.
Trace start_aligned_trace(const ProcessGrid& grid);

void write_trace(const Trace& trace, const ProcessGrid& grid, const std::string& path);

}  // namespace lct
