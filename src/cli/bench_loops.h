// The peaks lct bench sets its figures against: tight loops of independent multiply-add
// chains on every OpenMP thread, in GFLOP/s (a multiply-add is 2 FLOPs), and the memory
// bandwidth of STREAM's copy and triad, in GB/s.
#pragma once

#include <cstdint>

namespace lct {

// fp32 FMA at the vector width this binary targets (AVX-512, AVX2 or scalar).
double fma_loop(int64_t iterations);

// bf16 dot products (VDPBF16PS: 32 bf16 multiply-adds into 16 fp32 lanes); 0 on a CPU
// without AVX512-BF16.
double bf16_dot_loop(int64_t iterations);

// STREAM's copy (c = a) and triad (a = b + s c) on fp32 arrays far larger than the
// caches, split statically over the OpenMP threads: bytes read and written over the
// best of `passes` timed passes (STREAM's convention: a write counts once, no
// write-allocate traffic), after one untimed pass that maps the pages. The ceiling of
// passes that stream rows through memory (norms, RoPE, residual adds, roundings).
struct StreamRates {
  double copy_gbps = 0, triad_gbps = 0;
  int64_t array_bytes = 0;  // each of the three arrays
};
StreamRates stream_rates(int64_t array_bytes, int passes);

}  // namespace lct
