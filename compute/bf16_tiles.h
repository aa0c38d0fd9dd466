// bf16 block products for the attention kernel on CPUs with AVX512-BF16.
//
// The attention tiles are small (M ~ 128, N <= 256, K <= 256) and change shape at
// every document edge, so a library call per tile (oneDNN creates memory objects per
// execute) costs as much as the product; this is a register-blocked AVX512-BF16
// microkernel (VDPBF16PS: fp32 += a0*b0 + a1*b1 per lane) behind one call.
//
// Operand layouts (bf16 values as their 16 bits, round to nearest even):
//   A  [M, 2*kp] row-major, row stride lda elements. Element pairs (2k, 2k+1) are read
//      as one 32-bit word, so A may start at any element.
//   B  [kp, N] "pair words", row stride ldb words: word (k, n) holds B[2k][n] in its
//      low and B[2k+1][n] in its high 16 bits (the K dimension interleaved by two).
// An odd K is padded by one zero pair half (zero in A or in B).
#pragma once

#include <cstdint>

namespace lct::bf16_tiles {

// The CPU runs AVX512-BF16 (with AVX512-BW/VL); checked once. Everything below except
// the scalar packs requires it.
bool available();

// C [M, N] = alpha * A B (+ C when accumulate), C row stride ldc floats.
void gemm(int64_t M, int64_t N, int64_t kp, float alpha, const uint16_t* A, int64_t lda,
          const uint32_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc);

// dst[i] = bf16(src[i] * factor), n values.
void to_bf16(const float* src, int64_t n, float factor, uint16_t* dst);

// Pair words of rows: dst[k * ldd + j] = (src row 2k, src row 2k+1)[j] for k < (rows+1)/2,
// j < cols; the missing high row of an odd count is zero. src bf16, row stride lds.
void interleave_rows(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* dst,
                     int64_t ldd);
// Same from fp32 rows (rounded to bf16 on the way).
void interleave_rows(const float* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* dst,
                     int64_t ldd);

// Transposed pair words: dst[k * ldd + j] = the word of elements (2k, 2k+1) of src row j,
// for j < rows, k < cols / 2 (cols even). src bf16 with row stride lds.
void transpose_pairs(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* dst,
                     int64_t ldd);

}  // namespace lct::bf16_tiles
