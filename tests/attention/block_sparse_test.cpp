// attention.mask = block_sparse (attention/block_sparse.h) beyond the every-mask tests of
// mask_test.cpp (dense float64 reference fp32 and bf16, finite differences, task splits,
// pair counts): the selection against its definition, its limits (top_blocks 0 is the
// chunked mask, every block is causal), no leak from later tokens, and query slices.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
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

// The block means a placement gives the kernel (BlockMeans: kbar[c * L + m]) for blocks
// [0, L) of a document whose key rows start at k, from sums of each block's rows.
std::vector<double> block_means_of(const AttentionParams& p, const std::vector<float>& k, int64_t L) {
  const int64_t width = int64_t(p.num_kv_heads) * p.head_dim, B = p.mask.block_size;
  std::vector<double> kbar(size_t(L * width), 0.0);
  for (int64_t m = 0; m < L; ++m) {
    std::vector<KeySum> sums(size_t(width), 0);
    add_key_sums(p, k.data() + m * B * width, B, sums.data());
    for (int64_t c = 0; c < width; ++c) kbar[size_t(c * L + m)] = key_mean(sums[size_t(c)], B);
  }
  return kbar;
}

// The kernel's selection is the definition's, block for block, query by query (in one
// call over a document and in query slices of it), in fp32 and bf16.
TEST(BlockSparse, SelectionIsTheDefinition) {
  for (const auto& [k, precision] : {std::pair{1, Precision::fp32}, {3, Precision::fp32}, {8, Precision::fp32},
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

// Rows that share a GEMM call: a tuned library may round a row's products differently
// by how many rows the call has (OpenBLAS's Haswell kernels do; its Cooperlake ones
// did not), so a row's O and LSE in two groupings agree to a few fp32 roundings of the
// kernel's sums (the tolerance of Masks.TaskSplits: 1e-6 of the value's scale), not bit
// for bit. The selection is lct's own double arithmetic in a fixed order: bit for bit.
constexpr double kRegroupedRows = 1e-6;

// Nothing leaks from later tokens: changing every query, key and value from position 500
// of a document on leaves the selections of the queries before it bit for bit and their
// outputs within kRegroupedRows (what leaks would move them by the weight of a changed
// key, about 1e-3 here; the last rows move).
TEST(BlockSparse, LaterTokensNeverChangeEarlierOutputs) {
  const Problem pr = sparse(3, {0, 1000});
  KernelRun a = run_kernel(pr, 5);
  std::vector<float> q = a.q, k = a.k, v = a.v;
  const int64_t from = 500;
  for (size_t i = size_t(from * pr.H * pr.hd); i < q.size(); ++i) q[i] = -2 * q[i] + 0.5f;
  for (size_t i = size_t(from * pr.KV * pr.hd); i < k.size(); ++i) k[i] = 3 * k[i] - 1, v[i] += 1;
  std::vector<float> o(a.o.size()), lse(a.lse.size());
  attention_forward(pr.params(), tasks_for_documents(pr.cu), q.data(), k.data(), v.data(), o.data(), lse.data());
  const AttentionTask t = tasks_for_documents(pr.cu)[0];
  std::vector<int32_t> before, after;
  select_blocks(pr.params(), t, 0, from, a.q.data(), a.k.data(), before);
  select_blocks(pr.params(), t, 0, from, q.data(), k.data(), after);
  EXPECT_EQ(before, after);
  for (size_t i = 0; i < size_t(from * pr.H * pr.hd); ++i)
    ASSERT_NEAR(o[i], a.o[i], kRegroupedRows * (1 + std::fabs(a.o[i]))) << i;
  for (size_t i = 0; i < size_t(from * pr.H); ++i) ASSERT_NEAR(lse[i], a.lse[i], kRegroupedRows * (1 + std::fabs(a.lse[i]))) << i;
  EXPECT_GT(std::fabs(o.back() - a.o.back()), 1e-3);
}

// Query slices (runs of chunk_rows rows, a 1M-token document's) give the whole
// document's selection bit for bit, and its O, LSE and dQ within kRegroupedRows (a slice's
// rows share other GEMM calls); dK and dV sum the slices' parts one slice after another,
// another order of the same fp32 sums (the tolerance of Masks.TaskSplits).
TEST(BlockSparse, QuerySlicesEqualTheWholeDocument) {
  Problem pr = sparse(3, {0, 1000, 1130});
  const KernelRun whole = run_kernel(pr, 13);
  const AttentionTask t = tasks_for_documents(pr.cu)[1];
  std::vector<int32_t> all, part, sliced_sel;
  select_blocks(pr.params(), t, t.q_row, t.q_row + t.q_len, whole.q.data(), whole.k.data(), all);
  for (int64_t lo = t.q_row; lo < t.q_row + t.q_len; lo += 128) {
    select_blocks(pr.params(), t, lo, std::min<int64_t>(lo + 128, t.q_row + t.q_len), whole.q.data(), whole.k.data(), part);
    sliced_sel.insert(sliced_sel.end(), part.begin(), part.end());
  }
  EXPECT_EQ(all, sliced_sel);
  pr.chunk_rows = 128;
  const KernelRun sliced = run_kernel(pr, 13);
  for (auto [a, b, tol] : {std::tuple{&sliced.o, &whole.o, kRegroupedRows}, {&sliced.lse, &whole.lse, kRegroupedRows},
                           {&sliced.dq, &whole.dq, 1e-5}, {&sliced.dk, &whole.dk, 1e-5}, {&sliced.dv, &whole.dv, 1e-5}})
    for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], tol * (1 + std::fabs((*b)[i]))) << i;
}

// The block means' sums are exact: a block's rows summed in any split add up to the
// whole block's sum; the fixed point rounds to 64 fraction bits (2^-64 is one unit,
// 2^-66 rounds to zero, -2^-65 to -1 away from zero), clamps 2^31 and beyond (and
// infinities) and reads NaN as zero; the mean is the sum's double over B.
TEST(BlockSparse, BlockSumsDoNotDependOnTheSplit) {
  Problem pr = sparse(2, {0, 96});
  const AttentionParams p = pr.params();
  const int64_t width = pr.KV * pr.hd;
  const std::vector<float> k = random_vector(96 * width, 3);
  std::vector<KeySum> whole(size_t(width), 0);
  add_key_sums(p, k.data(), 96, whole.data());
  for (const int64_t cut : {1, 17, 50, 95}) {
    std::vector<KeySum> a(size_t(width), 0), b(size_t(width), 0);
    add_key_sums(p, k.data() + cut * width, 96 - cut, b.data());  // the later part first
    add_key_sums(p, k.data(), cut, a.data());
    for (int64_t x = 0; x < width; ++x) ASSERT_TRUE(a[size_t(x)] + b[size_t(x)] == whole[size_t(x)]) << cut << " " << x;
  }
  double sum0 = 0;
  for (int64_t j = 0; j < 96; ++j) sum0 += k[size_t(j * width)];
  EXPECT_NEAR(key_mean(whole[0], 96), sum0 / 96, 1e-15);
  pr = sparse(2, {0, 1});
  pr.KV = 1, pr.H = 1;
  const auto fixed = [&](float x) {
    KeySum s[16] = {};
    std::vector<float> row(16, 0.0f);
    row[0] = x;
    add_key_sums(pr.params(), row.data(), 1, s);
    return s[0];
  };
  EXPECT_TRUE(fixed(std::ldexp(1.0f, -64)) == KeySum(1));
  EXPECT_TRUE(fixed(std::ldexp(1.0f, -66)) == KeySum(0));
  EXPECT_TRUE(fixed(-std::ldexp(1.0f, -65)) == KeySum(-1));
  EXPECT_TRUE(fixed(1.5f) == KeySum(3) << 63);
  EXPECT_TRUE(fixed(std::ldexp(1.0f, 40)) == KeySum(1) << 95);
  EXPECT_TRUE(fixed(-INFINITY) == -(KeySum(1) << 95));
  EXPECT_TRUE(fixed(NAN) == KeySum(0));
  EXPECT_TRUE(fixed(1e-40f) == KeySum(0));  // subnormal
  EXPECT_EQ(key_mean(KeySum(3) << 63, 2), 0.75);
}

// Given block means (what a placement that holds only the selected blocks passes), the
// kernel selects what it selects from K, and reads K and V only in each query's own
// block and the blocks it selected: with every other key and value row replaced by a
// huge value, O, LSE and dQ are the same bit for bit, and so are dK and dV of the rows
// read (the others get nothing). The queries: the last 8 of a 1,100-token document (34
// earlier blocks of 32), top_blocks 1, two groups: at most 16 blocks are read.
TEST(BlockSparse, GivenMeansReadOnlySelectedBlocks) {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    Problem pr = sparse(1, {0, 1100});
    pr.precision = precision;
    const AttentionParams p = pr.params();
    const int64_t T = 1100, width = pr.KV * pr.hd, B = 32, n = 8;
    const std::vector<AttentionTask> tasks = {AttentionTask{T - n, 0, int32_t(n), int32_t(T), int32_t(T - n), 0, int32_t(T)}};
    const AttentionTask& t = tasks[0];
    const std::vector<float> q = random_vector(T * pr.H * pr.hd, 31), k0 = random_vector(T * width, 32),
                             v0 = random_vector(T * width, 33), dout = random_vector(T * pr.H * pr.hd, 34);
    const int64_t L = (T - 1) / B;
    const std::vector<double> kbar = block_means_of(p, k0, L);
    const std::vector<BlockMeans> means = {BlockMeans{kbar.data(), L}};
    std::vector<int32_t> from_k, given;
    select_blocks(p, t, t.q_row, t.q_row + n, q.data(), k0.data(), from_k);
    select_blocks(p, t, t.q_row, t.q_row + n, q.data(), nullptr, given, &means[0]);
    ASSERT_EQ(from_k, given);
    std::vector<char> read(size_t(T), 0);
    for (int64_t j = (T - n) / B * B; j < T; ++j) read[size_t(j)] = 1;  // own blocks
    for (const int32_t m : given)
      if (m >= 0) std::fill_n(read.begin() + m * B, B, char(1));
    std::vector<float> k = k0, v = v0;
    int64_t unread = 0;
    for (int64_t row = 0; row < T; ++row)
      if (!read[size_t(row)]) {
        ++unread;
        std::fill_n(k.begin() + row * width, width, 1e30f);
        std::fill_n(v.begin() + row * width, width, -1e30f);
      }
    ASSERT_GE(unread, 18 * B);  // 34 earlier blocks, at most 8 x 2 selected
    const auto run = [&](const std::vector<float>& kk, const std::vector<float>& vv, std::span<const BlockMeans> mm) {
      KernelRun r;
      r.o.assign(q.size(), 0), r.lse.assign(size_t(T * pr.H), 0), r.dq.assign(q.size(), 0);
      r.dk.assign(kk.size(), 0), r.dv.assign(vv.size(), 0);
      block_sparse_forward(p, tasks, q.data(), kk.data(), vv.data(), r.o.data(), r.lse.data(), mm);
      block_sparse_backward(p, tasks, q.data(), kk.data(), vv.data(), r.o.data(), r.lse.data(), dout.data(),
                            r.dq.data(), r.dk.data(), r.dv.data(), mm);
      return r;
    };
    const KernelRun ref = run(k0, v0, {}), ours = run(k, v, means);
    EXPECT_EQ(ours.o, ref.o);
    EXPECT_EQ(ours.lse, ref.lse);
    EXPECT_EQ(ours.dq, ref.dq);
    for (int64_t row = 0; row < T; ++row)
      for (int64_t c = 0; c < width; ++c) {
        const size_t i = size_t(row * width + c);
        ASSERT_EQ(ours.dk[i], read[size_t(row)] ? ref.dk[i] : 0.0f) << row;
        ASSERT_EQ(ours.dv[i], read[size_t(row)] ? ref.dv[i] : 0.0f) << row;
      }
  }
}

