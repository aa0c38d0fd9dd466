#include "compute/bf16_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "compute/gemm.h"

// Functions that use AVX512-BF16 are compiled for it one by one; the rest of lct stays
// portable and calls them only after available() said yes.
#define LCT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace lct::bf16_tiles {

bool available() {
  static const bool yes = (__builtin_cpu_init(), true) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return yes;
}

namespace {

constexpr int kRows = 6;     // rows of A per register block
constexpr int kVectors = 4;  // 16-float vectors of C per register block (64 columns)

inline uint32_t load_word(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// C = alpha x (+ C) on the lanes of m. A function of its own, not a lambda in block():
// a lambda does not inherit its enclosing function's target attribute, so where the
// compiler's own target lacks AVX-512 (-march=native on AMD Zen 3) it could not be built.
LCT_BF16_TARGET inline void store_scaled(float* cp, __m512 x, __m512 alpha, bool accumulate, __mmask16 m) {
  x = _mm512_mul_ps(x, alpha);
  if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, cp));
  _mm512_mask_storeu_ps(cp, m, x);
}

// One register block: R rows x V vectors of C, the last vector masked to `tail` lanes.
// The 24 accumulators are named variables (an array of them would live on the stack:
// GCC does not split aggregates this large into registers).
template <int R, int V>
LCT_BF16_TARGET void block(int64_t kp, float alpha, const uint16_t* A, int64_t lda,
                           const uint32_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                           __mmask16 tail) {
#define LCT_ACC_ROW(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0;
  LCT_ACC_ROW(0) LCT_ACC_ROW(1) LCT_ACC_ROW(2) LCT_ACC_ROW(3) LCT_ACC_ROW(4) LCT_ACC_ROW(5)
#undef LCT_ACC_ROW
  const __mmask16 m0 = V == 1 ? tail : 0xffff, m1 = V == 2 ? tail : 0xffff, m2 = V == 3 ? tail : 0xffff,
                  m3 = V == 4 ? tail : 0xffff;
  for (int64_t k = 0; k < kp; ++k) {
    const uint32_t* bk = B + k * ldb;
    const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(m0, bk);
    const __m512bh b1 = V > 1 ? (__m512bh)_mm512_maskz_loadu_epi32(m1, bk + 16) : b0;
    const __m512bh b2 = V > 2 ? (__m512bh)_mm512_maskz_loadu_epi32(m2, bk + 32) : b0;
    const __m512bh b3 = V > 3 ? (__m512bh)_mm512_maskz_loadu_epi32(m3, bk + 48) : b0;
    const uint16_t* ak = A + 2 * k;
#define LCT_ROW(r)                                                                  \
  if constexpr (R > r) {                                                            \
    const __m512bh a = (__m512bh)_mm512_set1_epi32(int(load_word(ak + r * lda))); \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, a, b0);                                     \
    if constexpr (V > 1) c##r##1 = _mm512_dpbf16_ps(c##r##1, a, b1);                \
    if constexpr (V > 2) c##r##2 = _mm512_dpbf16_ps(c##r##2, a, b2);                \
    if constexpr (V > 3) c##r##3 = _mm512_dpbf16_ps(c##r##3, a, b3);                \
  }
    LCT_ROW(0) LCT_ROW(1) LCT_ROW(2) LCT_ROW(3) LCT_ROW(4) LCT_ROW(5)
#undef LCT_ROW
  }
  const __m512 va = _mm512_set1_ps(alpha);
