// Dual Chunk Attention through the core-attention kernel, against references built
// independently from the explicit relative-position matrix (dca.md §1.2), in float64.
//
// Kernel contract (core_attention.h): Q before RoPE, K rotated by t mod s; dQ is for
// the pre-RoPE Q and dK for the rotated K.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "attention/core_attention.h"
#include "tests/test_util.h"

namespace lct::dca_test {  // the file's own namespace: a unity build compiles test files together
namespace {

// The query position a query at offset i uses against a key at offset j <= i
int32_t dca_query_position(int64_t i, int64_t j, const DcaParams& dca) {
  const int64_t s = dca.chunk_len();
  return dca_query_position_at_distance(i, i / s - j / s, dca);
}
using namespace test;

constexpr double kTheta = 10000.0;

struct DcaProblem {
  int H, KV, hd;
  std::vector<int32_t> cu;  // document boundaries
  int C, w;                 // chunk_size, local_size
  float mscale = 1.0f;
  Precision precision = Precision::fp32;
  Bf16Kernel bf16_kernel = Bf16Kernel::automatic;
  int64_t T() const { return cu.back(); }
  int s() const { return C - w; }
};

// The relative position DCA uses for query offset i and key offset j <= i, written
// from the part table of dca.md §1.2 (not from the kernel's helpers).
int relative_position(int64_t i, int64_t j, int s, int C) {
  const int64_t delta = i / s - j / s;
  if (delta == 0) return int(i - j);
  if (delta == 1) return int(std::min<int64_t>(i % s + s, C) - j % s);
  return int(std::min<int64_t>(2 * s - 1, C) - j % s);
}

// x[hd] rotated by RoPE position p (HF rotate_half), in double.
void rotate(const double* x, double* y, int hd, double p, bool transpose = false) {
  const int half = hd / 2;
  for (int c = 0; c < half; ++c) {
    const double a = p * std::pow(kTheta, -2.0 * c / hd);
    const double cs = std::cos(a), sn = transpose ? -std::sin(a) : std::sin(a);
    y[c] = x[c] * cs - x[c + half] * sn;
    y[c + half] = x[c + half] * cs + x[c] * sn;
  }
}

struct Tables {
  std::vector<float> cos, sin;
  int64_t positions;
};
Tables rope_tables(int64_t positions, int hd) {
  Tables t;
  t.positions = positions;
  const int half = hd / 2;
  t.cos.resize(size_t(positions * half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < positions; ++p)
    for (int c = 0; c < half; ++c) {
      const double a = double(p) * std::pow(kTheta, -2.0 * c / hd);
      t.cos[size_t(p * half + c)] = float(std::cos(a));
      t.sin[size_t(p * half + c)] = float(std::sin(a));
    }
  return t;
}

AttentionParams dca_params(const DcaProblem& pr, const Tables& tables) {
  AttentionParams p;
  p.kernel = AttentionKernel::dca;
  p.num_heads = pr.H;
  p.num_kv_heads = pr.KV;
  p.head_dim = pr.hd;
  p.scale = float(1.0 / std::sqrt(double(pr.hd)));
  p.dca.chunk_size = pr.C;
  p.dca.local_size = pr.w;
  p.dca.mscale = pr.mscale;
  p.dca.rope_cos = tables.cos.data();
  p.dca.rope_sin = tables.sin.data();
  p.dca.rope_positions = tables.positions;
  p.precision = pr.precision;
  p.bf16_kernel = pr.bf16_kernel;
  return p;
}

struct DcaRun {
  std::vector<float> q, k_pre, k, v, dout, o, lse, dq, dk, dv;
};

// Random pre-RoPE Q and K; the kernel gets K rotated by in-document offset mod s.
DcaRun make_inputs(const DcaProblem& pr, uint64_t seed) {
  DcaRun r;
  const int64_t T = pr.T();
  r.q = random_vector(T * pr.H * pr.hd, seed);
  r.k_pre = random_vector(T * pr.KV * pr.hd, seed + 1);
  r.v = random_vector(T * pr.KV * pr.hd, seed + 2);
  r.dout = random_vector(T * pr.H * pr.hd, seed + 3);
  r.k.resize(r.k_pre.size());
  std::vector<double> x(static_cast<size_t>(pr.hd)), y(static_cast<size_t>(pr.hd));
  for (size_t d = 0; d + 1 < pr.cu.size(); ++d)
    for (int64_t t = pr.cu[d]; t < pr.cu[d + 1]; ++t)
      for (int g = 0; g < pr.KV; ++g) {
        const size_t at = size_t((t * pr.KV + g) * pr.hd);
        for (int c = 0; c < pr.hd; ++c) x[size_t(c)] = r.k_pre[at + size_t(c)];
        rotate(x.data(), y.data(), pr.hd, double((t - pr.cu[d]) % pr.s()));
        for (int c = 0; c < pr.hd; ++c) r.k[at + size_t(c)] = float(y[size_t(c)]);
      }
  return r;
}

void run_kernel(const DcaProblem& pr, DcaRun& r, const std::vector<AttentionTask>* tasks = nullptr) {
  const Tables tables = rope_tables(pr.C + 1, pr.hd);
  const AttentionParams p = dca_params(pr, tables);
  const std::vector<AttentionTask> doc_tasks = tasks_for_documents(pr.cu);
  const std::vector<AttentionTask>& t = tasks ? *tasks : doc_tasks;
  r.o.assign(r.q.size(), 0);
  r.lse.assign(size_t(pr.T() * pr.H), 0);
  r.dq.assign(r.q.size(), 0);
  r.dk.assign(r.k.size(), 0);
  r.dv.assign(r.v.size(), 0);
  attention_forward(p, t, r.q.data(), r.k.data(), r.v.data(), r.o.data(), r.lse.data());
  attention_backward(p, t, r.q.data(), r.k.data(), r.v.data(), r.o.data(), r.lse.data(),
                     r.dout.data(), r.dq.data(), r.dk.data(), r.dv.data());
}

struct Dense {
  std::vector<double> o, lse, dq, dk, dv;  // dk for the rotated K, like the kernel
};

// Single softmax over all j <= i of each document; logit = scale * mscale *
// <R(M_ij) q_i, k_j> with pre-RoPE q, k and M from relative_position().
Dense dense_reference(const DcaProblem& pr, const DcaRun& r) {
  const int H = pr.H, KV = pr.KV, hd = pr.hd, group = H / KV;
  const int64_t T = pr.T();
  const double a = pr.mscale / std::sqrt(double(hd));
  Dense d;
  d.o.assign(size_t(T * H * hd), 0);
  d.lse.assign(size_t(T * H), 0);
  d.dq.assign(size_t(T * H * hd), 0);
  std::vector<double> dk_pre(size_t(T * KV * hd), 0);
  d.dv.assign(size_t(T * KV * hd), 0);
  const size_t hds = static_cast<size_t>(hd);
  std::vector<double> qi(hds), kj(hds), tmp(hds);
  for (size_t doc = 0; doc + 1 < pr.cu.size(); ++doc) {
    const int64_t b = pr.cu[doc], e = pr.cu[doc + 1];
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      for (int64_t i = b; i < e; ++i) {
        for (int c = 0; c < hd; ++c) qi[size_t(c)] = r.q[size_t((i * H + h) * hd + c)];
        const int64_t n = i - b + 1;
        const size_t ns = static_cast<size_t>(n);
        std::vector<double> s(ns), p(ns), dp(ns);
        std::vector<std::vector<double>> rqs(ns, std::vector<double>(hds));
        double mx = -1e300;
        for (int64_t j = b; j <= i; ++j) {
          const int M = relative_position(i - b, j - b, pr.s(), pr.C);
          EXPECT_GE(M, 0);
          EXPECT_LE(M, pr.C);
          rotate(qi.data(), rqs[size_t(j - b)].data(), hd, double(M));
          double acc = 0;
          for (int c = 0; c < hd; ++c)
            acc += rqs[size_t(j - b)][size_t(c)] * r.k_pre[size_t((j * KV + g) * hd + c)];
          s[size_t(j - b)] = a * acc;
          mx = std::max(mx, s[size_t(j - b)]);
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        const double lse = mx + std::log(sum);
        d.lse[size_t(i * H + h)] = lse;
        double D = 0;
        for (int64_t jj = 0; jj < n; ++jj) {
          p[size_t(jj)] = std::exp(s[size_t(jj)] - lse);
          double acc = 0;
          for (int c = 0; c < hd; ++c)
            acc += double(r.dout[size_t((i * H + h) * hd + c)]) *
                   r.v[size_t(((b + jj) * KV + g) * hd + c)];
          dp[size_t(jj)] = acc;
          D += p[size_t(jj)] * acc;
        }
        for (int64_t jj = 0; jj < n; ++jj) {
          const int64_t j = b + jj;
          const int M = relative_position(i - b, jj, pr.s(), pr.C);
          const double ds = p[size_t(jj)] * (dp[size_t(jj)] - D) * a;
          for (int c = 0; c < hd; ++c) {
            d.o[size_t((i * H + h) * hd + c)] += p[size_t(jj)] * r.v[size_t((j * KV + g) * hd + c)];
            d.dv[size_t((j * KV + g) * hd + c)] += p[size_t(jj)] * r.dout[size_t((i * H + h) * hd + c)];
            // d<R q, k>/dk = R q
            dk_pre[size_t((j * KV + g) * hd + c)] += ds * rqs[size_t(jj)][size_t(c)];
            kj[size_t(c)] = r.k_pre[size_t((j * KV + g) * hd + c)];
          }
          // d<R q, k>/dq = R^T k
          rotate(kj.data(), tmp.data(), hd, double(M), /*transpose=*/true);
          for (int c = 0; c < hd; ++c) d.dq[size_t((i * H + h) * hd + c)] += ds * tmp[size_t(c)];
        }
      }
    }
  }
  // the kernel's dK is for K rotated by (t mod s): dK_rot = R(t mod s) dK_pre
  d.dk.assign(dk_pre.size(), 0);
  for (size_t doc = 0; doc + 1 < pr.cu.size(); ++doc)
    for (int64_t t = pr.cu[doc]; t < pr.cu[doc + 1]; ++t)
      for (int g = 0; g < KV; ++g) {
        const size_t at = size_t((t * KV + g) * hd);
        rotate(dk_pre.data() + at, d.dk.data() + at, hd, double((t - pr.cu[doc]) % pr.s()));
      }
  return d;
}

double max_rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / std::max(den, 1e-30);
}

void expect_matches_dense(const DcaProblem& pr) {
  DcaRun r = make_inputs(pr, 11);
  run_kernel(pr, r);
  const Dense d = dense_reference(pr, r);
  EXPECT_LT(max_rel(r.o, d.o), 1e-5) << "O";
  EXPECT_LT(max_rel(r.lse, d.lse), 1e-5) << "LSE";
  EXPECT_LT(max_rel(r.dq, d.dq), 3e-5) << "dQ";
  EXPECT_LT(max_rel(r.dk, d.dk), 3e-5) << "dK";
  EXPECT_LT(max_rel(r.dv, d.dv), 3e-5) << "dV";
}

TEST(Dca, GoldenRelativePositionsOfTheWorkedExample) {
  // dca.md §1.7: s = 4, w = 2, C = 6, L = 12
  const int golden[12][12] = {
      {0}, {1, 0}, {2, 1, 0}, {3, 2, 1, 0}, {4, 3, 2, 1, 0}, {5, 4, 3, 2, 1, 0},
      {6, 5, 4, 3, 2, 1, 0}, {6, 5, 4, 3, 3, 2, 1, 0}, {6, 5, 4, 3, 4, 3, 2, 1, 0},
      {6, 5, 4, 3, 5, 4, 3, 2, 1, 0}, {6, 5, 4, 3, 6, 5, 4, 3, 2, 1, 0},
      {6, 5, 4, 3, 6, 5, 4, 3, 3, 2, 1, 0}};
  DcaParams d;
  d.chunk_size = 6;
  d.local_size = 2;
  int intra = 0, succ = 0, inter = 0;
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j <= i; ++j) {
      EXPECT_EQ(dca_query_position(i, j, d) - dca_key_position(j, d), golden[i][j]) << i << "," << j;
      EXPECT_EQ(relative_position(i, j, 4, 6), golden[i][j]);
      (i / 4 == j / 4 ? intra : i / 4 - j / 4 == 1 ? succ : inter) += 1;
    }
  EXPECT_EQ(intra, 30);
  EXPECT_EQ(succ, 32);
  EXPECT_EQ(inter, 16);
  EXPECT_EQ(intra + succ + inter, 12 * 13 / 2);  // exactly the causal pairs
}

TEST(Dca, RelativePositionsNeverExceedChunkSize) {
  for (auto [C, w] : {std::pair{6, 2}, {9, 3}, {32, 8}, {10, 6}, {17, 0}}) {
    DcaParams d;
    d.chunk_size = C;
    d.local_size = w;
    for (int i = 0; i < 5 * C; ++i)
      for (int j = 0; j <= i; ++j) {
        const int M = dca_query_position(i, j, d) - dca_key_position(j, d);
        ASSERT_GE(M, 0);
        ASSERT_LE(M, C);
        if (i - j <= C && i / (C - w) - j / (C - w) <= 1 && i % (C - w) <= w) {
          ASSERT_EQ(M, i - j);  // within the local window distances are exact
        }
      }
  }
}

TEST(Dca, WorkedExampleMatchesDenseReference) { expect_matches_dense({2, 1, 8, {0, 12}, 6, 2}); }

TEST(Dca, LongPackedDocumentsMatchDenseReference) {
  // documents several times longer than C, 1-token documents, chunk length 16 cutting
  // query tiles (64 rows per head at G = 2) and key blocks
  expect_matches_dense({4, 2, 16, {0, 100, 101, 138, 208}, 24, 8});
}

TEST(Dca, ChunksLongerThanTilesMatchDenseReference) {
  // s = 187 (not a multiple of any tile), s = 256 (a key block), documents of 3+ chunks
  expect_matches_dense({2, 1, 16, {0, 600}, 200, 13});
  expect_matches_dense({2, 2, 8, {0, 700, 701}, 300, 44});
}

TEST(Dca, GqaRatiosMatchDenseReference) {
  for (int kv : {8, 4, 2, 1}) expect_matches_dense({8, kv, 8, {0, 90, 150}, 20, 5});
}

// bf16 DCA, both ways (see Attention.Bf16* in attention_test.cpp for the tolerance:
// norm-wise 4u for O and LSE, 8u for the gradients, u = 2^-9, and above fp32's error).
double norm_error(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

void expect_bf16_matches_dense(DcaProblem pr) {
  DcaRun r = make_inputs(pr, 11);
  run_kernel(pr, r);
  const Dense d = dense_reference(pr, r);
  const double u = 0x1p-9;
  pr.precision = Precision::bf16;
  std::vector<DcaRun> runs;
  for (const bool instructions : {false, true}) {
    pr.bf16_kernel = instructions ? Bf16Kernel::automatic : Bf16Kernel::rounded;
    run_kernel(pr, r);
    const char* way = instructions ? "bf16 (instructions if any)" : "bf16 (rounded SGEMM)";
    for (auto [x, ref, name, bound] :
         {std::tuple{&r.o, &d.o, "O", 4 * u}, {&r.lse, &d.lse, "LSE", 4 * u}, {&r.dq, &d.dq, "dQ", 8 * u},
          {&r.dk, &d.dk, "dK", 8 * u}, {&r.dv, &d.dv, "dV", 8 * u}}) {
      const double e = norm_error(*x, *ref);
      if (getenv("LCT_SHOW_ERRORS")) std::printf("%s %s %.3g (bound %.3g)\n", way, name, e, bound);
      EXPECT_LE(e, bound) << way << " " << name;
      EXPECT_GE(e, 16 * 0x1p-24) << way << " " << name << ": no bf16 rounding?";
    }
    runs.push_back(r);
  }
  const auto as_double = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  EXPECT_LE(norm_error(runs[0].o, as_double(runs[1].o)), u / 8);
  EXPECT_LE(norm_error(runs[0].dq, as_double(runs[1].dq)), u / 8);
  EXPECT_LE(norm_error(runs[0].dk, as_double(runs[1].dk)), u / 8);
}

TEST(Dca, Bf16PackedDocumentsMatchDenseReference) {
  // chunks cutting tiles and blocks at odd rows, GQA, three-part query tiles
  expect_bf16_matches_dense({4, 2, 16, {0, 100, 101, 138, 409}, 24, 7});
  expect_bf16_matches_dense({2, 1, 32, {0, 600}, 200, 13});
  // chunks of 550 rows: the native backward's items of four 256-row key blocks end at
  // chunk boundaries, so an item holds 2 or 3 key blocks and one rotation per query tile
  expect_bf16_matches_dense({2, 1, 32, {0, 1200}, 650, 100});
}

TEST(Dca, TemperatureMultipliesLogits) {
  DcaProblem pr{2, 1, 8, {0, 70}, 20, 4, 1.7f};
  expect_matches_dense(pr);
  DcaParams d;
  d.mscale = 2.0f;
  d.mscale_original_length = 1000;
  EXPECT_FLOAT_EQ(dca_logit_multiplier(500, d), 2.0f);  // never below the constant
  EXPECT_NEAR(dca_logit_multiplier(4000, d), 2.0 * (0.1 * std::log(4.0) + 1.0), 1e-6);
}

// Standard causal attention on the same data: Q and K rotated by true positions.
DcaRun causal_equivalent(const DcaProblem& pr, const DcaRun& dca_inputs) {
  DcaRun r = dca_inputs;
  std::vector<double> x(static_cast<size_t>(pr.hd)), y(static_cast<size_t>(pr.hd));
  auto rotate_rows = [&](std::vector<float>& m, int heads, const std::vector<float>& src) {
    for (size_t doc = 0; doc + 1 < pr.cu.size(); ++doc)
      for (int64_t t = pr.cu[doc]; t < pr.cu[doc + 1]; ++t)
        for (int h = 0; h < heads; ++h) {
          const size_t at = size_t((t * heads + h) * pr.hd);
          for (int c = 0; c < pr.hd; ++c) x[size_t(c)] = src[at + size_t(c)];
          rotate(x.data(), y.data(), pr.hd, double(t - pr.cu[doc]));
          for (int c = 0; c < pr.hd; ++c) m[at + size_t(c)] = float(y[size_t(c)]);
        }
  };
  rotate_rows(r.q, pr.H, dca_inputs.q);
  rotate_rows(r.k, pr.KV, dca_inputs.k_pre);
  AttentionParams p;
  p.num_heads = pr.H;
  p.num_kv_heads = pr.KV;
  p.head_dim = pr.hd;
  p.scale = float(1.0 / std::sqrt(double(pr.hd)));
  const auto tasks = tasks_for_documents(pr.cu);
  r.o.assign(r.q.size(), 0);
  r.lse.assign(size_t(pr.T() * pr.H), 0);
  attention_forward(p, tasks, r.q.data(), r.k.data(), r.v.data(), r.o.data(), r.lse.data());
  return r;
}

TEST(Dca, EqualsCausalAttentionUpToChunkSizePlusOneThroughTheMultiPartPath) {
  // s = 30 < L = 41 = C + 1: successive parts run, yet every distance is exact
  for (const DcaProblem& pr : {DcaProblem{4, 2, 16, {0, 41}, 40, 10},
                               DcaProblem{2, 1, 16, {0, 30, 71, 72}, 40, 10},  // L <= s too
                               DcaProblem{2, 2, 8, {0, 300}, 299, 100}}) {
    DcaRun r = make_inputs(pr, 5);
    run_kernel(pr, r);
    const DcaRun c = causal_equivalent(pr, r);
    double err = 0, ref = 0;
    for (size_t i = 0; i < r.o.size(); ++i) {
      err = std::max(err, std::abs(double(r.o[i]) - c.o[i]));
      ref = std::max(ref, std::abs(double(c.o[i])));
    }
    EXPECT_LT(err / ref, 2e-6);
    for (size_t i = 0; i < r.lse.size(); ++i) EXPECT_NEAR(r.lse[i], c.lse[i], 2e-5);
  }
  // and one token more differs
  const DcaProblem longer{4, 2, 16, {0, 42}, 40, 10};
  DcaRun r = make_inputs(longer, 5);
  run_kernel(longer, r);
  const DcaRun c = causal_equivalent(longer, r);
  double err = 0;
  for (size_t i = 0; i < r.o.size(); ++i) err = std::max(err, std::abs(double(r.o[i]) - c.o[i]));
  EXPECT_GT(err, 1e-3);
}

TEST(Dca, GradientsMatchFiniteDifferences) {
  // the detached-merge bug of public implementations shows up in dQ and dK here
  const DcaProblem pr{4, 2, 8, {0, 20, 21, 33}, 6, 2};
  DcaRun r = make_inputs(pr, 23);
  run_kernel(pr, r);
  const Tables tables = rope_tables(pr.C + 1, pr.hd);
  const AttentionParams p = dca_params(pr, tables);
  const auto tasks = tasks_for_documents(pr.cu);
  std::vector<float> o(r.o.size()), lse(r.lse.size());
  auto loss = [&] {
    attention_forward(p, tasks, r.q.data(), r.k.data(), r.v.data(), o.data(), lse.data());
    return dot(o, r.dout);
  };
  for (auto [x, g] : {std::pair{&r.q, &r.dq}, std::pair{&r.k, &r.dk}, std::pair{&r.v, &r.dv}}) {
    const auto idx = every_nth_index(int64_t(x->size()), 3);
    EXPECT_LT(rel_error(pick(*g, idx), finite_difference(*x, loss, 1e-2, idx)), 2e-3);
  }
}

TEST(Dca, GqaEqualsMhaWithRepeatedKv) {
  const DcaProblem gqa{4, 2, 8, {0, 75}, 16, 4}, mha{4, 4, 8, {0, 75}, 16, 4};
  DcaRun g = make_inputs(gqa, 31);
  run_kernel(gqa, g);
  DcaRun m = g;
  const int64_t T = gqa.T();
  for (std::vector<float>* x : {&m.k, &m.v, &m.k_pre}) x->assign(size_t(T * 4 * 8), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 8; ++c) {
        m.k[size_t((t * 4 + h) * 8 + c)] = g.k[size_t((t * 2 + h / 2) * 8 + c)];
        m.v[size_t((t * 4 + h) * 8 + c)] = g.v[size_t((t * 2 + h / 2) * 8 + c)];
      }
  run_kernel(mha, m);
  for (size_t i = 0; i < g.o.size(); ++i) EXPECT_NEAR(m.o[i], g.o[i], 1e-6);
  for (size_t i = 0; i < g.dq.size(); ++i) EXPECT_NEAR(m.dq[i], g.dq[i], 1e-5);
  // GQA's dK sums the group's heads
  for (int64_t t = 0; t < T; ++t)
    for (int g2 = 0; g2 < 2; ++g2)
      for (int c = 0; c < 8; ++c)
        EXPECT_NEAR(g.dk[size_t((t * 2 + g2) * 8 + c)],
                    m.dk[size_t((t * 4 + 2 * g2) * 8 + c)] + m.dk[size_t((t * 4 + 2 * g2 + 1) * 8 + c)],
                    1e-5);
}

TEST(Dca, FutureKeysNeverChangeEarlierOutputsAcrossChunks) {
  const DcaProblem pr{2, 1, 8, {0, 90}, 16, 4};  // s = 12: rows 0..36 span four chunks
  DcaRun a = make_inputs(pr, 3);
  run_kernel(pr, a);
  DcaRun b = a;
  for (size_t i = size_t(37 * 8); i < b.k.size(); ++i) b.k[i] += 1.0f, b.v[i] -= 1.0f;
  run_kernel(pr, b);
  for (size_t i = 0; i < size_t(37 * 2 * 8); ++i) EXPECT_EQ(a.o[i], b.o[i]);
}

TEST(Dca, PackedBatchEqualsEachDocumentAlone) {
  const DcaProblem packed{4, 2, 8, {0, 50, 51, 130}, 20, 6};
  DcaRun all = make_inputs(packed, 9);
  run_kernel(packed, all);
  for (size_t doc = 0; doc + 1 < packed.cu.size(); ++doc) {
    const int64_t b = packed.cu[doc], e = packed.cu[doc + 1];
    DcaProblem one = packed;
    one.cu = {0, int32_t(e - b)};
    DcaRun r;
    auto slice = [&](const std::vector<float>& x, int width) {
      return std::vector<float>(x.begin() + b * width, x.begin() + e * width);
    };
    r.q = slice(all.q, 4 * 8);
    r.k = slice(all.k, 2 * 8);
    r.v = slice(all.v, 2 * 8);
    r.dout = slice(all.dout, 4 * 8);
    run_kernel(one, r);
    for (int64_t i = 0; i < (e - b) * 32; ++i) {
      EXPECT_NEAR(r.o[size_t(i)], all.o[size_t(b * 32 + i)], 1e-6);
      EXPECT_NEAR(r.dq[size_t(i)], all.dq[size_t(b * 32 + i)], 1e-5);
    }
    for (int64_t i = 0; i < (e - b) * 16; ++i) EXPECT_NEAR(r.dk[size_t(i)], all.dk[size_t(b * 16 + i)], 1e-5);
  }
}

TEST(Dca, TaskSplitDocumentEqualsUnsplit) {
  // query shards with the key prefix they need (what CP and CAD hand over)
  const DcaProblem pr{4, 2, 8, {0, 150}, 24, 8};
  DcaRun whole = make_inputs(pr, 41);
  run_kernel(pr, whole);
  std::vector<AttentionTask> tasks;
  int32_t start = 0;
  for (int32_t len : {1, 40, 70, 39}) {
    AttentionTask t;
    t.q_row = t.q_pos = start;
    t.q_len = len;
    t.kv_row = t.kv_pos = 0;
    t.kv_len = start + len;
    t.doc_len = 150;
    tasks.push_back(t);
    start += len;
  }
  DcaRun split = whole;
  run_kernel(pr, split, &tasks);
  for (size_t i = 0; i < whole.o.size(); ++i) EXPECT_NEAR(split.o[i], whole.o[i], 1e-6);
  for (size_t i = 0; i < whole.dq.size(); ++i) EXPECT_NEAR(split.dq[i], whole.dq[i], 1e-5);
  for (size_t i = 0; i < whole.dk.size(); ++i) EXPECT_NEAR(split.dk[i], whole.dk[i], 1e-5);
  for (size_t i = 0; i < whole.dv.size(); ++i) EXPECT_NEAR(split.dv[i], whole.dv[i], 1e-5);
}

TEST(Dca, RejectsInvalidParameters) {
  const DcaProblem pr{2, 1, 8, {0, 10}, 6, 6};  // C == w
  DcaRun r = make_inputs({2, 1, 8, {0, 10}, 6, 2}, 1);
  const Tables tables = rope_tables(7, 8);
  const AttentionParams p = dca_params(pr, tables);
  EXPECT_THROW(attention_forward(p, tasks_for_documents(pr.cu), r.q.data(), r.k.data(), r.v.data(),
                                 r.q.data(), r.q.data()),
               std::invalid_argument);
  const Tables too_short = rope_tables(6, 8);  // positions 0..5, C = 6 needs 0..6
  AttentionParams short_table = dca_params({2, 1, 8, {0, 10}, 6, 2}, too_short);
  EXPECT_THROW(attention_forward(short_table, tasks_for_documents(pr.cu), r.q.data(), r.k.data(),
                                 r.v.data(), r.q.data(), r.q.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace lct::dca_test
