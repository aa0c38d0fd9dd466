// Loops over the OpenMP threads only when they are worth it.
#pragma once

#include <cstdint>

namespace lct {

// Below this many elements touched, a loop runs on the calling thread.
inline constexpr int64_t kParallelMinWork = 65536;

// f(i) for i in [0, n): on the OpenMP threads (static schedule) when `work` exceeds
// kParallelMinWork, else on the calling thread. Not `#pragma omp parallel if (...)`: a
// region whose if clause is false still starts a one-thread team, and libgomp allocates
// that team on every such region (tests/model/step_alloc_test.cpp sees it).
template <typename F>
void parallel_for(int64_t n, int64_t work, F&& f) {
  if (work > kParallelMinWork) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

}  // namespace lct
