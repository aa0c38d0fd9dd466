// Non-finite inputs through every attention kernel (issue 87): a NaN, +inf or -inf planted
// at a random place of Q, K or V, under every mask and DCA, in fp32 and both bf16 ways,
// forward and backward. The rule (core_attention.h): every query row (of one head) that
// reads the planted value (its own Q, or the K or V of a key it reads) gets O = LSE = NaN,
// never the no-key branch's O = 0, LSE = -inf nor a finite number; every other row gets
// what it gets with the value finite; and every gradient an affected row touches (its dQ,
// the dK and dV of each key it reads) is not finite. The merge of context-parallel parts
// keeps a NaN part NaN and a part without keys neutral.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/block_sparse.h"
#include "attention/core_attention.h"
#include "compute/bf16_tiles.h"
#include "compute/gemm.h"
#include "tests/attention/dense_attention.h"
#include "tests/test_util.h"

namespace lct::non_finite_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// 3 documents: 5 tokens, 70 (across a 64-row query tile), 300 (two 256-row key blocks, so
// tiles read blocks whole and in part); the last two start at odd rows (the native
// kernel's value pairs then hold a row of the document before).
const std::vector<int32_t> kDocs = {0, 5, 75, 375};

constexpr MaskKind kAllMasks[] = {MaskKind::causal,          MaskKind::sliding_window,       MaskKind::sink_window,
                                  MaskKind::chunked,         MaskKind::prefix_lm,            MaskKind::shared_question,
                                  MaskKind::full_document,   MaskKind::bidirectional_window, MaskKind::causal_blockwise,
                                  MaskKind::block_sparse};

// W = 50, S = 4, B = 96 (block_sparse: 32, so that the long document's later queries choose
// 2 of up to 8 earlier blocks), prefixes and segments of a few tokens to most of a document.
Problem problem(MaskKind kind) {
  Problem pr{4, 2, 16, kDocs};
  pr.mask = {kind, 50, 4, kind == MaskKind::block_sparse ? 32 : 96, 2};
  if (kind == MaskKind::prefix_lm) pr.prefix_lens = {2, 30, 120};
  if (kind == MaskKind::shared_question)
    for (size_t d = 0; d + 1 < pr.cu.size(); ++d) {
      const int32_t L = pr.cu[d + 1] - pr.cu[d], question = std::max(1, L / 4);
      for (int32_t t = 0; t < L; ++t) pr.segment_ids.push_back(t < question ? 0 : 1 + (t - question) / 20);
    }
  return pr;
}

// DCA (causal mask): chunks of s = C - w = 80 tokens, RoPE table for positions 0..C.
constexpr int kDcaChunk = 100, kDcaLocal = 20;
struct RopeTable {
  std::vector<float> cos, sin;
};
const RopeTable& rope_table(int hd) {
  static const RopeTable table = [hd] {
    RopeTable t;
    const int half = hd / 2;
    for (int p = 0; p <= kDcaChunk; ++p)
      for (int c = 0; c < half; ++c) {
        const double a = p * std::pow(10000.0, -2.0 * c / hd);
        t.cos.push_back(float(std::cos(a)));
        t.sin.push_back(float(std::sin(a)));
      }
    return t;
  }();
  return table;
}

AttentionParams params_of(const Problem& pr, bool dca) {
  AttentionParams p = pr.params();
  if (dca) {
    const RopeTable& rope = rope_table(pr.hd);
    p.kernel = AttentionKernel::dca;
    p.dca.chunk_size = kDcaChunk;
    p.dca.local_size = kDcaLocal;
    p.dca.rope_cos = rope.cos.data();
    p.dca.rope_sin = rope.sin.data();
    p.dca.rope_positions = kDcaChunk + 1;
  }
  return p;
}