// With given means a task may hold any range of its document's keys (a ring step): the
// partial (O, LSE) of ranges cut anywhere (inside blocks too), merged, equal the whole
// prefix's, and their backwards (each with the merged O and LSE) add up to its gradients.
// Not bit for bit: the merge rounds its weights to fp32 and the kernel sums each range
// in its own order; the bound is 64 ulps of the outputs' and gradients' scale.
TEST(BlockSparse, KeyRangesMergeToTheWholePrefix) {
  Problem pr = sparse(2, {0, 1100});
  const AttentionParams p = pr.params();
  const int64_t T = 1100, width = pr.KV * pr.hd, B = 32, H = pr.H, hd = pr.hd;
  const AttentionTask whole{600, 0, int32_t(T - 600), int32_t(T), 600, 0, int32_t(T)};
  const std::vector<float> q = random_vector(T * H * hd, 41), k = random_vector(T * width, 42),
                           v = random_vector(T * width, 43), dout = random_vector(T * H * hd, 44);
  const int64_t L = (T - 1) / B;
  const std::vector<double> kbar = block_means_of(p, k, L);
  const std::vector<BlockMeans> means = {BlockMeans{kbar.data(), L}};
  std::vector<float> o(q.size(), 0), lse(size_t(T * H), -INFINITY), dq(q.size(), 0), dk(k.size(), 0), dv(v.size(), 0);
  block_sparse_forward(p, {&whole, 1}, q.data(), k.data(), v.data(), o.data(), lse.data());
  block_sparse_backward(p, {&whole, 1}, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                        dk.data(), dv.data());
  const std::vector<int64_t> cuts = {0, 45, 300, 301, 640, 1000, T};
  // the ranges' K and V rows sit `shift` rows after their positions (as in a received
  // block: kv_row is not kv_pos)
  const int64_t shift = 7;
  std::vector<float> ks(size_t((T + shift) * width), 0.0f), vs(ks.size(), 0.0f);
  std::copy(k.begin(), k.end(), ks.begin() + shift * width);
  std::copy(v.begin(), v.end(), vs.begin() + shift * width);
  std::vector<float> mo(q.size(), 0.0f), mlse(size_t(T * H), -INFINITY), po(q.size()), plse(size_t(T * H));
  std::vector<AttentionTask> ranges;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    AttentionTask t = whole;
    t.kv_row = cuts[i] + shift, t.kv_pos = int32_t(cuts[i]), t.kv_len = int32_t(cuts[i + 1] - cuts[i]);
    ranges.push_back(t);
    std::fill(plse.begin(), plse.end(), -INFINITY);
    block_sparse_forward(p, {&t, 1}, q.data(), ks.data(), vs.data(), po.data(), plse.data(), means);
    merge_attention_partial(mo.data(), mlse.data(), po.data(), plse.data(), T, int(H), int(hd));
  }
  const auto near = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    float scale = 0;
    for (const float x : b)
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) {
        ASSERT_NEAR(a[i], b[i], 64 * 0x1p-24 * scale) << what << " " << i;
      }
  };
  near(mo, o, "O");
  near(mlse, lse, "LSE");
  std::vector<float> gq(q.size(), 0), gks(ks.size(), 0), gvs(vs.size(), 0);
  for (const AttentionTask& t : ranges)
    block_sparse_backward(p, {&t, 1}, q.data(), ks.data(), vs.data(), o.data(), lse.data(), dout.data(), gq.data(),
                          gks.data(), gvs.data(), means);
  for (int64_t e = 0; e < shift * width; ++e) {
    ASSERT_EQ(gks[size_t(e)], 0.0f);
    ASSERT_EQ(gvs[size_t(e)], 0.0f);
  }
  const std::vector<float> gk(gks.begin() + shift * width, gks.end()), gv(gvs.begin() + shift * width, gvs.end());
  near(gq, dq, "dQ");
  near(gk, dk, "dK");
  near(gv, dv, "dV");
  // a range holding no key a query reads leaves its LSE at -inf
  AttentionTask none = whole;
  none.q_row = 1090, none.q_pos = 1090, none.q_len = 1;  // block 34: its own block and 2 of 0..33
  std::vector<int32_t> chosen;
  select_blocks(p, none, 1090, 1091, q.data(), nullptr, chosen, &means[0]);
  int64_t unread = 0;
  while (std::find(chosen.begin(), chosen.end(), int32_t(unread)) != chosen.end()) ++unread;
  none.kv_row = unread * B, none.kv_pos = int32_t(unread * B), none.kv_len = int32_t(B);
  std::fill(plse.begin(), plse.end(), -INFINITY);
  block_sparse_forward(p, {&none, 1}, q.data(), k.data(), v.data(), po.data(), plse.data(), means);
  for (int64_t h = 0; h < H; ++h) EXPECT_EQ(plse[size_t(1090 * H + h)], -INFINITY);
}

