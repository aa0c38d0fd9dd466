// Small vectorizable math helpers shared by the attention kernel and the fused
// model ops. They are written as branch-free scalar code so that loops calling them
// under `#pragma omp simd` compile to AVX-512/AVX2 without -ffast-math (the build
// keeps IEEE semantics elsewhere).
#pragma once

#include <bit>
#include <cstdint>

namespace lct {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)
constexpr float kLn2 = 0.6931471805599453f;     // ln(2)

// 2^x for x in float range, relative error about 2e-8 plus rounding (<= 2 ulp);
// inputs below -126 return 2^-126 (callers that need an exact 0 for masked
// entries write it themselves), inputs above 127 return 2^127.
#pragma omp declare simd notinbranch
inline float fast_exp2(float x) {
  x = x < -126.0f ? -126.0f : x;
  x = x > 127.0f ? 127.0f : x;
  // n = round(x) by the 1.5*2^23 trick (round-to-nearest mode), f in [-0.5, 0.5]
  const float shifted = x + 12582912.0f;
  const int32_t n = std::bit_cast<int32_t>(shifted) - 0x4B400000;
  const float f = x - (shifted - 12582912.0f);
  // degree-6 least-squares fit of 2^f on [-0.5, 0.5] (max rel. error 1.8e-8)
  float p = 1.546974090160802e-4f;
  p = p * f + 1.3400441966950893e-3f;
  p = p * f + 9.61802527308464e-3f;
  p = p * f + 5.550327152013779e-2f;
  p = p * f + 2.4022650718688965e-1f;
  p = p * f + 6.931471824645996e-1f;
  p = p * f + 1.0f;
  return std::bit_cast<float>(std::bit_cast<int32_t>(p) + (n << 23));
}

#pragma omp declare simd notinbranch
inline float fast_exp(float x) { return fast_exp2(x * kLog2e); }

}  // namespace lct
