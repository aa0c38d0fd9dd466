// compute/gemm.h: bf16 rounding and both ways of a bf16 product against a float64
// reference, on every machine (the oneDNN kernel where the CPU has bf16 instructions).
//
// Tolerance, from the arithmetic: a bf16 product is exact products of bf16-rounded
// operands summed in fp32, so against the float64 sum of the same rounded operands each
// element may differ by at most gamma_K = K u / (1 - K u) (u = 2^-24, fp32 summation of
// K terms, any order) times sum_k |a_ik b_kj|, plus the rounding of alpha and of beta C.
// Against the unrounded operands the error is of order 2^-8 (bf16's unit roundoff)
// times that sum, so the test also checks that bf16 was really applied.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "compute/bf16_tiles.h"
#include "compute/gemm.h"

namespace lct::gemm_test {  // the file's own namespace: a unity build compiles test files together
namespace {

// bf16 products on `kernel` (the rounded one on OpenBLAS)
Arithmetic bf16_on(Bf16Kernel kernel) { return {Precision::bf16, Fp32Library::openblas, kernel}; }

TEST(Gemm, RoundsToNearestBf16TiesToEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  // bf16 has 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1)
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 1.0f + 0x1p-6f);  // halfway -> even
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-12f), 1.0f + 0x1p-7f);  // above halfway
  EXPECT_EQ(round_to_bf16(-3.0f), -3.0f);
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_TRUE(std::isinf(round_to_bf16(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::signaling_NaN())));
}

struct Problem {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
};

// max over elements of |C - ref| / bound, where ref and bound come from float64 sums of
// the operands (rounded to bf16 when `rounded`)
double worst_ratio(const Problem& p, const std::vector<float>& A, const std::vector<float>& B,
                   const std::vector<float>& C0, const std::vector<float>& C, bool rounded, double tolerance) {
  const auto a = [&](int64_t i, int64_t k) {
    const float x = p.ta ? A[size_t(k * p.lda + i)] : A[size_t(i * p.lda + k)];
    return double(rounded ? round_to_bf16(x) : x);
  };
  const auto b = [&](int64_t k, int64_t j) {
    const float x = p.tb ? B[size_t(j * p.ldb + k)] : B[size_t(k * p.ldb + j)];
    return double(rounded ? round_to_bf16(x) : x);
  };
  double worst = 0;
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < p.N; ++j) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < p.K; ++k) sum += a(i, k) * b(k, j), mag += std::abs(a(i, k) * b(k, j));
      const double c0 = C0[size_t(i * p.ldc + j)];
      const double ref = p.alpha * sum + p.beta * c0;
      const double bound = tolerance * (std::abs(p.alpha) * mag + std::abs(p.beta * c0)) + 1e-30;
      worst = std::max(worst, std::abs(double(C[size_t(i * p.ldc + j)]) - ref) / bound);
    }
  return worst;
}

std::vector<float> random_matrix(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// p's operands A and B, random (A drawn first)
struct Operands {
  std::vector<float> A, B;
};
Operands random_operands(const Problem& p, std::mt19937& rng) {
  std::vector<float> A = random_matrix((p.ta ? p.K : p.M) * p.lda, rng);
  std::vector<float> B = random_matrix((p.tb ? p.N : p.K) * p.ldb, rng);
  return {std::move(A), std::move(B)};
}

// gamma of the tolerance above for an fp32 sum of `terms` terms
double fp32_gamma(int64_t terms) {
  const double u = 0x1p-24;
  return double(terms) * u / (1 - double(terms) * u);
}

// The bf16 kernels this CPU runs: rounded everywhere, native where it has bf16 instructions
std::vector<Bf16Kernel> bf16_kernels() {
  std::vector<Bf16Kernel> kernels = {Bf16Kernel::rounded};
  if (bf16_support().instructions) kernels.push_back(Bf16Kernel::native);
  return kernels;
}

// C's padding beyond its N columns is C0's
void expect_padding_untouched(const Problem& p, const std::vector<float>& C0, const std::vector<float>& C) {
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = p.N; j < p.ldc; ++j) EXPECT_EQ(C[size_t(i * p.ldc + j)], C0[size_t(i * p.ldc + j)]);
}

