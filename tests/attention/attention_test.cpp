// Core attention against a dense float64 reference (O, LSE, dQ/dK/dV), finite
// differences, GQA, packed documents, and task splits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "attention/blocked_attention.h"
#include "attention/core_attention.h"
#include "tests/attention/dense_attention.h"
#include "tests/test_util.h"

namespace lct::attention_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

// The kernel's error against float64 must be at most twice the error of a naive
// float32 implementation of the same formulas.
void expect_matches_dense(const Problem& pr) {
  const KernelRun r = run_kernel(pr, 100);
  const Dense<double> ref = dense_attention<double>(pr, r.q, r.k, r.v, r.dout);
  const Dense<float> naive = dense_attention<float>(pr, r.q, r.k, r.v, r.dout);
  const auto check = [](const char* name, const std::vector<float>& ours,
                        const std::vector<float>& fp32, const std::vector<double>& f64) {
    const double e_ours = max_abs_error(ours, f64), e_naive = max_abs_error(fp32, f64);
    if (getenv("LCT_SHOW_ERRORS")) std::printf("%s %.3g %.3g ratio %.2f\n", name, e_ours, e_naive, e_ours / e_naive);
    EXPECT_LE(e_ours, 2 * e_naive) << name << ": kernel error " << e_ours
                                          << " vs naive float32 error " << e_naive;
  };
  check("O", r.o, naive.o, ref.o);
  check("LSE", r.lse, naive.lse, ref.lse);
  check("dQ", r.dq, naive.dq, ref.dq);
  check("dK", r.dk, naive.dk, ref.dk);
  check("dV", r.dv, naive.dv, ref.dv);
}

TEST(Attention, OneDocumentMatchesDenseReference) {
  // 700 rows: several 256-row key blocks and many query tiles, none of them full
  expect_matches_dense({2, 2, 64, {0, 700}});
}

TEST(Attention, ManyShortDocumentsLengthsOffBlockSize) {
  // 1-token documents, lengths straddling the 64-row query and 256-row key tiles
  expect_matches_dense({4, 2, 8, {0, 1, 64, 129, 130, 261, 262, 400, 401, 402, 659}});
}

TEST(Attention, GqaRatiosMatchDenseReference) {
  for (int kv : {8, 4, 2, 1}) expect_matches_dense({8, kv, 32, {0, 37, 150, 151, 451}});
}

TEST(Attention, GqaEqualsMhaWithRepeatedKv) {
  const Problem gqa{4, 2, 8, {0, 70, 99}}, mha{4, 4, 8, {0, 70, 99}};
  KernelRun g = run_kernel(gqa, 7);
  // repeat each kv head for its group of query heads
  const int64_t T = gqa.T();
  std::vector<float> k4(size_t(T * 4 * 8)), v4(k4.size());
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < 4; ++h)
      for (int x = 0; x < 8; ++x) {
        k4[size_t((t * 4 + h) * 8 + x)] = g.k[size_t((t * 2 + h / 2) * 8 + x)];
        v4[size_t((t * 4 + h) * 8 + x)] = g.v[size_t((t * 2 + h / 2) * 8 + x)];
      }
  std::vector<float> o(g.o.size()), lse(g.lse.size());
  const auto tasks = tasks_for_documents(mha.cu);
  attention_forward(mha.params(), tasks, g.q.data(), k4.data(), v4.data(), o.data(), lse.data());
  for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], g.o[i], 1e-6);
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], g.lse[i], 1e-6);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  const Problem pr{4, 2, 8, {0, 9, 10, 30}};
  KernelRun r = run_kernel(pr, 55);
  const auto tasks = tasks_for_documents(pr.cu);
  std::vector<float> o(r.o.size()), lse(r.lse.size());
  auto loss = [&] {
    attention_forward(pr.params(), tasks, r.q.data(), r.k.data(), r.v.data(), o.data(), lse.data());
    return dot(o, r.dout);
  };
  for (auto [x, g] : {std::pair{&r.q, &r.dq}, std::pair{&r.k, &r.dk}, std::pair{&r.v, &r.dv}}) {
    const auto idx = every_nth_index(int64_t(x->size()), 3);
    EXPECT_LT(rel_error(pick(*g, idx), finite_difference(*x, loss, 1e-2, idx)), 2e-3);
  }
}

