// The job's timeline: every rank's spans (model/trace.h) gathered to rank 0, one
// TraceProcess per rank (named with its dp/pp/cp coordinates), every span in
// microseconds since the trace's epoch, which every rank takes right after one barrier,
// so the ranks' clocks line up to within the barrier's exit skew. src/io/trace_json.h
// writes them as one Chrome trace-event JSON file.
#pragma once

#include <vector>

#include "model/trace.h"
#include "parallel/process_grid.h"

namespace lct {

// A trace whose epoch every rank of the world takes right after one barrier.
Trace start_aligned_trace(const ProcessGrid& grid);

// Collective over the world; every rank's spans on rank 0, nothing on the others.
std::vector<TraceProcess> gather_trace(const Trace& trace, const ProcessGrid& grid);

}  // namespace lct