TEST(Gemm, Bf16ProductsAreFp32SumsOfRoundedOperands) {
  const std::vector<Bf16Kernel> kernels = bf16_kernels();
  const std::vector<Problem> problems = {
      {false, true, 37, 29, 53, 53, 53, 29, 1.0f, 0.0f},    // linear forward: x W^T
      {false, false, 37, 53, 29, 29, 53, 53, 1.0f, 1.0f},   // dx += dout W
      {true, false, 29, 53, 37, 29, 53, 53, 1.0f, 1.0f},    // dW += dout^T x
      {true, true, 17, 21, 300, 17, 300, 25, 0.5f, 0.25f},  // padded C, scaled
      {false, false, 64, 64, 1, 1, 64, 64, 1.0f, 0.0f},
      {false, true, 443, 24, 24, 24, 24, 24, 1.0f, 0.0f},     // a small model's shapes
      {false, false, 443, 24, 32, 32, 24, 24, 1.0f, 1.0f},
      {true, false, 32, 24, 443, 32, 24, 24, 1.0f, 1.0f},
      {false, true, 443, 61, 24, 24, 24, 61, 1.0f, 0.0f},
  };
  std::mt19937 rng(7);
  // twice: the second time through, every shape's cached oneDNN primitive meets new data
  // at the same scratch addresses
  for (int round = 0; round < 2; ++round)
  for (const Bf16Kernel kernel : kernels)
    for (const Problem& p : problems) {
      const auto [A, B] = random_operands(p, rng);
      const std::vector<float> C0 = random_matrix(p.M * p.ldc, rng);
      std::vector<float> C = C0;
      gemm(bf16_on(kernel), p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.data(), p.lda, B.data(), p.ldb, p.beta, C.data(),
                p.ldc);
      const double gamma = fp32_gamma(p.K + 2);
      const char* name = kernel == Bf16Kernel::native ? "onednn" : "rounded_sgemm";
      EXPECT_LE(worst_ratio(p, A, B, C0, C, true, gamma), 1.0) << name << " M " << p.M << " K " << p.K;
      // and it is not the fp32 product: against unrounded operands it is off by bf16's
      // rounding, far beyond fp32's summation error
      EXPECT_GT(worst_ratio(p, A, B, C0, C, false, gamma), 8.0) << name << " M " << p.M << " K " << p.K;
      expect_padding_untouched(p, C0, C);
    }
}

TEST(Gemm, Fp32IsSgemmAndBf16DispatchFollowsTheCpu) {
  std::mt19937 rng(3);
  const Problem p{false, true, 19, 23, 31, 31, 31, 23, 1.0f, 0.0f};
  const std::vector<float> A = random_matrix(p.M * p.lda, rng), B = random_matrix(p.N * p.ldb, rng);
  std::vector<float> C(size_t(p.M * p.ldc)), C0 = C;
  gemm({}, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, C.data(), p.ldc);
  const double gamma = fp32_gamma(p.K);
  EXPECT_LE(worst_ratio(p, A, B, C0, C, false, gamma), 1.0);
  std::vector<float> D(C.size()), E(C.size());
  gemm({.precision = Precision::bf16}, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, D.data(), p.ldc);
  gemm(bf16_on(bf16_support().instructions ? Bf16Kernel::native : Bf16Kernel::rounded), p.ta, p.tb, p.M, p.N,
            p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, E.data(), p.ldc);
  EXPECT_EQ(D, E);
  EXPECT_FALSE(bf16_support().kernel.empty());
  if (!bf16_support().instructions) {
    EXPECT_THROW(gemm(bf16_on(Bf16Kernel::native), false, false, 1, 1, 1, 1.0f, A.data(), 1, B.data(), 1, 0.0f,
                           D.data(), 1),
                 std::runtime_error);
  }
}

// One row (M = 1: a decoding step) goes through OpenBLAS's matrix-vector product: every
// transpose, strided operands, alpha and beta, within the fp32 bound of a K-term sum; a
// NaN left in C does not come through beta = 0.
TEST(Gemm, Fp32OneRowIsAnFp32Product) {
  std::mt19937 rng(5);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const float beta : {0.0f, 0.5f}) {
        const int64_t N = 37, K = 29;
        const Problem p{ta, tb, 1, N, K, ta ? 3 : K + 2, tb ? K + 1 : N + 3, N, 1.5f, beta};
        const auto [A, B] = random_operands(p, rng);
        std::vector<float> C0 = random_matrix(N, rng);
        if (beta == 0.0f) C0[3] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> C = C0;
        gemm({}, ta, tb, 1, N, K, p.alpha, A.data(), p.lda, B.data(), p.ldb, beta, C.data(), p.ldc);
        if (beta == 0.0f) C0[3] = 0.0f;  // (the reference: beta C is nothing)
        const double gamma = fp32_gamma(K + 2);  // and alpha's and beta's roundings
        EXPECT_LE(worst_ratio(p, A, B, C0, C, false, gamma), 1.0) << "ta " << ta << " tb " << tb << " beta " << beta;
      }
}

