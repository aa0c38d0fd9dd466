// The arithmetic peaks lct bench sets its figures against: tight loops of independent
// multiply-add chains on every OpenMP thread, in GFLOP/s (a multiply-add is 2 FLOPs).
#pragma once

#include <cstdint>

namespace lct {

// fp32 FMA at the vector width this binary targets (AVX-512, AVX2 or scalar).
double fma_loop(int64_t iterations);

// bf16 dot products (VDPBF16PS: 32 bf16 multiply-adds into 16 fp32 lanes); 0 on a CPU
// without AVX512-BF16.
double bf16_dot_loop(int64_t iterations);

}  // namespace lct
