// Finite-difference gradient checks for every model op, each through the scalar
// loss sum(r * out) with a fixed random r.
#include <gtest/gtest.h>

#include <cstring>

#include <limits>

#include "model/ops.h"
#include "model/logit_scaling.h"
#include "model/rope.h"
#include "tests/test_util.h"

namespace lct::ops_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

// The rotation in place, row by row: the reference rope_split_qkv and its backward are
// checked against (sign +1 rotates, -1 applies the transpose rotation: for yarn, whose
// table is scaled, the transpose of the scaled rotation, the gradient of the forward)
void rope_rotate(float* x, const int32_t* positions, const RopeTable& rope, int64_t T, int64_t heads,
                 int64_t head_dim, float sign) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float* cs = rope.cos.data() + int64_t(positions[t]) * half;
    const float* sn = rope.sin.data() + int64_t(positions[t]) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // out_i = x_i cos - x_{i+half} sin ; out_{i+half} = x_{i+half} cos + x_i sin
        const float a = v[i], b = v[i + half], s = sign * sn[i];
        v[i] = a * cs[i] - b * s;
        v[i + half] = b * cs[i] + a * s;
      }
    }
  }
}
void rope_forward(float* x, const int32_t* positions, const RopeTable& rope, int64_t T, int64_t heads,
                  int64_t head_dim) {
  rope_rotate(x, positions, rope, T, heads, head_dim, 1.0f);
}
void rope_backward(float* dx, const int32_t* positions, const RopeTable& rope, int64_t T, int64_t heads,
                   int64_t head_dim) {
  rope_rotate(dx, positions, rope, T, heads, head_dim, -1.0f);
}

constexpr double kEps = 1e-2;     // FD step (ops are smooth; float evaluation)
constexpr double kTol = 2e-3;     // relative L2 error allowed between FD and analytic

TEST(Ops, MatmulGradientsMatchFiniteDifferences) {
  const int64_t T = 5, I = 7, O = 3;
  auto x = random_vector(T * I, 1), w = random_vector(O * I, 2), r = random_vector(T * O, 3);
  std::vector<float> out(static_cast<size_t>(T * O));
  auto loss = [&] {
    matmul_forward(out.data(), x.data(), w.data(), T, I, O);
    return dot(out, r);
  };
  std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f);
  matmul_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), T, I, O);
  EXPECT_LT(rel_error(pick(dx, all_indices(T * I)), finite_difference(x, loss, kEps, all_indices(T * I))), kTol);
  EXPECT_LT(rel_error(pick(dw, all_indices(O * I)), finite_difference(w, loss, kEps, all_indices(O * I))), kTol);
}

TEST(Ops, MatmulBackwardAccumulates) {
  const int64_t T = 2, I = 3, O = 2;
  auto x = random_vector(T * I, 1), w = random_vector(O * I, 2), g = random_vector(T * O, 3);
  std::vector<float> dx1(x.size(), 0.0f), dw1(w.size(), 0.0f), dx2(x.size(), 1.0f), dw2(w.size(), 1.0f);
  matmul_backward(dx1.data(), dw1.data(), g.data(), x.data(), w.data(), T, I, O);
  matmul_backward(dx2.data(), dw2.data(), g.data(), x.data(), w.data(), T, I, O);
  for (size_t i = 0; i < dx1.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], dx1[i] + 1.0f);
  for (size_t i = 0; i < dw1.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], dw1[i] + 1.0f);
}

// DxWrite::overwrite never reads dx (NaN in it would come through a beta-1 sum) and
// writes what accumulating into zeros writes, on every kernel; dw still accumulates
TEST(Ops, MatmulBackwardOverwriteWritesWhatAccumulatingIntoZerosDoes) {
  const std::vector<Arithmetic> kernels = {
      {Precision::fp32, Fp32Library::openblas, Bf16Kernel::automatic},
      {Precision::fp32, Fp32Library::onednn, Bf16Kernel::automatic},
      {Precision::bf16, Fp32Library::openblas, Bf16Kernel::rounded},
      {Precision::bf16, Fp32Library::openblas, Bf16Kernel::automatic}};
  for (const int64_t T : {int64_t(1), int64_t(37)}) {
    const int64_t I = 24, O = 18;
    auto x = random_vector(T * I, 1), w = random_vector(O * I, 2), g = random_vector(T * O, 3);
    for (const Arithmetic& arith : kernels) {
      std::vector<float> dx1(x.size(), 0.0f), dw1(w.size(), 0.5f);
      std::vector<float> dx2(x.size(), std::numeric_limits<float>::quiet_NaN()), dw2(w.size(), 0.5f);
      matmul_backward(dx1.data(), dw1.data(), g.data(), x.data(), w.data(), T, I, O, arith);
      matmul_backward(dx2.data(), dw2.data(), g.data(), x.data(), w.data(), T, I, O, arith,
                      DxWrite::overwrite);
      for (size_t i = 0; i < dx1.size(); ++i) EXPECT_EQ(dx2[i], dx1[i]) << "T " << T << " dx " << i;
      for (size_t i = 0; i < dw1.size(); ++i) EXPECT_EQ(dw2[i], dw1[i]) << "T " << T << " dw " << i;
    }
  }
}

