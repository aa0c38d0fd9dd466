// attention/gemm.h: bf16 rounding and both ways of a bf16 product against a float64
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
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attention/gemm.h"

namespace lct {
namespace {

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

TEST(Gemm, Bf16ProductsAreFp32SumsOfRoundedOperands) {
  std::vector<Bf16Kernel> kernels = {Bf16Kernel::rounded_sgemm};
  if (bf16_support().instructions) kernels.push_back(Bf16Kernel::onednn);
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
      const std::vector<float> A = random_matrix((p.ta ? p.K : p.M) * p.lda, rng);
      const std::vector<float> B = random_matrix((p.tb ? p.N : p.K) * p.ldb, rng);
      const std::vector<float> C0 = random_matrix(p.M * p.ldc, rng);
      std::vector<float> C = C0;
      gemm_bf16(kernel, p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.data(), p.lda, B.data(), p.ldb, p.beta, C.data(),
                p.ldc);
      const double u = 0x1p-24, gamma = double(p.K + 2) * u / (1 - double(p.K + 2) * u);
      const char* name = kernel == Bf16Kernel::onednn ? "onednn" : "rounded_sgemm";
      EXPECT_LE(worst_ratio(p, A, B, C0, C, true, gamma), 1.0) << name << " M " << p.M << " K " << p.K;
      // and it is not the fp32 product: against unrounded operands it is off by bf16's
      // rounding, far beyond fp32's summation error
      EXPECT_GT(worst_ratio(p, A, B, C0, C, false, gamma), 8.0) << name << " M " << p.M << " K " << p.K;
      // the padding of C beyond N is untouched
      for (int64_t i = 0; i < p.M; ++i) {
        for (int64_t j = p.N; j < p.ldc; ++j) EXPECT_EQ(C[size_t(i * p.ldc + j)], C0[size_t(i * p.ldc + j)]);
      }
    }
}

TEST(Gemm, Fp32IsSgemmAndBf16DispatchFollowsTheCpu) {
  std::mt19937 rng(3);
  const Problem p{false, true, 19, 23, 31, 31, 31, 23, 1.0f, 0.0f};
  const std::vector<float> A = random_matrix(p.M * p.lda, rng), B = random_matrix(p.N * p.ldb, rng);
  std::vector<float> C(size_t(p.M * p.ldc)), C0 = C;
  gemm(Precision::fp32, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, C.data(), p.ldc);
  const double u = 0x1p-24, gamma = double(p.K) * u / (1 - double(p.K) * u);
  EXPECT_LE(worst_ratio(p, A, B, C0, C, false, gamma), 1.0);
  std::vector<float> D(C.size()), E(C.size());
  gemm(Precision::bf16, p.ta, p.tb, p.M, p.N, p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, D.data(), p.ldc);
  gemm_bf16(bf16_support().instructions ? Bf16Kernel::onednn : Bf16Kernel::rounded_sgemm, p.ta, p.tb, p.M, p.N,
            p.K, 1.0f, A.data(), p.lda, B.data(), p.ldb, 0.0f, E.data(), p.ldc);
  EXPECT_EQ(D, E);
  EXPECT_FALSE(bf16_support().kernel.empty());
  EXPECT_FALSE(bf16_support().note.empty());
  if (!bf16_support().instructions)
    EXPECT_THROW(gemm_bf16(Bf16Kernel::onednn, false, false, 1, 1, 1, 1.0f, A.data(), 1, B.data(), 1, 0.0f,
                           D.data(), 1),
                 std::runtime_error);
}

TEST(Gemm, PrecisionNames) {
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_STREQ(precision_name(parse_precision("fp32")), "fp32");
  EXPECT_THROW(parse_precision("fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace lct