#define LCT_STORE(r)                                                                 \
  if constexpr (R > r) {                                                             \
    store_scaled(C + r * ldc, c##r##0, va, accumulate, m0);                          \
    if constexpr (V > 1) store_scaled(C + r * ldc + 16, c##r##1, va, accumulate, m1); \
    if constexpr (V > 2) store_scaled(C + r * ldc + 32, c##r##2, va, accumulate, m2); \
    if constexpr (V > 3) store_scaled(C + r * ldc + 48, c##r##3, va, accumulate, m3); \
  }
  LCT_STORE(0) LCT_STORE(1) LCT_STORE(2) LCT_STORE(3) LCT_STORE(4) LCT_STORE(5)
#undef LCT_STORE
}

using BlockFn = void (*)(int64_t, float, const uint16_t*, int64_t, const uint32_t*, int64_t, bool,
                         float*, int64_t, __mmask16);

template <int R, int... Vs>
constexpr auto row_of_blocks(std::integer_sequence<int, Vs...>) {
  return std::array<BlockFn, sizeof...(Vs)>{&block<R, Vs + 1>...};
}
template <int... Rs>
constexpr auto table_of_blocks(std::integer_sequence<int, Rs...>) {
  return std::array<std::array<BlockFn, kVectors>, sizeof...(Rs)>{
      row_of_blocks<Rs + 1>(std::make_integer_sequence<int, kVectors>{})...};
}
// kBlocks[R - 1][V - 1]
constexpr auto kBlocks = table_of_blocks(std::make_integer_sequence<int, kRows>{});

}  // namespace

void gemm(int64_t M, int64_t N, int64_t kp, float alpha, const uint16_t* A, int64_t lda,
          const uint32_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  for (int64_t n0 = 0; n0 < N; n0 += 16 * kVectors) {
    const int64_t cols = std::min<int64_t>(16 * kVectors, N - n0);
    const int V = int((cols + 15) / 16);
    const int last = int(cols - 16 * (V - 1));
    const __mmask16 tail = __mmask16((1u << last) - 1u);
    for (int64_t m0 = 0; m0 < M; m0 += kRows) {
      const int R = int(std::min<int64_t>(kRows, M - m0));
      kBlocks[R - 1][V - 1](kp, alpha, A + m0 * lda, lda, B + n0, ldb, accumulate,
                            C + m0 * ldc + n0, ldc, tail);
    }
  }
}

LCT_BF16_TARGET void to_bf16(const float* src, int64_t n, float factor, uint16_t* dst) {
  const __m512 f = _mm512_set1_ps(factor);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(src + i), f);
    const __m512 hi = _mm512_mul_ps(_mm512_loadu_ps(src + i + 16), f);
    _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; i < n; ++i) dst[i] = bf16_bits(src[i] * factor);
}

LCT_BF16_TARGET void interleave_rows(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds,
                                     uint32_t* dst, int64_t ldd) {
  for (int64_t k = 0; 2 * k < rows; ++k) {
    const uint16_t* lo = src + 2 * k * lds;
    const uint16_t* hi = 2 * k + 1 < rows ? lo + lds : nullptr;
    uint32_t* d = dst + k * ldd;
    int64_t j = 0;
    if (hi)
      for (; j + 16 <= cols; j += 16) {
        const __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(lo + j)));
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(hi + j)));
        _mm512_storeu_si512(d + j, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
      }
    for (; j < cols; ++j) d[j] = uint32_t(lo[j]) | (hi ? uint32_t(hi[j]) << 16 : 0u);
  }
}

LCT_BF16_TARGET void interleave_rows(const float* src, int64_t rows, int64_t cols, int64_t lds,
                                     uint32_t* dst, int64_t ldd) {
  for (int64_t k = 0; 2 * k < rows; ++k) {
    const float* lo = src + 2 * k * lds;
    const float* hi = 2 * k + 1 < rows ? lo + lds : nullptr;
    uint32_t* d = dst + k * ldd;
    int64_t j = 0;
    if (hi) {
      // cvtne2ps gives [bf16(lo) x16 | bf16(hi) x16]; interleave the halves word-wise
      const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                             24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                             16, 0);
      for (; j + 16 <= cols; j += 16) {
        const __m512i both =
            (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(hi + j), _mm512_loadu_ps(lo + j));
        _mm512_storeu_si512(d + j, _mm512_permutexvar_epi16(order, both));
      }
    }
    for (; j < cols; ++j)
      d[j] = uint32_t(bf16_bits(lo[j])) | (hi ? uint32_t(bf16_bits(hi[j])) << 16 : 0u);
  }
}

void transpose_pairs(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* dst,
                     int64_t ldd) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t k = 0; 2 * k < cols; ++k) dst[k * ldd + j] = load_word(src + j * lds + 2 * k);
}

}  // namespace lct::bf16_tiles