TEST(Attention, TaskSplitDocumentEqualsUnsplit) {
  // one 300-token document cut into query shards of 1, 90, 120 and 89 rows, each with
  // the key prefix it needs, and a shard whose keys start mid-document
  const Problem pr{4, 2, 8, {0, 300}};
  const KernelRun whole = run_kernel(pr, 21);
  std::vector<AttentionTask> tasks;
  int32_t start = 0;
  for (int32_t len : {1, 90, 120, 89}) {
    AttentionTask t;
    t.q_row = start;
    t.q_len = len;
    t.q_pos = start;
    t.kv_row = 0;
    t.kv_pos = 0;
    t.kv_len = start + len;
    tasks.push_back(t);
    start += len;
  }
  const KernelRun split = run_kernel(pr, 21, &tasks);
  for (size_t i = 0; i < whole.o.size(); ++i) EXPECT_NEAR(split.o[i], whole.o[i], 1e-6);
  for (size_t i = 0; i < whole.lse.size(); ++i) EXPECT_NEAR(split.lse[i], whole.lse[i], 1e-6);
  for (size_t i = 0; i < whole.dq.size(); ++i) EXPECT_NEAR(split.dq[i], whole.dq[i], 1e-5);
  for (size_t i = 0; i < whole.dk.size(); ++i) EXPECT_NEAR(split.dk[i], whole.dk[i], 1e-5);
  for (size_t i = 0; i < whole.dv.size(); ++i) EXPECT_NEAR(split.dv[i], whole.dv[i], 1e-5);
}

// A batch longer than kAttentionChunkRows runs in chunks of whole tasks (the kernel's
// scratch bounded by the chunk): against float64 like any batch, the forward bit for bit
// what one unchunked kernel call gives (a query row's O and LSE come from its own task
// alone), and the backward within fp32 summation order of it (dQ's per-thread partials
// are summed in another grouping).
TEST(Attention, BatchesLongerThanAChunkRunInChunks) {
  Problem pr{2, 1, 8, {0}};
  while (pr.cu.back() < 2 * kAttentionChunkRows + 5000) pr.cu.push_back(pr.cu.back() + 97 + int32_t(pr.cu.size() % 13));
  expect_matches_dense(pr);
  const KernelRun chunked = run_kernel(pr, 31);
  KernelRun whole = chunked;
  std::fill(whole.o.begin(), whole.o.end(), 0.0f);
  std::fill(whole.lse.begin(), whole.lse.end(), 0.0f);
  std::fill(whole.dq.begin(), whole.dq.end(), 0.0f);
  std::fill(whole.dk.begin(), whole.dk.end(), 0.0f);
  std::fill(whole.dv.begin(), whole.dv.end(), 0.0f);
  const std::vector<AttentionTask> tasks = tasks_for_documents(pr.cu);
  blocked_attention_forward(pr.params(), tasks, whole.q.data(), whole.k.data(), whole.v.data(), whole.o.data(),
                            whole.lse.data());
  blocked_attention_backward(pr.params(), tasks, whole.q.data(), whole.k.data(), whole.v.data(), whole.o.data(),
                             whole.lse.data(), whole.dout.data(), whole.dq.data(), whole.dk.data(), whole.dv.data());
  EXPECT_EQ(chunked.o, whole.o);
  EXPECT_EQ(chunked.lse, whole.lse);
  for (auto [a, b] : {std::pair{&chunked.dq, &whole.dq}, {&chunked.dk, &whole.dk}, {&chunked.dv, &whole.dv}})
    for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 1e-6 * (1 + std::fabs((*b)[i]))) << i;
}

