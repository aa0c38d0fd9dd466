// Small vectorizable math helpers shared by the attention kernel and the fused
// model ops. They are branch-free scalar code so that loops calling them under
// `#pragma omp simd` compile to AVX-512/AVX2 without -ffast-math (the build keeps
// IEEE semantics elsewhere). Their clamps are selects: on AVX2 they vectorize only
// under -fno-trapping-math (CMakeLists.txt), which every lct build sets.
#pragma once

#include <bit>
#include <cstdint>

namespace lct {

// e^x with about 1 ulp error (Cody-Waite range reduction, degree-6 polynomial),
// the accuracy of std::exp at a fraction of its cost. Inputs below -87.3 return
// about 1e-38 rather than 0 (callers that need an exact 0 for masked entries write
// it themselves); inputs above 88.7 return about 3e38.
#pragma omp declare simd notinbranch
inline float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.7f ? 88.7f : x;
  // n = round(x / ln 2) by the 1.5*2^23 trick (round-to-nearest mode)
  const float shifted = x * 1.4426950408889634f + 12582912.0f;
  const int32_t n = std::bit_cast<int32_t>(shifted) - 0x4B400000;
  const float nf = shifted - 12582912.0f;
  // r = x - n ln2 in two steps: ln2_hi has 9 significant bits, so n * ln2_hi is exact
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  // least-squares fit of e^r on [-ln2/2, ln2/2], max rel. error 1.9e-8
  float p = 1.3948584673926234e-3f;
  p = p * r + 8.375131525099277e-3f;
  p = p * r + 4.1666217148303986e-2f;
  p = p * r + 1.6666415333747864e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return std::bit_cast<float>(std::bit_cast<int32_t>(p) + (n << 23));
}

// max(init, x[0], ..., x[n-1]). Written as `a > b ? a : b`, the form GCC maps to
// VMAXPS without -ffast-math (with std::max the reduction stays scalar: one dependent
// VMAXSS per element, which made the forward kernel's row maxima cost as much as its
// products). The maximum of floats is exact, so the lane order changes no bit.
inline float max_of(const float* x, int64_t n, float init) {
  float mx = init;
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = mx > x[i] ? mx : x[i];
  return mx;
}

}  // namespace lct