TEST(Ops, EmbeddingGradientMatchesFiniteDifferences) {
  const int64_t T = 6, C = 4, V = 5;
  const std::vector<int32_t> tokens = {3, 1, 3, 0, 4, 3};  // repeated ids accumulate
  auto table = random_vector(V * C, 4), r = random_vector(T * C, 5);
  std::vector<float> out(static_cast<size_t>(T * C));
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), table.data(), T, C);
    return dot(out, r);
  };
  std::vector<float> d(table.size(), 0.0f);
  embedding_backward(d.data(), r.data(), tokens.data(), T, C);
  EXPECT_LT(rel_error(pick(d, all_indices(V * C)), finite_difference(table, loss, kEps, all_indices(V * C))), kTol);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(d[size_t(2 * C + c)], 0.0f);  // id 2 unused
}

TEST(Ops, RmsNormGradientsMatchFiniteDifferences) {
  const int64_t T = 4, C = 8;
  auto x = random_vector(T * C, 6), w = random_vector(C, 7), r = random_vector(T * C, 8);
  std::vector<float> out(static_cast<size_t>(T * C)), rstd(static_cast<size_t>(T));
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), T, C, 1e-5f);
    return dot(out, r);
  };
  loss();
  std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f);
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), T, C);
  EXPECT_LT(rel_error(pick(dx, all_indices(T * C)), finite_difference(x, loss, 1e-3, all_indices(T * C))), kTol);
  EXPECT_LT(rel_error(pick(dw, all_indices(C)), finite_difference(w, loss, kEps, all_indices(C))), kTol);
}

TEST(Ops, RmsNormForwardMatchesFormula) {
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 0.5f};
  std::vector<float> out(4), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, 4, 0.0f);
  const double r = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[size_t(i)], x[size_t(i)] * r * w[size_t(i)], 1e-6);
}

// The residual add fused with the norm (x += residual; out = rmsnorm(x)) gives the bits of
// the add and the norm as two passes, for fp32 and bf16 outputs, at the model's width and
// at widths that are no multiple of a vector.
TEST(Ops, AddRmsNormIsTheAddThenTheNorm) {
  for (const int64_t C : {256, 37}) {
    const int64_t T = 67;
    const auto x0 = random_vector(T * C, 11), res = random_vector(T * C, 12), w = random_vector(C, 13);
    std::vector<float> x_two = x0, x_one = x0, out_two(static_cast<size_t>(T * C)), out_one(static_cast<size_t>(T * C));
    std::vector<float> rstd_two(static_cast<size_t>(T)), rstd_one(static_cast<size_t>(T));
    for (size_t i = 0; i < x_two.size(); ++i) x_two[i] += res[i];
    rmsnorm_forward(out_two.data(), rstd_two.data(), x_two.data(), w.data(), T, C, 1e-5f);
    add_rmsnorm_forward(out_one.data(), rstd_one.data(), x_one.data(), res.data(), w.data(), T, C, 1e-5f);
    EXPECT_EQ(std::memcmp(x_one.data(), x_two.data(), x_one.size() * sizeof(float)), 0) << "C " << C;
    EXPECT_EQ(std::memcmp(out_one.data(), out_two.data(), out_one.size() * sizeof(float)), 0) << "C " << C;
    EXPECT_EQ(std::memcmp(rstd_one.data(), rstd_two.data(), rstd_one.size() * sizeof(float)), 0) << "C " << C;
    std::vector<uint16_t> b_two(static_cast<size_t>(T * C)), b_one(static_cast<size_t>(T * C));
    x_one = x0;
    rmsnorm_forward(b_two.data(), rstd_two.data(), x_two.data(), w.data(), T, C, 1e-5f);
    add_rmsnorm_forward(b_one.data(), rstd_one.data(), x_one.data(), res.data(), w.data(), T, C, 1e-5f);
    EXPECT_EQ(b_one, b_two) << "bf16, C " << C;
  }
}

