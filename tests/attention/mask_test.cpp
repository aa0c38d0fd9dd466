// Attention masks (attention/attention_mask.h) in the blocked kernel: every mask against
// the dense float64 reference on packed documents of mixed lengths (shorter than the
// mask's window, block, sinks or prefix, and many times longer), fp32 and bf16 both
// ways, finite differences of the backward, task splits, and the pair counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attention/core_attention.h"
#include "tests/attention/dense_attention.h"
#include "tests/test_util.h"

namespace lct::mask_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

// 9 documents: 1 to 1,100 tokens, lengths straddling the kernel's 64-row query tiles and
// 256-row key blocks and the masks' parameters below (W = 50, S = 4, B = 96).
const std::vector<int32_t> kDocs = {0, 1, 4, 45, 141, 441, 442, 700, 713, 1813};

Problem masked(MaskKind kind, int H = 4, int KV = 2, int hd = 16, std::vector<int32_t> cu = kDocs) {
  Problem pr{H, KV, hd, std::move(cu)};
  pr.mask = {kind, 50, 4, 96, 2};
  const size_t docs = pr.cu.size() - 1;
  if (kind == MaskKind::prefix_lm) {
    // prefixes of 0, the whole document, and in between (in tiles and across them)
    for (size_t d = 0; d < docs; ++d) {
      const int32_t L = pr.cu[d + 1] - pr.cu[d];
      const int32_t choices[] = {0, L, L / 2, std::min(L, 70), std::min(L, 300)};
      pr.prefix_lens.push_back(choices[d % 5]);
    }
  }
  if (kind == MaskKind::shared_question) {
    // per document: a question of about a quarter, then answers of varying lengths (some
    // documents all question, one with no question)
    for (size_t d = 0; d < docs; ++d) {
      const int32_t L = pr.cu[d + 1] - pr.cu[d];
      const int32_t question = d == 3 ? 0 : std::max(1, L / 4);
      int32_t id = 0, left = 0;
      for (int32_t t = 0; t < L; ++t) {
        if (t >= question && left == 0) ++id, left = 7 + (id * 37) % 150;
        pr.segment_ids.push_back(t < question ? 0 : id);
        if (t >= question) --left;
      }
    }
  }
  return pr;
}

constexpr MaskKind kAllMasks[] = {MaskKind::causal,          MaskKind::sliding_window,       MaskKind::sink_window,
                                  MaskKind::chunked,         MaskKind::prefix_lm,            MaskKind::shared_question,
                                  MaskKind::full_document,   MaskKind::bidirectional_window, MaskKind::causal_blockwise,
                                  MaskKind::block_sparse};

// fp32: the kernel's error against float64 is at most twice that of a naive float32
// implementation of the same dense formulas (the causal kernel's tolerance).
TEST(Masks, EveryMaskMatchesDenseReference) {
  for (MaskKind kind : kAllMasks) {
    const Problem pr = masked(kind);
    const KernelRun r = run_kernel(pr, 100);
    const Dense<double> ref = dense_attention<double>(pr, r.q, r.k, r.v, r.dout);
    const Dense<float> naive = dense_attention<float>(pr, r.q, r.k, r.v, r.dout);
    for (auto [name, ours, fp32, f64] : {std::tuple{"O", &r.o, &naive.o, &ref.o}, {"LSE", &r.lse, &naive.lse, &ref.lse},
                                         {"dQ", &r.dq, &naive.dq, &ref.dq}, {"dK", &r.dk, &naive.dk, &ref.dk},
                                         {"dV", &r.dv, &naive.dv, &ref.dv}}) {
      const double e_ours = max_abs_error(*ours, *f64), e_naive = max_abs_error(*fp32, *f64);
      if (getenv("LCT_SHOW_ERRORS")) std::printf("%s %s %.3g %.3g\n", mask_kind_name(kind), name, e_ours, e_naive);
      EXPECT_LE(e_ours, 2 * e_naive) << mask_kind_name(kind) << " " << name;
    }
  }
}