// The bf16 ways: rounded operands through SGEMM everywhere, the AVX512-BF16 tiles where the
// CPU has them (automatic; on other CPUs the same as rounded, so not run twice).
struct Arith {
  Precision precision;
  Bf16Kernel kernel;
  const char* name;
};
std::vector<Arith> ariths() {
  std::vector<Arith> a = {{Precision::fp32, Bf16Kernel::automatic, "fp32"},
                          {Precision::bf16, Bf16Kernel::rounded, "bf16 rounded"}};
  if (bf16_support().instructions && bf16_tiles::available())
    a.push_back({Precision::bf16, Bf16Kernel::automatic, "bf16 native"});
  return a;
}

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};
Outputs run(const AttentionParams& p, const std::vector<AttentionTask>& tasks, const std::vector<float>& q,
        const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout, bool backward) {
  Outputs r;
  r.o.assign(q.size(), 0.0f);
  r.lse.assign(q.size() / size_t(p.head_dim), 0.0f);
  attention_forward(p, tasks, q.data(), k.data(), v.data(), r.o.data(), r.lse.data());
  if (backward) {
    r.dq.assign(q.size(), 0.0f), r.dk.assign(k.size(), 0.0f), r.dv.assign(v.size(), 0.0f);
    attention_backward(p, tasks, q.data(), k.data(), v.data(), r.o.data(), r.lse.data(), dout.data(), r.dq.data(),
                       r.dk.data(), r.dv.data());
  }
  return r;
}

bool any_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

enum class Tensor { q, k, v };
const char* tensor_name(Tensor t) { return t == Tensor::q ? "Q" : t == Tensor::k ? "K" : "V"; }

// A planted value: row, head (a query head in Q, a kv head in K and V), dimension.
struct Poison {
  Tensor tensor;
  int64_t row, head, dim;
  float value;
  std::string describe() const {
    return std::string(tensor_name(tensor)) + "[" + std::to_string(row) + ", " + std::to_string(head) + ", " +
           std::to_string(dim) + "] = " + std::to_string(value);
  }
};

// The value under which the block means count a non-finite key value (block_sparse.h: NaN
// as 0, infinities as +-2^31): K with it instead selects as K with the poison does, so its
// run is what the rows that do not read the poisoned key must give.
float as_block_means_count(float x) {
  if (std::isnan(x)) return 0.0f;
  if (std::isinf(x)) return std::copysign(2147483648.0f, x);
  return x;
}

// block_sparse: the kernel's own selection of the (poisoned) inputs, [T][KV][top_blocks]
// as Problem::visible reads it (whole-document tasks).
std::vector<int32_t> kernel_selection(const Problem& pr, const AttentionParams& p, const std::vector<AttentionTask>& tasks,
                                      const std::vector<float>& q, const std::vector<float>& k) {
  std::vector<int32_t> all(size_t(pr.T() * pr.KV * pr.mask.top_blocks), -1), part;
  for (const AttentionTask& t : tasks) {
    select_blocks(p, t, t.q_row, t.q_row + t.q_len, q.data(), k.data(), part);
    std::copy(part.begin(), part.end(), all.begin() + t.q_row * pr.KV * pr.mask.top_blocks);
  }
  return all;
}

size_t document_of(const Problem& pr, int64_t row) {
  size_t d = 0;
  while (pr.cu[d + 1] <= row) ++d;
  return d;
}