// A top_blocks or block_size beyond what any document has is legal (issue 87 item 7) and
// is its clamped value bit for bit: top_blocks 2,147,483,647 selects every earlier block,
// as k = 7 does for the 247-token document (its last query's block is 7), and a block of
// 2,147,483,647 positions is one block per document, as one of 247 is; both at once too.
// (Before, the kernel allocated a selection entry per query, group and top block: 4 TiB.)
TEST(BlockSparse, HugeKeysAreTheirClampedValues) {
  constexpr int32_t kHuge = std::numeric_limits<int32_t>::max();
  const std::vector<int32_t> docs = {0, 20, 52, 53, 300};
  const auto same = [](const KernelRun& a, const KernelRun& b, const char* what) {
    EXPECT_EQ(a.o, b.o) << what;
    EXPECT_EQ(a.lse, b.lse) << what;
    EXPECT_EQ(a.dq, b.dq) << what;
    EXPECT_EQ(a.dk, b.dk) << what;
    EXPECT_EQ(a.dv, b.dv) << what;
  };
  Problem pr = sparse(7, docs);
  const KernelRun clamped_k = run_kernel(pr, 17);
  pr.mask.top_blocks = kHuge;
  same(run_kernel(pr, 17), clamped_k, "top_blocks");
  pr.mask = {MaskKind::block_sparse, 1, 0, 247, 2};
  const KernelRun clamped_b = run_kernel(pr, 17);
  pr.mask.block_size = kHuge;
  same(run_kernel(pr, 17), clamped_b, "block_size");
  pr.mask.top_blocks = kHuge;
  same(run_kernel(pr, 17), clamped_b, "both");
}