// rope_backward is the gradient of sum(rope_forward(x) * r) (finite differences at x; x
// and r random from seeds x_seed and r_seed, a row per position). Returns x.
std::vector<float> expect_rope_gradient(const RopeTable& rope, const std::vector<int32_t>& pos, int64_t heads,
                                        int64_t hd, uint64_t x_seed, uint64_t r_seed) {
  const int64_t T = int64_t(pos.size()), n = T * heads * hd;
  auto x = random_vector(n, x_seed), r = random_vector(n, r_seed);
  auto loss = [&] {
    std::vector<float> out = x;
    rope_forward(out.data(), pos.data(), rope, T, heads, hd);
    return dot(out, r);
  };
  std::vector<float> dx = r;
  rope_backward(dx.data(), pos.data(), rope, T, heads, hd);
  EXPECT_LT(rel_error(pick(dx, all_indices(n)), finite_difference(x, loss, kEps, all_indices(n))), kTol);
  return x;
}

TEST(Ops, RopeGradientMatchesFiniteDifferencesAndHfConvention) {
  const int64_t T = 5, heads = 3, hd = 8;
  const std::vector<int32_t> pos = {0, 1, 2, 0, 7};
  const RopeTable rope = build_rope_table(16, hd, 10000.0);
  const std::vector<float> x = expect_rope_gradient(rope, pos, heads, hd, 9, 10);
  // HF rotate_half: out[i] = x[i] cos - x[i+hd/2] sin, angle = pos * theta^(-2i/hd)
  std::vector<float> y = x;
  rope_forward(y.data(), pos.data(), rope, T, heads, hd);
  const int64_t t = 4, h = 1, i = 2;
  const double angle = 7 * std::pow(10000.0, -2.0 * i / hd);
  const float* xv = x.data() + (t * heads + h) * hd;
  EXPECT_NEAR(y[size_t((t * heads + h) * hd + i)],
              xv[i] * std::cos(angle) - xv[i + hd / 2] * std::sin(angle), 1e-5);
  EXPECT_NEAR(y[size_t((t * heads + h) * hd + i + hd / 2)],
              xv[i + hd / 2] * std::cos(angle) + xv[i] * std::sin(angle), 1e-5);
  // position 0 is the identity
  for (int64_t d = 0; d < heads * hd; ++d) EXPECT_EQ(y[size_t(d)], x[size_t(d)]);
}

// RoPE scalings against their definitions (model/rope.h), and the yarn table's
// gradient (its rotation is scaled, so backward is the transpose, not the inverse).
TEST(Ops, RopeScalingsFollowTheirDefinitions) {
  const int64_t hd = 16, half = hd / 2;
  const double theta = 10000.0;
  RopeSpec none;
  const std::vector<double> base = rope_inv_freq(none, hd, 0);
  for (int64_t i = 0; i < half; ++i) EXPECT_DOUBLE_EQ(base[size_t(i)], std::pow(theta, -2.0 * double(i) / double(hd)));
  RopeSpec linear{theta, RopeScaling::linear, 4.0, 0};
  const std::vector<double> lin = rope_inv_freq(linear, hd, 0);
  for (int64_t i = 0; i < half; ++i) EXPECT_DOUBLE_EQ(lin[size_t(i)], base[size_t(i)] / 4.0);
  // dynamic: unchanged up to the trained length, then theta (s L / L0 - s + 1)^(hd/(hd-2))
  RopeSpec dynamic{theta, RopeScaling::dynamic, 2.0, 64};
  EXPECT_EQ(rope_effective_theta(dynamic, hd, 64), theta);
  EXPECT_DOUBLE_EQ(rope_effective_theta(dynamic, hd, 256), theta * std::pow(2.0 * 4.0 - 1.0, 16.0 / 14.0));
  // yarn over L0 = 4096 with hd 16: pair i turns 4096 theta^(-2i/16) / 2pi times, more than
  // 32 for i <= 1 (kept), fewer than 1 for i >= 4 (divided by s), a ramp in between
  RopeSpec yarn{theta, RopeScaling::yarn, 8.0, 4096};
  const std::vector<double> y = rope_inv_freq(yarn, hd, 0);
  for (int64_t i = 0; i < half; ++i) {
    const double turns = 4096.0 * base[size_t(i)] / (2.0 * std::acos(-1.0));
    if (turns > 32.0) {
      EXPECT_DOUBLE_EQ(y[size_t(i)], base[size_t(i)]) << i;
    }
    if (turns < 1.0) {
      EXPECT_DOUBLE_EQ(y[size_t(i)], base[size_t(i)] / 8.0) << i;
    }
    EXPECT_LE(y[size_t(i)], base[size_t(i)]);
    EXPECT_GE(y[size_t(i)], base[size_t(i)] / 8.0 * (1 - 1e-15));
  }
  // the ramp's ends as the YaRN reference (and Hugging Face) take them: over L0 = 65536,
  // 32 turns at pair 5.03 (rounded down: 5) and 1 turn at 8.03 (rounded up: 9, kept
  // although beyond the last pair, 7, since the clamp is to hd - 1): pair 7 is halfway
  RopeSpec long_yarn{theta, RopeScaling::yarn, 8.0, 65536};
  const std::vector<double> ly = rope_inv_freq(long_yarn, hd, 0);
  EXPECT_DOUBLE_EQ(ly[7], base[7] * (1.0 - 0.5) + base[7] / 8.0 * 0.5);
  EXPECT_DOUBLE_EQ(ly[5], base[5]);
  const RopeTable t = build_rope_table(32, hd, yarn, 0);
  const double m = 0.1 * std::log(8.0) + 1.0;
  for (int64_t p = 0; p < 32; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double c = t.cos[size_t(p * half + i)], sn = t.sin[size_t(p * half + i)];
      EXPECT_NEAR(c * c + sn * sn, m * m, 1e-5);
      EXPECT_NEAR(c, m * std::cos(double(p) * y[size_t(i)]), 1e-6);
    }
  expect_rope_gradient(t, {0, 3, 17, 31}, 2, hd, 21, 22);
}

