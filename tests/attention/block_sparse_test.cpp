// attention.mask = block_sparse (attention/block_sparse.h) beyond the every-mask tests of
// mask_test.cpp (dense float64 reference fp32 and bf16, finite differences, task splits,
// pair counts): the selection against its definition, its limits (top_blocks 0 is the
// chunked mask, every block is causal), no leak from later tokens, and query slices.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention/block_sparse.h"
#include "attention/core_attention.h"
#include "tests/attention/dense_attention.h"
#include "tests/test_util.h"

namespace lct::block_sparse_test {
namespace {
using namespace test;

// Documents around B = 32 (shorter than a block, a block and one, many blocks).
Problem sparse(int top_blocks, std::vector<int32_t> cu = {0, 20, 52, 53, 300, 1100}, int H = 4, int KV = 2) {
  Problem pr{H, KV, 16, std::move(cu)};
  pr.mask = {MaskKind::block_sparse, 1, 0, 32, top_blocks};
  return pr;
}

// The kernel's selection is the definition's, block for block, query by query (in one
// call over a document and in query slices of it), in fp32 and bf16.
TEST(BlockSparse, SelectionIsTheDefinition) {
  for (const auto [k, precision] : {std::pair{1, Precision::fp32}, {3, Precision::fp32}, {8, Precision::fp32},
                                    {3, Precision::bf16}}) {
    Problem pr = sparse(k);
    pr.precision = precision;  // bf16: from the bf16 values of Q and K
    const KernelRun r = run_kernel(pr, 7);
    const std::vector<int32_t> ref = reference_selection(pr, r.q, r.k);
    int64_t checked = 0, skipped = 0;
    for (const AttentionTask& t : tasks_for_documents(pr.cu))
      for (const int64_t step : {int64_t(t.q_len), int64_t(37)})
        for (int64_t lo = t.q_row; lo < t.q_row + t.q_len; lo += step) {
          const int64_t hi = std::min<int64_t>(lo + step, t.q_row + t.q_len);
          std::vector<int32_t> ours;
          select_blocks(pr.params(), t, lo, hi, r.q.data(), r.k.data(), ours);
          ASSERT_EQ(ours.size(), size_t((hi - lo) * pr.KV * k));
          for (size_t i = 0; i < ours.size(); ++i) {
            ASSERT_EQ(ours[i], ref[size_t(lo * pr.KV * k) + i]) << "k " << k << " row " << lo + int64_t(i) / (pr.KV * k);
            (ours[i] >= 0 ? checked : skipped) += 1;
          }
        }
    EXPECT_GT(checked, 0);
    EXPECT_GT(skipped, 0);  // queries with fewer earlier blocks than k
  }
}

// top_blocks 0 is the chunked mask, bit for bit; enough blocks to take them all is the
// causal mask (another summation order: within the fp32 kernel's tolerance of it).
TEST(BlockSparse, LimitsAreChunkedAndCausal) {
  Problem pr = sparse(0);
  const KernelRun none = run_kernel(pr, 11);
  pr.mask.kind = MaskKind::chunked;
  const KernelRun chunked = run_kernel(pr, 11);
  EXPECT_EQ(none.o, chunked.o);
  EXPECT_EQ(none.lse, chunked.lse);
  EXPECT_EQ(none.dq, chunked.dq);
  EXPECT_EQ(none.dk, chunked.dk);
  EXPECT_EQ(none.dv, chunked.dv);
  pr = sparse(1100 / 32);
  const KernelRun all = run_kernel(pr, 11);
  pr.mask = AttentionMask{};
  const KernelRun causal = run_kernel(pr, 11);
  for (auto [a, b] : {std::pair{&all.o, &causal.o}, {&all.lse, &causal.lse}, {&all.dq, &causal.dq},
                      {&all.dk, &causal.dk}, {&all.dv, &causal.dv}})
    for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 2e-6 * (1 + std::fabs((*b)[i]))) << i;
}

// Nothing leaks from later tokens: changing every query, key and value from position 500
// of a document on leaves the outputs of the queries before it bit for bit.
TEST(BlockSparse, LaterTokensNeverChangeEarlierOutputs) {
  const Problem pr = sparse(3, {0, 1000});
  KernelRun a = run_kernel(pr, 5);
  std::vector<float> q = a.q, k = a.k, v = a.v;
  const int64_t from = 500;
  for (size_t i = size_t(from * pr.H * pr.hd); i < q.size(); ++i) q[i] = -2 * q[i] + 0.5f;
  for (size_t i = size_t(from * pr.KV * pr.hd); i < k.size(); ++i) k[i] = 3 * k[i] - 1, v[i] += 1;
  std::vector<float> o(a.o.size()), lse(a.lse.size());
  attention_forward(pr.params(), tasks_for_documents(pr.cu), q.data(), k.data(), v.data(), o.data(), lse.data());
  for (size_t i = 0; i < size_t(from * pr.H * pr.hd); ++i) ASSERT_EQ(o[i], a.o[i]) << i;
  for (size_t i = 0; i < size_t(from * pr.H); ++i) ASSERT_EQ(lse[i], a.lse[i]) << i;
  EXPECT_NE(o.back(), a.o.back());
}

// Query slices (runs of chunk_rows rows, a 1M-token document's) give the whole
// document's O, LSE and dQ bit for bit (a row's own block, its selection and its parts'
// arithmetic do not depend on the cut); dK and dV sum the slices' parts one slice after
// another, another order of the same fp32 sums (the tolerance of Masks.TaskSplits).
TEST(BlockSparse, QuerySlicesEqualTheWholeDocument) {
  Problem pr = sparse(3, {0, 1000, 1130});
  const KernelRun whole = run_kernel(pr, 13);
  pr.chunk_rows = 128;
  const KernelRun sliced = run_kernel(pr, 13);
  EXPECT_EQ(whole.o, sliced.o);
  EXPECT_EQ(whole.lse, sliced.lse);
  EXPECT_EQ(whole.dq, sliced.dq);
  for (auto [a, b] : {std::pair{&sliced.dk, &whole.dk}, {&sliced.dv, &whole.dv}})
    for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 1e-5 * (1 + std::fabs((*b)[i]))) << i;
}

// Tasks without their document's key prefix (a context-parallel piece) are refused,
// naming what is missing; so is a negative top_blocks.
TEST(BlockSparse, RefusesTasksWithoutTheKeyPrefix) {
  const Problem pr = sparse(2, {0, 100});
  std::vector<float> x(size_t(100 * 4 * 16));
  AttentionTask t{0, 0, 50, 50, 50, 50, 100};
  EXPECT_NE(error_of([&] { attention_forward(pr.params(), {&t, 1}, x.data(), x.data(), x.data(), x.data(), x.data()); })
                .find("block_sparse needs each task's keys from its document's first"),
            std::string::npos);
  AttentionParams p = pr.params();
  p.mask.top_blocks = -1;
  EXPECT_NE(error_of([&] { attention_forward(p, {}, x.data(), x.data(), x.data(), x.data(), x.data()); })
                .find("attention.top_blocks must be >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace lct::block_sparse_test