// One planted value under one kernel, mask and arithmetic: the property above. The rows
// that do not read it equal the clean run bit for bit where the kernel does the same
// arithmetic for them (a poisoned Q or K changes only the scores of the rows that read
// it); within the tolerance of regrouped rows where it may not (a value block with the
// poison is multiplied from a copy without it, with another row stride; block_sparse
// gathers other rows into its batches' products once a query selects nothing).
void check_poison(const Problem& pr, const AttentionParams& p, const std::vector<AttentionTask>& tasks,
                  const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                  const std::vector<float>& dout, const Outputs& clean, const Poison& x, const std::string& what) {
  const int64_t H = pr.H, KV = pr.KV, hd = pr.hd, G = H / KV, T = pr.T();
  std::vector<float> q2 = q, k2 = k, v2 = v;
  const int64_t at = x.row * (x.tensor == Tensor::q ? H : KV) * hd + x.head * hd + x.dim;
  (x.tensor == Tensor::q ? q2 : x.tensor == Tensor::k ? k2 : v2)[size_t(at)] = x.value;
  const Outputs bad = run(p, tasks, q2, k2, v2, dout, true);
  Outputs ref_k;  // K poisoned: the clean run with the value the block means count instead
  if (x.tensor == Tensor::k) {
    std::vector<float> k3 = k;
    k3[size_t(at)] = as_block_means_count(x.value);
    ref_k = run(p, tasks, q, k3, v, dout, false);
  }
  const Outputs& ref = x.tensor == Tensor::k ? ref_k : clean;
  const bool sparse = pr.mask.kind == MaskKind::block_sparse;
  Problem vis = pr;
  if (sparse) vis.selected = kernel_selection(pr, p, tasks, q2, k2);
  const size_t d = document_of(pr, x.row);
  const int64_t b = pr.cu[d], e = pr.cu[d + 1];
  const std::string where = what + ", " + x.describe();

  // the affected rows (row * H + head)
  std::vector<char> affected(size_t(T * H), 0);
  if (x.tensor == Tensor::q) {
    affected[size_t(x.row * H + x.head)] = 1;
    if (sparse) {  // its mean query is not finite: a query that chooses selects nothing, its group is NaN
      const int64_t g = x.head / G, B = pr.mask.block_size;
      const bool chooses = (x.row - b) / B > pr.mask.top_blocks;
      const int32_t first = vis.selected[size_t((x.row * KV + g) * pr.mask.top_blocks)];
      EXPECT_EQ(first == kNonFiniteSelection, chooses) << where;
      if (chooses)
        for (int64_t h = g * G; h < (g + 1) * G; ++h) affected[size_t(x.row * H + h)] = 1;
    }
  } else {
    if (sparse) {  // block means from K are finite: no selection turns non-finite
      for (const int32_t m : vis.selected) ASSERT_NE(m, kNonFiniteSelection) << where;
    }
    for (int64_t i = b; i < e; ++i)
      if (vis.visible(d, i - b, x.row - b, int(x.head)))
        for (int64_t h = x.head * G; h < (x.head + 1) * G; ++h) affected[size_t(i * H + h)] = 1;
  }

  // forward: affected rows NaN, the others as the clean run
  const bool exact = !sparse && x.tensor != Tensor::v;
  int64_t n_affected = 0, wrong_affected = 0, wrong_other = 0;
  std::string first_affected, first_other;
  for (int64_t r = 0; r < T * H; ++r) {
    const float* o = bad.o.data() + r * hd;
    const float* o_ref = ref.o.data() + r * hd;
    if (affected[size_t(r)]) {
      ++n_affected;
      bool all_nan = std::isnan(bad.lse[size_t(r)]);
      for (int64_t c = 0; c < hd; ++c) all_nan = all_nan && std::isnan(o[c]);
      if (!all_nan && wrong_affected++ == 0)
        first_affected = "row " + std::to_string(r / H) + " head " + std::to_string(r % H) + ": LSE " +
                         std::to_string(bad.lse[size_t(r)]) + ", O[0] " + std::to_string(o[0]);
      continue;
    }
    bool same = true;
    for (int64_t c = -1; c < hd; ++c) {  // -1: the LSE
      const float a = c < 0 ? bad.lse[size_t(r)] : o[c], want = c < 0 ? ref.lse[size_t(r)] : o_ref[c];
      same = same && (exact ? a == want : std::fabs(a - want) <= 1e-6f * (1 + std::fabs(want)));
    }
    if (!same && wrong_other++ == 0)
      first_other = "row " + std::to_string(r / H) + " head " + std::to_string(r % H) + ": LSE " +
                    std::to_string(bad.lse[size_t(r)]) + " vs " + std::to_string(ref.lse[size_t(r)]) + ", O[0] " +
                    std::to_string(o[0]) + " vs " + std::to_string(o_ref[0]);
  }
  EXPECT_GT(n_affected, 0) << where;
  EXPECT_EQ(wrong_affected, 0) << where << ": rows reading it must give O = LSE = NaN; first: " << first_affected;
  EXPECT_EQ(wrong_other, 0) << where << ": rows not reading it must not change; first: " << first_other;

  // backward: what the affected rows touch is not finite
  int64_t wrong_grads = 0;
  std::string first_grad;
  const auto expect_non_finite = [&](const std::vector<float>& grad, int64_t row, int64_t width, int64_t head,
                                     const char* name) {
    if (!any_non_finite(grad.data() + (row * width + head) * hd, hd) && wrong_grads++ == 0)
      first_grad = std::string(name) + " of row " + std::to_string(row) + " head " + std::to_string(head);
  };
  for (int64_t r = 0; r < T * H; ++r) {
    if (!affected[size_t(r)]) continue;
    const int64_t i = r / H, h = r % H, g = h / G;
    expect_non_finite(bad.dq, i, H, h, "dQ");
    if (x.tensor == Tensor::q)  // the keys it reads
      for (int64_t j = b; j < e; ++j)
        if (vis.visible(d, i - b, j - b, int(g))) {
          expect_non_finite(bad.dk, j, KV, g, "dK");
          expect_non_finite(bad.dv, j, KV, g, "dV");
        }
  }
  if (x.tensor != Tensor::q) {  // the poisoned key, which its affected rows read
    expect_non_finite(bad.dk, x.row, KV, x.head, "dK");
    expect_non_finite(bad.dv, x.row, KV, x.head, "dV");
  }
  EXPECT_EQ(wrong_grads, 0) << where << ": gradients the affected rows touch must not be finite; first: " << first_grad;
}