TEST(Ops, SwigluGradientsMatchFiniteDifferences) {
  // the fused layout: row t holds gate in [0, I) and up in [I, 2I)
  const int64_t T = 3, I = 8;
  auto gate_up = random_vector(T * 2 * I, 11, 2.0), r = random_vector(T * I, 13);
  std::vector<float> out(static_cast<size_t>(T * I));
  auto loss = [&] {
    swiglu_forward(out.data(), gate_up.data(), T, I);
    return dot(out, r);
  };
  std::vector<float> d(static_cast<size_t>(T * 2 * I));
  swiglu_backward(d.data(), r.data(), gate_up.data(), T, I);
  EXPECT_LT(rel_error(pick(d, all_indices(T * 2 * I)), finite_difference(gate_up, loss, 1e-3, all_indices(T * 2 * I))),
            kTol);
  // bf16: the same arithmetic on the stored bf16 values, each output rounded once
  std::vector<uint16_t> gu16(gate_up.size()), out16(out.size()), d16(d.size());
  to_bf16_bits(gate_up.data(), int64_t(gate_up.size()), gu16.data());
  std::vector<float> rounded(gate_up.size());
  from_bf16_bits(gu16.data(), int64_t(gu16.size()), rounded.data());
  swiglu_forward(out.data(), rounded.data(), T, I);
  swiglu_backward(d.data(), r.data(), rounded.data(), T, I);
  swiglu_forward(out16.data(), gu16.data(), T, I);
  swiglu_backward(d16.data(), r.data(), gu16.data(), T, I);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out16[i], bf16_bits(out[i])) << i;
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d16[i], bf16_bits(d[i])) << i;
}