// bf16 (AttentionParams::precision): both ways of computing it (the AVX512-BF16 kernel
// where the CPU has it, and rounded operands through SGEMM everywhere) against the
// float64 reference of the unrounded inputs.
//
// Tolerance, from the arithmetic: with u = 2^-9 (bf16's unit roundoff) each of Q, K, V,
// dO, P and dS carries a relative error <= u; a logit s = scale <q, k> is off by at most
// 2u scale sum|q||k|, i.e. 2u |s| for aligned vectors and ~2u |s| / sqrt(hd) on average for
// random ones, and P = exp(s - LSE) inherits it as a relative error. Every output is a
// sum of such terms, so its norm-wise relative error is a small multiple of u: O and LSE
// pass through three roundings (Q, K; then P or V), the gradients through up to five
// (the forward's, dO, and dS). Bounds: 4u for O, 8u for the gradients (LSE, whose
// values are O(1) and errors absolute, 4u too). fp32 arithmetic lies three orders
// below, so each check also requires an error above 16 * 2^-24 (the bf16 rounding was
// applied). The two ways differ only by fp32 summation order and the rare bf16
// rounding of a value sitting at a bf16 tie: they agree to u / 8.
void expect_bf16_matches_dense(Problem pr, const std::vector<AttentionTask>* tasks = nullptr) {
  pr.precision = Precision::fp32;
  const KernelRun inputs = run_kernel(pr, 100);
  const Dense<double> ref = dense_attention<double>(pr, inputs.q, inputs.k, inputs.v, inputs.dout);
  pr.precision = Precision::bf16;
  const double u = 0x1p-9;
  std::vector<KernelRun> runs;
  for (const bool instructions : {false, true}) {
    pr.bf16_kernel = instructions ? Bf16Kernel::automatic : Bf16Kernel::rounded;
    const KernelRun r = run_kernel(pr, 100, tasks);
    const char* way = instructions ? "bf16 (instructions if any)" : "bf16 (rounded SGEMM)";
    const auto check = [&](const char* name, const std::vector<float>& ours, const std::vector<double>& f64,
                           double bound) {
      const double e = norm_error(ours, f64);
      if (getenv("LCT_SHOW_ERRORS")) std::printf("%s %s %.3g (bound %.3g)\n", way, name, e, bound);
      EXPECT_LE(e, bound) << way << " " << name;
      EXPECT_GE(e, 16 * 0x1p-24) << way << " " << name << ": no bf16 rounding?";
    };
    check("O", r.o, ref.o, 4 * u);
    check("LSE", r.lse, ref.lse, 4 * u);
    check("dQ", r.dq, ref.dq, 8 * u);
    check("dK", r.dk, ref.dk, 8 * u);
    check("dV", r.dv, ref.dv, 8 * u);
    runs.push_back(r);
  }
  const auto as_double = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const KernelRun &a = runs[0], &b = runs[1];
  for (auto [x, y, name] : {std::tuple{&a.o, &b.o, "O"}, {&a.dq, &b.dq, "dQ"}, {&a.dk, &b.dk, "dK"}, {&a.dv, &b.dv, "dV"}})
    EXPECT_LE(norm_error(*x, as_double(*y)), u / 8) << "the two ways of bf16 differ in " << name;
}

// A document longer than the kernel's runs runs as query slices (attention_runs): here
// runs of 256 rows over a 1,500-row document among short ones, under causal attention
// and the masks whose reach differs (a window, chunks, a prefix of 600 that a cut may not
// split: the first slice then runs to 768). Against float64 like any batch, the forward
// bit for bit what one unsliced call gives (a query row's arithmetic does not depend on
// the cut), the backward within fp32 summation order of it (each slice adds its dK and dV
// into the document's), in fp32 and in bf16.
TEST(Attention, ALongDocumentRunsAsQuerySlices) {
  const AttentionMask masks[] = {{}, {MaskKind::sliding_window, 100, 0, 1}, {MaskKind::chunked, 1, 0, 300},
                                 {MaskKind::prefix_lm, 1, 0, 1}};
  for (const AttentionMask& mask : masks) {
    Problem pr{4, 2, 16, {0, 37, 1537, 1600}};
    pr.mask = mask;
    if (mask.kind == MaskKind::prefix_lm) pr.prefix_lens = {10, 600, 5};
    pr.chunk_rows = 256;
    std::vector<AttentionRun> runs;
    attention_runs(tasks_for_documents(pr.cu, pr.mask_data()), pr.mask, pr.chunk_rows, runs);
    ASSERT_EQ(runs.size(), mask.kind == MaskKind::prefix_lm ? 6u : 8u) << mask.describe();
    EXPECT_TRUE(runs[1].slice && runs[1].q_lo == 37 && runs[1].kv_lo == 37);
    EXPECT_EQ(runs[1].q_hi, mask.kind == MaskKind::prefix_lm ? 37 + 768 : 37 + 256);
    EXPECT_EQ(runs[1].kv_hi, runs[1].q_hi);
    EXPECT_FALSE(runs.back().slice);
    // a later slice's keys start where its first query's do: the document's first key
    // (causal, prefix_lm), the window's (q - W + 1) or the block's
    for (const AttentionRun& r : runs)
      if (r.slice && r.q_lo > 37) {
        const int64_t q = r.q_lo - 37;  // in-document position of its first query
        const int64_t first = mask.kind == MaskKind::sliding_window ? q - 100 + 1
                              : mask.kind == MaskKind::chunked     ? q / 300 * 300
                                                                   : 0;
        EXPECT_EQ(r.kv_lo, 37 + first) << mask.describe() << " slice from " << q;
      }
    expect_matches_dense(pr);
    expect_bf16_matches_dense(pr);
    const KernelRun sliced = run_kernel(pr, 41);
    pr.chunk_rows = kAttentionChunkRows;
    const KernelRun whole = run_kernel(pr, 41);
    EXPECT_EQ(sliced.o, whole.o) << mask.describe();
    EXPECT_EQ(sliced.lse, whole.lse) << mask.describe();
    for (auto [a, b] : {std::pair{&sliced.dq, &whole.dq}, {&sliced.dk, &whole.dk}, {&sliced.dv, &whole.dv}})
      for (size_t i = 0; i < a->size(); ++i)
        ASSERT_NEAR((*a)[i], (*b)[i], 1e-6 * (1 + std::fabs((*b)[i]))) << mask.describe() << " " << i;
  }
}