// Every mask and DCA, fp32 and bf16 both ways: NaN, +inf and -inf in Q, K and V, each at a
// random place (seeded), 9 plants per kernel and arithmetic.
TEST(NonFinite, PoisonedRowsAreNaNAndOthersUnchanged) {
  struct Kind {
    MaskKind mask;
    bool dca;
  };
  std::vector<Kind> kinds;
  for (const MaskKind m : kAllMasks) kinds.push_back({m, false});
  kinds.push_back({MaskKind::causal, true});
  uint64_t seed = 87;
  for (const Kind& kind : kinds)
    for (const Arith& a : ariths()) {
      Problem pr = problem(kind.mask);
      pr.precision = a.precision;
      pr.bf16_kernel = a.kernel;
      const AttentionParams p = params_of(pr, kind.dca);
      const std::vector<AttentionTask> tasks = tasks_for_documents(pr.cu, pr.mask_data());
      const int64_t T = pr.T();
      const std::vector<float> q = random_vector(T * pr.H * pr.hd, seed), k = random_vector(T * pr.KV * pr.hd, seed + 1),
                               v = random_vector(T * pr.KV * pr.hd, seed + 2),
                               dout = random_vector(T * pr.H * pr.hd, seed + 3);
      const Outputs clean = run(p, tasks, q, k, v, dout, false);
      for (const float x : clean.lse) ASSERT_TRUE(std::isfinite(x));
      std::mt19937_64 rng(seed);
      const std::string what = std::string(kind.dca ? "dca" : mask_kind_name(kind.mask)) + ", " + a.name;
      for (const Tensor t : {Tensor::q, Tensor::k, Tensor::v})
        for (const float value : {kNaN, kInf, -kInf}) {
          const int64_t heads = t == Tensor::q ? pr.H : pr.KV;
          const int64_t row = int64_t(rng() % uint64_t(T)), head = int64_t(rng() % uint64_t(heads)),
                        dim = int64_t(rng() % uint64_t(pr.hd));
          check_poison(pr, p, tasks, q, k, v, dout, clean, Poison{t, row, head, dim, value}, what);
        }
      seed += 10;
    }
}

// Planted where the kernel's tiles make it hardest: in V of the first and last key of a
// 256-row key block and of a document, whose value rows share the products (and, natively,
// value pairs) of rows that must not see them; under the causal mask (the diagonal block:
// earlier rows of the tile do not read the key) and a sliding window (the window's first
// block).
TEST(NonFinite, PoisonedValuesNeverReachRowsThatHideThem) {
  for (const MaskKind kind : {MaskKind::causal, MaskKind::sliding_window})
    for (const Arith& a : ariths()) {
      Problem pr = problem(kind);
      pr.precision = a.precision;
      pr.bf16_kernel = a.kernel;
      const AttentionParams p = params_of(pr, false);
      const std::vector<AttentionTask> tasks = tasks_for_documents(pr.cu, pr.mask_data());
      const int64_t T = pr.T();
      const std::vector<float> q = random_vector(T * pr.H * pr.hd, 5), k = random_vector(T * pr.KV * pr.hd, 6),
                               v = random_vector(T * pr.KV * pr.hd, 7), dout = random_vector(T * pr.H * pr.hd, 8);
      const Outputs clean = run(p, tasks, q, k, v, dout, false);
      const std::string what = std::string(mask_kind_name(kind)) + ", " + a.name;
      // the documents' first and last keys; the long one's keys 255 and 256 (its key blocks
      // start at row 75)
      for (const int64_t row : {4, 5, 74, 75, 75 + 255, 75 + 256, 374})
        for (const float value : {kNaN, kInf})
          check_poison(pr, p, tasks, q, k, v, dout, clean, Poison{Tensor::v, row, row % 2, 3, value}, what);
    }
}