TEST(Ops, RopeSplitOfTheFusedProductAndItsGradient) {
  // rope_split_qkv is the fused Q/K/V rows split and rotated as rope_forward rotates them
  // in place, and rope_join_qkv_grad its gradient (finite differences), with and without
  // q's rotation (DCA rotates q in its kernel) and with and without the per-row query
  // factor of attention.logit_scaling
  const int64_t T = 3, H = 2, KV = 1, hd = 8, qdim = H * hd, kvdim = KV * hd, width = qdim + 2 * kvdim;
  const RopeTable table = build_rope_table(64, hd, 10000.0);
  const std::vector<int32_t> pos = {0, 5, 41}, kpos = {7, 2, 63};
  const std::vector<float> factors = {0.25f, 1.5f, 0.8f};
  for (const bool rotate_q : {true, false})
    for (const bool scaled : {false, true}) {
      auto qkv = random_vector(T * width, 31), rq = random_vector(T * qdim, 32), rk = random_vector(T * kvdim, 33),
           rv = random_vector(T * kvdim, 34);
      std::vector<float> q(size_t(T * qdim)), k(size_t(T * kvdim)), v(size_t(T * kvdim));
      const int32_t* qp = rotate_q ? pos.data() : nullptr;
      const float* qs = scaled ? factors.data() : nullptr;
      rope_split_qkv(q.data(), k.data(), v.data(), qkv.data(), qp, qs, kpos.data(), table, T, H, KV, hd);
      std::vector<float> q_ref(size_t(T * qdim)), k_ref(size_t(T * kvdim));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < qdim; ++i)
          q_ref[size_t(t * qdim + i)] = qkv[size_t(t * width + i)] * (scaled ? factors[size_t(t)] : 1.0f);
        std::copy_n(qkv.begin() + t * width + qdim, kvdim, k_ref.begin() + t * kvdim);
        for (int64_t i = 0; i < kvdim; ++i) EXPECT_EQ(v[size_t(t * kvdim + i)], qkv[size_t(t * width + qdim + kvdim + i)]);
      }
      if (rotate_q) rope_forward(q_ref.data(), pos.data(), table, T, H, hd);
      rope_forward(k_ref.data(), kpos.data(), table, T, KV, hd);
      EXPECT_EQ(q, q_ref);
      EXPECT_EQ(k, k_ref);
      auto loss = [&] {
        rope_split_qkv(q.data(), k.data(), v.data(), qkv.data(), qp, qs, kpos.data(), table, T, H, KV, hd);
        return dot(q, rq) + dot(k, rk) + dot(v, rv);
      };
      std::vector<float> d(size_t(T * width));
      rope_join_qkv_grad(d.data(), rq.data(), rk.data(), rv.data(), qp, qs, kpos.data(), table, T, H, KV, hd);
      EXPECT_LT(rel_error(pick(d, all_indices(T * width)), finite_difference(qkv, loss, kEps, all_indices(T * width))),
                kTol);
      std::vector<uint16_t> d16(d.size());
      rope_join_qkv_grad(d16.data(), rq.data(), rk.data(), rv.data(), qp, qs, kpos.data(), table, T, H, KV, hd);
      for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d16[i], bf16_bits(d[i])) << i;
    }
}

TEST(Ops, LogitScalingFactors) {
  // ln(n) / ln(L) with n = position + 1; logn_beyond clamps it below at 1; none is 1
  const LogitScaling logn{LogitScalingKind::logn, 512}, beyond{LogitScalingKind::logn_beyond, 512}, none{};
  EXPECT_EQ(logit_scale(none, 4095), 1.0f);
  EXPECT_EQ(logit_scale(logn, 0), 0.0f);
  EXPECT_EQ(logit_scale(logn, 511), 1.0f);
  EXPECT_EQ(logit_scale(logn, 4095), float(std::log(4096.0) / std::log(512.0)));  // 4/3
  EXPECT_NEAR(logit_scale(logn, 4095), 4.0f / 3.0f, 1e-6f);
  EXPECT_NEAR(logit_scale(logn, 15), 4.0f / 9.0f, 1e-6f);
  EXPECT_EQ(logit_scale(beyond, 15), 1.0f);
  EXPECT_EQ(logit_scale(beyond, 4095), logit_scale(logn, 4095));
}

TEST(Ops, CrossEntropyGradientMatchesFiniteDifferences) {
  const int64_t n = 4, V = 9;
  const std::vector<int32_t> targets = {2, -1, 8, 0};  // row 1 has no target
  auto logits = random_vector(n * V, 14, 2.0);
  const float scale = 0.25f;
  auto loss = [&] {
    std::vector<float> z = logits;
    CrossEntropyStats s;
    cross_entropy_forward_backward(z.data(), targets.data(), nullptr, n, V, false, 1.0f, s);
    return scale * s.loss_sum;
  };
  std::vector<float> d = logits;
  CrossEntropyStats s;
  cross_entropy_forward_backward(d.data(), targets.data(), nullptr, n, V, true, scale, s);
  EXPECT_EQ(s.targets, 3);
  EXPECT_LT(rel_error(pick(d, all_indices(n * V)), finite_difference(logits, loss, 1e-3, all_indices(n * V))), kTol);
  for (int64_t v = 0; v < V; ++v) EXPECT_EQ(d[size_t(V + v)], 0.0f);  // no-target row
  // value: -log softmax(z)[y]
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[size_t(v)]));
  const double expected_row0 = std::log(sum) - logits[2];
  CrossEntropyStats one;
  std::vector<float> z(logits.begin(), logits.begin() + V);
  cross_entropy_forward_backward(z.data(), targets.data(), nullptr, 1, V, false, 1.0f, one);
  EXPECT_NEAR(one.loss_sum, expected_row0, 1e-5);
}

}  // namespace
}  // namespace lct::ops_test