// bf16, both ways (the AVX512-BF16 kernel where the CPU has it, rounded operands through
// SGEMM everywhere), against float64 of the unrounded inputs: norm-wise 4u for O and
// LSE, 8u for the gradients (u = 2^-9; derived in attention_test.cpp), above 16 fp32
// ulps (the rounding happened), and the two ways within u / 8 of each other.
TEST(Masks, Bf16EveryMaskMatchesDenseReference) {
  const double u = 0x1p-9;
  for (MaskKind kind : kAllMasks) {
    Problem pr = masked(kind, 4, 1, 32);
    const KernelRun inputs = run_kernel(pr, 100);
    pr.precision = Precision::bf16;  // (block_sparse selects from the bf16 values)
    const Dense<double> ref = dense_attention<double>(pr, inputs.q, inputs.k, inputs.v, inputs.dout);
    std::vector<KernelRun> runs;
    for (const bool instructions : {false, true}) {
      pr.bf16_kernel = instructions ? Bf16Kernel::automatic : Bf16Kernel::rounded;
      runs.push_back(run_kernel(pr, 100));
      const KernelRun& r = runs.back();
      for (auto [name, ours, f64, bound] : {std::tuple{"O", &r.o, &ref.o, 4 * u}, {"LSE", &r.lse, &ref.lse, 4 * u},
                                            {"dQ", &r.dq, &ref.dq, 8 * u}, {"dK", &r.dk, &ref.dk, 8 * u},
                                            {"dV", &r.dv, &ref.dv, 8 * u}}) {
        const double e = norm_error(*ours, *f64);
        EXPECT_LE(e, bound) << mask_kind_name(kind) << " " << name << (instructions ? " (instructions)" : " (rounded)");
        EXPECT_GE(e, 16 * 0x1p-24) << mask_kind_name(kind) << " " << name;
      }
    }
    const auto as_double = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    for (auto [x, y, name] : {std::tuple{&runs[0].o, &runs[1].o, "O"}, {&runs[0].dq, &runs[1].dq, "dQ"},
                              {&runs[0].dk, &runs[1].dk, "dK"}, {&runs[0].dv, &runs[1].dv, "dV"}})
      EXPECT_LE(norm_error(*x, as_double(*y)), u / 8) << mask_kind_name(kind) << ": the two ways of bf16 differ in " << name;
  }
}

// Finite differences of <O, dO> for every mask, on documents around the parameters
// (here W = 5, S = 2, B = 4, prefixes and segments of a few tokens).
TEST(Masks, GradientsMatchFiniteDifferences) {
  for (MaskKind kind : kAllMasks) {
    Problem pr = masked(kind, 4, 2, 8, {0, 3, 14, 31});
    pr.mask = {kind, 5, 2, 4, 2};
    if (kind == MaskKind::prefix_lm) pr.prefix_lens = {3, 4, 9};
    if (kind == MaskKind::shared_question)
      pr.segment_ids = {0, 0, 1, /**/ 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, /**/ 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3};
    KernelRun r = run_kernel(pr, 55);
    const auto tasks = tasks_for_documents(pr.cu, pr.mask_data());
    std::vector<float> o(r.o.size()), lse(r.lse.size());
    auto loss = [&] {
      attention_forward(pr.params(), tasks, r.q.data(), r.k.data(), r.v.data(), o.data(), lse.data());
      return dot(o, r.dout);
    };
    for (auto [x, g, name] : {std::tuple{&r.q, &r.dq, "dQ"}, {&r.k, &r.dk, "dK"}, {&r.v, &r.dv, "dV"}}) {
      const auto idx = every_nth_index(int64_t(x->size()), 3);
      EXPECT_LT(rel_error(pick(*g, idx), finite_difference(*x, loss, 1e-2, idx)), 2e-3) << mask_kind_name(kind) << " " << name;
    }
  }
}

// A document cut into query shards, each with the keys it reads (from the document's
// start, or from the first key its window or block reaches), equals the whole document:
// what context parallelism and CAD hand the kernel.
TEST(Masks, TaskSplitsEqualTheWholeDocument) {
  for (MaskKind kind :
       {MaskKind::sliding_window, MaskKind::sink_window, MaskKind::chunked, MaskKind::prefix_lm, MaskKind::block_sparse}) {
    Problem pr = masked(kind, 4, 2, 8, {0, 600});
    if (kind == MaskKind::prefix_lm) pr.prefix_lens = {333};
    const KernelRun whole = run_kernel(pr, 21);
    for (const bool key_window : {false, true}) {
      std::vector<AttentionTask> tasks;
      int32_t start = 0;
      for (int32_t len : {1, 90, 120, 89, 300}) {
        AttentionTask t;
        t.q_row = t.q_pos = start;
        t.q_len = len;
        t.kv_len = kind == MaskKind::prefix_lm ? 600 : start + len;
        t.prefix_len = pr.prefix_lens.empty() ? 0 : pr.prefix_lens[0];
        // keys from the first one the shard's window reads (the sinks then fall outside:
        // sink_window keeps the prefix)
        if (key_window && kind == MaskKind::sliding_window) t.kv_row = t.kv_pos = std::max(0, start - pr.mask.window + 1);
        if (key_window && kind == MaskKind::chunked) t.kv_row = t.kv_pos = start / pr.mask.block_size * pr.mask.block_size;
        t.kv_len -= t.kv_pos;
        tasks.push_back(t);
        start += len;
      }
      const KernelRun split = run_kernel(pr, 21, &tasks);
      for (auto [a, b, tol] : {std::tuple{&split.o, &whole.o, 1e-6}, {&split.lse, &whole.lse, 1e-6}, {&split.dq, &whole.dq, 1e-5},
                               {&split.dk, &whole.dk, 1e-5}, {&split.dv, &whole.dv, 1e-5}})
        for (size_t i = 0; i < a->size(); ++i)
          ASSERT_NEAR((*a)[i], (*b)[i], tol * (1 + std::fabs((*b)[i]))) << mask_kind_name(kind) << " " << i;
    }
  }
}