// Operands stored as bf16 bits (a bf16 run's saved activations and weight copies) give
// the bits their fp32 originals give, since a bf16 product rounds those to the same
// values: both kernels, dense and strided, as A and as B; an fp32 product widens them,
// giving the product of the widened floats.
TEST(Gemm, Bf16StoredOperandsEqualTheirRoundedOriginals) {
  const std::vector<Bf16Kernel> kernels = bf16_kernels();
  const std::vector<Problem> problems = {
      {false, true, 37, 29, 53, 53, 53, 29, 1.0f, 0.0f},   // dense
      {true, false, 29, 53, 37, 31, 60, 53, 1.0f, 1.0f},   // strided A and B
      {false, false, 40, 24, 32, 32, 24, 24, 0.5f, 1.0f},
  };
  std::mt19937 rng(11);
  for (const Bf16Kernel kernel : kernels)
    for (const Problem& p : problems) {
      const auto [A, B] = random_operands(p, rng);
      std::vector<uint16_t> Ab(A.size()), Bb(B.size());
      std::vector<float> Aw(A.size()), Bw(B.size());
      for (size_t i = 0; i < A.size(); ++i) Ab[i] = bf16_bits(A[i]), Aw[i] = bf16_value(Ab[i]);
      for (size_t i = 0; i < B.size(); ++i) Bb[i] = bf16_bits(B[i]), Bw[i] = bf16_value(Bb[i]);
      const std::vector<float> C0 = random_matrix(p.M * p.ldc, rng);
      auto product = [&](Operand a, Operand b) {
        std::vector<float> C = C0;
        gemm(bf16_on(kernel), p.ta, p.tb, p.M, p.N, p.K, p.alpha, a, p.lda, b, p.ldb, p.beta, C.data(), p.ldc);
        return C;
      };
      const std::vector<float> from_fp32 = product(A.data(), B.data());
      EXPECT_EQ(product(Ab.data(), Bb.data()), from_fp32) << "M " << p.M;
      EXPECT_EQ(product(Ab.data(), B.data()), from_fp32) << "M " << p.M;
      EXPECT_EQ(product(A.data(), Bb.data()), from_fp32) << "M " << p.M;
      std::vector<float> widened = C0, stored = C0;
      gemm({}, p.ta, p.tb, p.M, p.N, p.K, p.alpha, Aw.data(), p.lda, Bw.data(), p.ldb, p.beta,
           widened.data(), p.ldc);
      gemm({}, p.ta, p.tb, p.M, p.N, p.K, p.alpha, Ab.data(), p.lda, Bb.data(), p.ldb, p.beta,
           stored.data(), p.ldc);
      const double gamma = fp32_gamma(p.K + 2);
      EXPECT_LE(worst_ratio(p, Aw, Bw, C0, stored, false, gamma), 1.0) << "M " << p.M;
      EXPECT_LE(worst_ratio(p, Aw, Bw, C0, widened, false, gamma), 1.0) << "M " << p.M;
    }
}

// gemm_to_bf16 (a product written as bf16 bits) is the fp32 sum rounded once: against
// the float64 sum of the rounded operands, each value within gamma_K of it (the fp32 sum)
// plus one rounding to bf16 (at most 2^-8 of its magnitude, bf16's unit roundoff), on both kernels,
// dense and strided, with ldc wider than N (only its N columns written).
TEST(Gemm, Bf16OutputIsTheFp32SumRoundedOnce) {
  const std::vector<Bf16Kernel> kernels = bf16_kernels();
  const std::vector<Problem> problems = {
      {false, true, 37, 29, 53, 53, 53, 31, 1.0f, 0.0f},
      {true, false, 29, 53, 37, 31, 60, 53, 1.0f, 0.0f},
  };
  std::mt19937 rng(12);
  for (const Bf16Kernel kernel : kernels)
    for (const Problem& p : problems) {
      const auto [A, B] = random_operands(p, rng);
      std::vector<uint16_t> C(size_t(p.M * p.ldc), 0x7fc1);  // a NaN marks columns not to write
      gemm_to_bf16(bf16_on(kernel), p.ta, p.tb, p.M, p.N, p.K, A.data(), p.lda, B.data(), p.ldb, C.data(), p.ldc);
      const double gamma = fp32_gamma(p.K + 2);
      double worst = 0;
      for (int64_t i = 0; i < p.M; ++i) {
        for (int64_t j = 0; j < p.N; ++j) {
          double exact = 0, bound = 0;
          for (int64_t k = 0; k < p.K; ++k) {
            const double a = round_to_bf16(p.ta ? A[size_t(k * p.lda + i)] : A[size_t(i * p.lda + k)]);
            const double b = round_to_bf16(p.tb ? B[size_t(j * p.ldb + k)] : B[size_t(k * p.ldb + j)]);
            exact += a * b;
            bound += std::fabs(a * b);
          }
          const double got = bf16_value(C[size_t(i * p.ldc + j)]);
          const double allowed = gamma * bound + 0x1p-8 * (std::fabs(exact) + gamma * bound);
          worst = std::max(worst, std::fabs(got - exact) / allowed);
        }
        for (int64_t j = p.N; j < p.ldc; ++j) EXPECT_EQ(C[size_t(i * p.ldc + j)], 0x7fc1) << "column " << j;
      }
      EXPECT_LE(worst, 1.0) << "M " << p.M << (kernel == Bf16Kernel::native ? " onednn" : " rounded_sgemm");
    }
}

