#include "src/cli/bench_loops.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "compute/bf16_tiles.h"

namespace lct {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

volatile double g_fma_sink = 0.0;

}  // namespace

double fma_loop(int64_t iterations) {
#if defined(__AVX512F__)
  using Vec = __m512;
  constexpr int kLanes = 16;
  auto set1 = [](float x) { return _mm512_set1_ps(x); };
  auto fma = [](Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); };
  auto lane0 = [](Vec v) {  // (GCC 12's cast/extract intrinsics warn spuriously)
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    return lanes[0];
  };
#elif defined(__AVX2__) && defined(__FMA__)
  using Vec = __m256;
  constexpr int kLanes = 8;
  auto set1 = [](float x) { return _mm256_set1_ps(x); };
  auto fma = [](Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); };
  auto lane0 = [](Vec v) { return _mm256_cvtss_f32(v); };
#else
  using Vec = float;
  constexpr int kLanes = 1;
  auto set1 = [](float x) { return x; };
  auto fma = [](Vec a, Vec b, Vec c) { return a * b + c; };
  auto lane0 = [](Vec v) { return v; };
#endif
  constexpr int kChains = 12;
  double total = 0.0;
  const auto t0 = Clock::now();
#pragma omp parallel reduction(+ : total)
  {
    Vec acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = set1(1.0f + 0.001f * float(c));
    const Vec mul = set1(0.999999f), add = set1(1e-7f);
    for (int64_t i = 0; i < iterations; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], mul, add);
    float sink = 0.0f;
    for (int c = 0; c < kChains; ++c) sink += lane0(acc[c]);
    total += sink * 1e-30;  // keeps the chains alive
  }
  const double s = seconds_since(t0);
  g_fma_sink = total;  // the chains' results are used, so the loop cannot be dropped
  const double flops = 2.0 * kLanes * kChains * double(iterations) * omp_get_max_threads();
  return flops / s / 1e9;
}

namespace {
volatile double g_bf16_sink = 0.0;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) double bf16_chains(int64_t iterations) {
  constexpr int kChains = 12;
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * float(c));
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
    for (int64_t i = 0; i < iterations; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    alignas(64) float lanes[16];
    float sink = 0.0f;
    for (int c = 0; c < kChains; ++c) {
      _mm512_store_ps(lanes, acc[c]);
      sink += lanes[0];
    }
    total += sink * 1e-30;
  }
  return total;
}
}  // namespace

double bf16_dot_loop(int64_t iterations) {
  if (!bf16_tiles::available()) return 0.0;
  const auto t0 = Clock::now();
  g_bf16_sink = bf16_chains(iterations);
  const double s = seconds_since(t0);
  const double flops = 2.0 * 32 * 12 * double(iterations) * omp_get_max_threads();
  return flops / s / 1e9;
}

StreamRates stream_rates(int64_t array_bytes, int passes) {
  const int64_t n = array_bytes / int64_t(sizeof(float));
  const size_t count = size_t(n);
  std::vector<float> a(count), b(count), c(count);  // (value-initialized: pages mapped)
  const float scalar = 3.0f;
  const auto copy = [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) c[size_t(i)] = a[size_t(i)];
  };
  const auto triad = [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[size_t(i)] = b[size_t(i)] + scalar * c[size_t(i)];
  };
  const auto best_seconds = [&](const auto& pass) {
    pass();  // the threads' first touch of their halves
    double best = 1e300;
    for (int p = 0; p < std::max(1, passes); ++p) {
      const auto t0 = Clock::now();
      pass();
      best = std::min(best, seconds_since(t0));
    }
    return best;
  };
  StreamRates r;
  r.array_bytes = n * int64_t(sizeof(float));
  r.copy_gbps = 2.0 * double(r.array_bytes) / best_seconds(copy) / 1e9;
  r.triad_gbps = 3.0 * double(r.array_bytes) / best_seconds(triad) / 1e9;
  g_fma_sink = double(a[size_t(n / 2)]);  // the arrays' values are used
  return r;
}

}  // namespace lct