// The workspace estimate is sized by what a document can select, not by the settings: for a
// 256-token run (key rows bound the documents) at the default block of 8,192, no query has
// an earlier block, so top_blocks 2,147,483,647 estimates exactly as top_blocks 0 (it was
// 8,256 GiB); at blocks of 16, as 15, the most a 256-token document's queries can select.
// The bound, from the kernel's buffers for 256 rows of G = 4 heads, hd = 64: K, V, dK, dV
// of 256 keys (16 hd 256 B = 256 KiB), Q, O, dO, dQ, part O and 3 LSEs of 258 gathered
// rows (4 (5 G hd + 3 G) 258 B = 1.3 MB), the selection, means and offsets (a few KiB),
// and each thread's scores (8 (8 (256 / B + 1) + 8 hd) B = 4.2 KiB): under 2 MiB and 8 KiB
// a thread. A block of 2,147,483,647 positions for 4 tokens (lct generate's, refused as 512
// GiB before) is a block of 4: under 1 MiB and 8 KiB a thread.
TEST(BlockSparse, WorkspaceIsSizedByWhatADocumentSelects) {
  constexpr int32_t kHuge = std::numeric_limits<int32_t>::max();
  AttentionParams p;
  p.num_heads = 8, p.num_kv_heads = 2, p.head_dim = 64, p.scale = 0.125f;
  p.mask = {MaskKind::block_sparse, 1, 0, 8192, kHuge};
  const int64_t huge = block_sparse_workspace_bytes(p, 256, 256);
  EXPECT_LE(huge, 2 * 1048576 + 8192 * int64_t(omp_get_max_threads()));
  p.mask.top_blocks = 0;
  EXPECT_EQ(huge, block_sparse_workspace_bytes(p, 256, 256));
  p.mask = {MaskKind::block_sparse, 1, 0, 16, kHuge};
  const int64_t small_blocks = block_sparse_workspace_bytes(p, 256, 256);
  p.mask.top_blocks = 15;
  EXPECT_EQ(small_blocks, block_sparse_workspace_bytes(p, 256, 256));
  p.mask = {MaskKind::block_sparse, 1, 0, kHuge, 3};
  const int64_t huge_block = block_sparse_workspace_bytes(p, 4, 4);
  EXPECT_LE(huge_block, 1048576 + 8192 * int64_t(omp_get_max_threads()));
  p.mask.block_size = 4;
  EXPECT_EQ(huge_block, block_sparse_workspace_bytes(p, 4, 4));
  p.mask.block_size = kHuge, p.mask.top_blocks = kHuge;
  EXPECT_LE(attention_workspace_bytes(p, 256, 256, 2), 16 * 1048576);  // the whole kernel's, 2 threads
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