// The attention kernel's AVX512-BF16 microkernel (compute/bf16_tiles.h): C = alpha A B
// (+ C) with A bf16 rows starting at any element and B as pair words, every register
// block shape and tail, against the float64 sum of the same bf16 values (gamma_K bound
// as above), and the packs against their definitions.
TEST(Bf16Tiles, MicrokernelIsFp32SumOfBf16Products) {
  if (!bf16_tiles::available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(11);
  struct Shape {
    int64_t M, N, kp, offset;
    bool accumulate;
    float alpha;
  };
  const std::vector<Shape> shapes = {{1, 1, 1, 0, false, 1.0f},    {6, 64, 32, 0, false, 1.0f},
                                     {7, 65, 33, 1, true, 0.5f},   {13, 17, 3, 1, true, 1.0f},
                                     {128, 256, 32, 0, false, 1.0f}, {256, 64, 64, 1, true, 0.125f},
                                     {64, 127, 129, 1, false, 2.0f}, {5, 48, 16, 0, true, 1.0f}};
  for (const Shape& sh : shapes) {
    const int64_t K = 2 * sh.kp, lda = K + 3, ldb = sh.N + 5, ldc = sh.N + 7;
    std::vector<uint16_t> A(size_t(sh.M * lda + 2));
    std::vector<float> Bf = random_matrix(K * ldb, rng), C0 = random_matrix(sh.M * ldc, rng);
    for (uint16_t& a : A) a = bf16_bits(std::normal_distribution<float>(0, 1)(rng));
    std::vector<uint16_t> Bh(Bf.size());
    for (size_t i = 0; i < Bf.size(); ++i) Bh[i] = bf16_bits(Bf[i]);
    std::vector<uint32_t> B(size_t(sh.kp * ldb));
    bf16_tiles::interleave_rows(Bh.data(), K, sh.N, ldb, B.data(), ldb);
    std::vector<uint32_t> Bfrom_float(B.size());
    bf16_tiles::interleave_rows(Bf.data(), K, sh.N, ldb, Bfrom_float.data(), ldb);
    for (int64_t k = 0; k < sh.kp; ++k)
      for (int64_t j = 0; j < sh.N; ++j) {
        const uint32_t w = B[size_t(k * ldb + j)];
        ASSERT_EQ(w, uint32_t(Bh[size_t(2 * k * ldb + j)]) | uint32_t(Bh[size_t((2 * k + 1) * ldb + j)]) << 16);
        ASSERT_EQ(Bfrom_float[size_t(k * ldb + j)], w);
      }
    std::vector<float> C = C0;
    const uint16_t* a0 = A.data() + sh.offset;
    bf16_tiles::gemm(sh.M, sh.N, sh.kp, sh.alpha, a0, lda, B.data(), ldb, sh.accumulate, C.data(), ldc);
    const auto value = [](uint16_t bits) {
      const uint32_t u = uint32_t(bits) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return double(f);
    };
    const double gamma = fp32_gamma(K + 2);
    for (int64_t i = 0; i < sh.M; ++i) {
      for (int64_t j = 0; j < sh.N; ++j) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = value(a0[i * lda + k]) * value(Bh[size_t(k * ldb + j)]);
          sum += x, mag += std::abs(x);
        }
        const double c0 = C0[size_t(i * ldc + j)];
        const double ref = sh.alpha * sum + (sh.accumulate ? c0 : 0.0);
        const double bound = gamma * (std::abs(sh.alpha) * mag + std::abs(c0)) + 1e-30;
        ASSERT_LE(std::abs(C[size_t(i * ldc + j)] - ref), bound) << "M " << sh.M << " N " << sh.N << " i " << i << " j " << j;
      }
      for (int64_t j = sh.N; j < ldc; ++j) ASSERT_EQ(C[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]);
    }
  }
}