// A document's keys in two ranges, their partial (O, LSE) merged (a context-parallel
// ring's steps): a NaN in V of the second range makes the merged rows that read it NaN,
// and the rows before it (which the second range gives no key: LSE -inf) equal the whole
// document's run.
TEST(NonFinite, MergedPartsKeepNaNRowsAndNeutralParts) {
  const int H = 2, KV = 1, hd = 16;
  const int64_t T = 300, cut = 150, poisoned = 200;
  Problem pr{H, KV, hd, {0, int32_t(T)}};
  const AttentionParams p = pr.params();
  const std::vector<float> q = random_vector(T * H * hd, 11), k = random_vector(T * KV * hd, 12);
  std::vector<float> v = random_vector(T * KV * hd, 13);
  v[size_t(poisoned * KV * hd + 5)] = kNaN;
  const AttentionTask whole{0, 0, int32_t(T), int32_t(T), 0, 0, int32_t(T)};
  std::vector<float> o(size_t(T * H * hd)), lse(size_t(T * H));
  attention_forward(p, {&whole, 1}, q.data(), k.data(), v.data(), o.data(), lse.data());
  std::vector<float> mo(o.size(), 0.0f), mlse(lse.size(), -kInf);
  for (const auto& [k0, kn] : {std::pair<int64_t, int64_t>{0, cut}, {cut, T - cut}}) {
    const AttentionTask part{0, k0, int32_t(T), int32_t(kn), 0, int32_t(k0), int32_t(T)};
    std::vector<float> po(o.size(), 0.0f), plse(lse.size(), -kInf);
    attention_forward(p, {&part, 1}, q.data(), k.data(), v.data(), po.data(), plse.data());
    merge_attention_partial(mo.data(), mlse.data(), po.data(), plse.data(), T, H, hd);
  }
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t r = i * H + h;
      if (i >= poisoned) {
        ASSERT_TRUE(std::isnan(mlse[size_t(r)]) && std::isnan(lse[size_t(r)])) << i;
        for (int64_t c = 0; c < hd; ++c) ASSERT_TRUE(std::isnan(mo[size_t(r * hd + c)])) << i;
        continue;
      }
      // (the merge's own rounding, as in AttentionMerge's tests)
      ASSERT_NEAR(mlse[size_t(r)], lse[size_t(r)], 1e-5 * (1 + std::fabs(lse[size_t(r)]))) << i;
      for (int64_t c = 0; c < hd; ++c)
        ASSERT_NEAR(mo[size_t(r * hd + c)], o[size_t(r * hd + c)], 1e-5 * (1 + std::fabs(o[size_t(r * hd + c)]))) << i;
    }
}

// merge_attention_partial by cases, one row each: a NaN part into a finite row, a NaN
// part into an empty row (its O finite: a NaN LSE is enough), a finite part into a NaN row,
// a part of LSE +inf; and a part with LSE -inf (no key) changes nothing, whatever its O.
TEST(NonFinite, MergeByCases) {
  const int H = 1, hd = 2;
  //                      a: lse  o          part: lse  o
  struct Case {
    float a, o0, o1, b, p0, p1;
    bool nan;  // the merged row is NaN (else: the row unchanged)
  };
  const std::vector<Case> cases = {
      {0.5f, 1, 2, kNaN, kNaN, kNaN, true},  {-kInf, 0, 0, kNaN, 3, 4, true}, {kNaN, kNaN, kNaN, 0.5f, 3, 4, true},
      {0.5f, 1, 2, kInf, 3, 4, true},       {-kInf, 0, 0, kInf, 3, 4, true}, {0.5f, 1, 2, -kInf, kNaN, kInf, false},
      {kNaN, kNaN, kNaN, -kInf, 3, 4, true}, {-kInf, 0, 0, -kInf, kNaN, 1, false}};
  for (size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    std::vector<float> o = {c.o0, c.o1}, lse = {c.a};
    const std::vector<float> po = {c.p0, c.p1}, plse = {c.b};
    merge_attention_partial(o.data(), lse.data(), po.data(), plse.data(), 1, H, hd);
    if (c.nan) {
      EXPECT_TRUE(std::isnan(lse[0]) && std::isnan(o[0]) && std::isnan(o[1])) << "case " << n << ": " << lse[0];
    } else {
      EXPECT_TRUE(lse[0] == c.a || (std::isnan(lse[0]) && std::isnan(c.a))) << "case " << n;
      EXPECT_TRUE(o[0] == c.o0 && o[1] == c.o1) << "case " << n;
    }
  }
}

}  // namespace
}  // namespace lct::non_finite_test
