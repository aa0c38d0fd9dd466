// Small helpers shared by the MPI code of parallel/.
#pragma once

#include <chrono>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace lct {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// MPI counts are int: a message of more elements is an error naming what it was.
inline int mpi_count(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw std::runtime_error(std::string(what) + " of " + std::to_string(n) +
                             " elements exceeds MPI's int count");
  return int(n);
}

}  // namespace lct