TEST(Bf16Tiles, PacksMatchTheirDefinitions) {
  if (!bf16_tiles::available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(5);
  const int64_t rows = 37, cols = 70, lds = 75;
  const std::vector<float> x = random_matrix(rows * lds, rng);
  std::vector<uint16_t> h(x.size());
  bf16_tiles::to_bf16(x.data(), int64_t(x.size()), 0.5f, h.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], bf16_bits(x[i] * 0.5f)) << i;
  std::vector<uint32_t> t(size_t(cols / 2 * rows));
  bf16_tiles::transpose_pairs(h.data(), rows, cols, lds, t.data(), rows);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t k = 0; k < cols / 2; ++k)
      ASSERT_EQ(t[size_t(k * rows + j)],
                uint32_t(h[size_t(j * lds + 2 * k)]) | uint32_t(h[size_t(j * lds + 2 * k + 1)]) << 16);
  std::vector<uint32_t> w(size_t((rows + 1) / 2 * cols));
  bf16_tiles::interleave_rows(h.data(), rows, cols, lds, w.data(), cols);
  for (int64_t j = 0; j < cols; ++j)  // the odd last row pairs with zero
    ASSERT_EQ(w[size_t((rows / 2) * cols + j)], uint32_t(h[size_t((rows - 1) * lds + j)]));
}

// oneDNN's f32 matmul (train.fp32_gemm = onednn): an fp32 product, strided operands in
// place, against float64 at fp32's summation bound, and gemm(fp32) follows the library its
// Arithmetic names.
TEST(Gemm, OneDnnFp32IsAnFp32ProductAndTheLibraryIsTheArithmetics) {
  const std::vector<Problem> problems = {
      {false, true, 37, 29, 53, 60, 55, 31, 1.0f, 0.0f},    // padded lda, ldb, ldc
      {false, false, 37, 53, 29, 29, 53, 53, 1.0f, 1.0f},
      {true, false, 29, 53, 37, 31, 57, 53, 0.5f, 0.25f},
      {true, true, 17, 21, 300, 17, 300, 25, 1.0f, 1.0f},
  };
  std::mt19937 rng(13);
  for (int round = 0; round < 2; ++round)  // the second time through, cached primitives
    for (const Problem& p : problems) {
      const auto [A, B] = random_operands(p, rng);
      const std::vector<float> C0 = random_matrix(p.M * p.ldc, rng);
      std::vector<float> C = C0;
      gemm_fp32_onednn(p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.data(), p.lda, B.data(), p.ldb, p.beta, C.data(), p.ldc);
      const double gamma = fp32_gamma(p.K + 2);
      EXPECT_LE(worst_ratio(p, A, B, C0, C, false, gamma), 1.0) << "M " << p.M << " K " << p.K;
      expect_padding_untouched(p, C0, C);
    }
  const Problem p = problems[0];
  const std::vector<float> A = random_matrix(p.M * p.lda, rng), B = random_matrix(p.N * p.ldb, rng);
  std::vector<float> dnn(size_t(p.M * p.ldc)), blas = dnn, via_gemm = dnn;
  gemm_fp32_onednn(p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, dnn.data(), p.ldc);
  EXPECT_EQ(Arithmetic{}.fp32_library, Fp32Library::openblas);  // unless chosen
  gemm({}, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, blas.data(), p.ldc);
  gemm({.fp32_library = Fp32Library::onednn}, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb,
       0.0f, via_gemm.data(), p.ldc);
  EXPECT_EQ(via_gemm, dnn);
  EXPECT_THROW(gemm({.fp32_library = Fp32Library::automatic}, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda,
                    B.data(), p.ldb, 0.0f, via_gemm.data(), p.ldc),
               std::invalid_argument);
  EXPECT_EQ(parse_fp32_library("auto"), Fp32Library::automatic);
  EXPECT_STREQ(fp32_library_name(parse_fp32_library("onednn")), "onednn");
  EXPECT_THROW(parse_fp32_library("mkl"), std::invalid_argument);
}

TEST(Gemm, PrecisionNames) {
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_STREQ(precision_name(parse_precision("fp32")), "fp32");
  EXPECT_THROW(parse_precision("fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace lct::gemm_test