TEST(Attention, Bf16OneDocumentMatchesDenseReference) { expect_bf16_matches_dense({2, 2, 64, {0, 700}}); }

TEST(Attention, Bf16PackedGqaDocumentsAtOddRows) {
  // documents starting at odd rows (the native kernel pairs V rows from even rows),
  // lengths straddling tiles, GQA 4:1 and 2:1, odd packed tile heights
  expect_bf16_matches_dense({4, 1, 32, {0, 1, 64, 129, 130, 261, 262, 400, 401, 402, 659}});
  expect_bf16_matches_dense({4, 2, 16, {0, 37, 150, 151, 451}});
}

TEST(Attention, Bf16TaskSplitsAndSharedKeys) {
  const Problem pr{4, 2, 32, {0, 301}};
  std::vector<AttentionTask> tasks;
  int32_t start = 0;
  for (int32_t len : {1, 90, 121, 89}) {  // query shards with their key prefixes
    AttentionTask t;
    t.q_row = t.q_pos = start;
    t.q_len = len;
    t.kv_len = start + len;
    tasks.push_back(t);
    start += len;
  }
  expect_bf16_matches_dense(pr, &tasks);
}

TEST(Attention, FutureKeysNeverChangeEarlierOutputs) {
  const Problem pr{2, 1, 8, {0, 180}};
  KernelRun a = run_kernel(pr, 3);
  std::vector<float> k2 = a.k, v2 = a.v;
  for (size_t i = size_t(150 * 8); i < k2.size(); ++i) k2[i] += 1.0f, v2[i] -= 1.0f;
  std::vector<float> o(a.o.size()), lse(a.lse.size());
  attention_forward(pr.params(), tasks_for_documents(pr.cu), a.q.data(), k2.data(), v2.data(),
                    o.data(), lse.data());
  for (size_t i = 0; i < size_t(150 * 2 * 8); ++i) EXPECT_EQ(o[i], a.o[i]);
}

TEST(Attention, AttendedPairsCountsCausalArea) {
  const std::vector<int32_t> cu = {0, 1, 5, 105};
  EXPECT_EQ(attention_pairs(tasks_for_documents(cu)), 1 + 4 * 5 / 2 + 100 * 101 / 2);
  // the closed form equals counting row by row for shards with any key range
  for (int32_t q_pos : {0, 3, 17, 40})
    for (int32_t q_len : {1, 5, 23})
      for (int32_t kv_pos : {0, 2, 19, 50})
        for (int32_t kv_len : {1, 7, 30}) {
          const AttentionTask t{0, 0, q_len, kv_len, q_pos, kv_pos, 0};
          int64_t counted = 0;
          for (int32_t i = 0; i < q_len; ++i)
            for (int32_t j = 0; j < kv_len; ++j) counted += kv_pos + j <= q_pos + i;
          ASSERT_EQ(attention_pairs(t), counted) << q_pos << " " << q_len << " " << kv_pos << " " << kv_len;
        }
}

}  // namespace
}  // namespace lct::attention_test
