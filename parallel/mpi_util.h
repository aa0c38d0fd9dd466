// Small helpers shared by the MPI code of parallel/.
#pragma once

#include <chrono>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "model/trace.h"

namespace lct {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// The seconds a rank was blocked in MPI since t0, recorded as a wait span named `what`
// when tracing (model/trace.h). Every wait that counts towards the idle figure goes
// through here, so the trace's wait track adds up to it.
inline double waited_since(SteadyClock::time_point t0, const char* what) {
  const SteadyClock::time_point t1 = SteadyClock::now();
  trace_span(what, TraceTrack::wait, t0, t1);
  return std::chrono::duration<double>(t1 - t0).count();
}

// MPI counts are int: a message of more elements is an error naming what it was.
inline int mpi_count(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw std::runtime_error(std::string(what) + " of " + std::to_string(n) +
                             " elements exceeds MPI's int count");
  return int(n);
}

}  // namespace lct