// attention_pairs counts exactly the pairs the mask lets through, for whole documents
// and for shards with any key range; a sliding window's count grows as T * W.
TEST(Masks, PairsCountTheUnmaskedPairs) {
  for (MaskKind kind : kAllMasks) {
    Problem pr = masked(kind);
    if (kind == MaskKind::block_sparse) {  // the selection of random queries and keys (group 0's)
      const KernelRun r = run_kernel(pr, 9);
      pr.selected = reference_selection(pr, r.q, r.k);
    }
    const auto tasks = tasks_for_documents(pr.cu, pr.mask_data());
    int64_t counted = 0;
    for (size_t d = 0; d + 1 < pr.cu.size(); ++d)
      for (int64_t i = 0; i < pr.cu[d + 1] - pr.cu[d]; ++i)
        for (int64_t j = 0; j < pr.cu[d + 1] - pr.cu[d]; ++j) counted += pr.visible(d, i, j);
    EXPECT_EQ(attention_pairs(tasks, pr.mask), counted) << mask_kind_name(kind);
  }
  // shards with any query and key range; prefix_lm with P = 20, shared_question's task
  // for the segment from position 12 of a document whose question is 5 tokens
  for (const AttentionMask m : {AttentionMask{MaskKind::sliding_window, 9, 0, 1}, AttentionMask{MaskKind::sink_window, 9, 3, 1},
                                AttentionMask{MaskKind::chunked, 1, 0, 7}, AttentionMask{MaskKind::prefix_lm, 1, 0, 1},
                                AttentionMask{MaskKind::shared_question, 1, 0, 1}})
    for (int32_t q_pos : {0, 3, 12, 17, 40})
      for (int32_t q_len : {1, 5, 23, 70})
        for (int32_t kv_pos : {0, 2, 19, 50})
          for (int32_t kv_len : {1, 7, 30, 90}) {
            AttentionTask t{0, 0, q_len, kv_len, q_pos, kv_pos, 0};
            if (m.kind == MaskKind::prefix_lm) t.prefix_len = 20;
            if (m.kind == MaskKind::shared_question) {
              if (q_pos < 12) continue;  // the task's queries lie in the segment
              t.prefix_len = 5, t.segment_pos = 12;
            }
            int64_t counted = 0;
            for (int32_t i = q_pos; i < q_pos + q_len; ++i)
              for (int32_t j = kv_pos; j < kv_pos + kv_len; ++j) {
                bool v = j <= i;
                if (m.kind == MaskKind::sliding_window) v = v && j > i - 9;
                if (m.kind == MaskKind::sink_window) v = v && (j > i - 9 || j < 3);
                if (m.kind == MaskKind::chunked) v = v && i / 7 == j / 7;
                if (m.kind == MaskKind::prefix_lm) v = v || j < 20;
                if (m.kind == MaskKind::shared_question) v = v && (j < 5 || j >= 12);
                counted += v;
              }
            ASSERT_EQ(attention_pairs(t, m), counted)
                << mask_kind_name(m.kind) << " " << q_pos << " " << q_len << " " << kv_pos << " " << kv_len;
          }
  const AttentionTask doc{0, 0, 65536, 65536, 0, 0, 65536};
  const AttentionMask sliding{MaskKind::sliding_window, 4096, 0, 1};
  EXPECT_EQ(attention_pairs(doc, sliding), 4096LL * 4097 / 2 + (65536LL - 4096) * 4096);
}

// Keys a mask hides never change an output: perturbing them leaves O bit for bit.
TEST(Masks, HiddenKeysNeverChangeOutputs) {
  Problem pr = masked(MaskKind::sliding_window, 2, 1, 8, {0, 400});
  KernelRun a = run_kernel(pr, 3);
  std::vector<float> k2 = a.k, v2 = a.v;
  for (size_t i = 0; i < size_t(100 * 8); ++i) k2[i] += 1.0f, v2[i] -= 1.0f;  // keys 0..99
  std::vector<float> o(a.o.size()), lse(a.lse.size());
  attention_forward(pr.params(), tasks_for_documents(pr.cu), a.q.data(), k2.data(), v2.data(), o.data(), lse.data());
  for (size_t i = size_t(149 * 2 * 8); i < o.size(); ++i) ASSERT_EQ(o[i], a.o[i]) << i;  // queries >= 149 read keys >= 100
}

TEST(Masks, BadParametersAreRefused) {
  AttentionParams p = masked(MaskKind::sliding_window).params();
  p.mask.window = 0;
  std::vector<float> x(64);
  EXPECT_NE(error_of([&] { attention_forward(p, {}, x.data(), x.data(), x.data(), x.data(), x.data()); }).find("attention.window"),
            std::string::npos);
  p.mask = {MaskKind::chunked, 1, 0, 0};
  EXPECT_NE(error_of([&] { attention_forward(p, {}, x.data(), x.data(), x.data(), x.data(), x.data()); }).find("attention.block_size"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_mask_kind("window"); }).find("sliding_window"), std::string::npos);
}

}  // namespace
}  // namespace lct::mask_test
