// The CAD planner (parallel/cad_plan.h), in one process: every query row assigned
// once, pairs conserved, deterministic, balanced within the tolerance when splitting
// allows it, and nothing moved when the batch is already balanced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <map>
#include <random>

#include "parallel/cad_cost.h"
#include "src/tune/cad_profile.h"
#include "parallel/cad_plan.h"
#include "attention/core_attention.h"
#include "data/context_shards.h"
#include "data/packing.h"
#include "model/rope.h"
#include "tests/attention/dense_attention.h"

namespace lct::cad_test {  // the file's own namespace: a unity build compiles test files together
namespace {

// n servers, each with `tokens` tokens of documents of random lengths (heavy tail).
std::vector<CadPiece> random_tick(int n, int32_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<CadPiece> docs;
  for (int s = 0; s < n; ++s) {
    int32_t row = 0, doc = 0;
    while (row < tokens) {
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      int32_t len = int32_t(1 + std::pow(u, 4.0) * tokens);  // mostly short, some long
      len = std::min(len, tokens - row);
      docs.push_back({s, doc++, row, len});
      row += len;
    }
  }
  return docs;
}

int64_t pairs_of(const CadTask& t) {
  return prefix_pairs(t.q_begin, t.q_len);
}

void check_plan(const std::vector<CadPiece>& docs, int n, const CadPlan& plan) {
  std::map<std::pair<int32_t, int32_t>, std::vector<int>> owners;  // (origin, doc) -> row count
  std::map<std::pair<int32_t, int32_t>, int32_t> first;               // (origin, doc) -> pos
  for (const CadPiece& d : docs) {
    owners[{d.origin, d.doc}].assign(size_t(d.len), 0);
    first[{d.origin, d.doc}] = d.pos;
  }
  int64_t before = 0, after = 0;
  for (const CadTask& t : plan.tasks) {
    auto& rows = owners.at({t.origin, t.doc});
    const int32_t pos = first.at({t.origin, t.doc});
    ASSERT_GT(t.q_len, 0);
    for (int32_t i = t.q_begin; i < t.q_begin + t.q_len; ++i) ++rows.at(size_t(i - pos));
    after += pairs_of(t);
  }
  for (const auto& [key, rows] : owners)
    for (int c : rows) ASSERT_EQ(c, 1) << "origin " << key.first << " doc " << key.second;
  for (int s = 0; s < n; ++s) before += plan.pairs_before[size_t(s)];
  EXPECT_EQ(before, after);
  int64_t sum_after = 0;
  for (int64_t p : plan.pairs_after) sum_after += p;
  EXPECT_EQ(sum_after, after);
}

double max_over_mean(const std::vector<int64_t>& v) {
  double mx = 0, sum = 0;
  for (int64_t x : v) mx = std::max(mx, double(x)), sum += double(x);
  return mx / (sum / double(v.size()));
}

TEST(CadPlan, EveryRowOnceConservedDeterministicAndBalanced) {
  for (int n : {2, 3, 4, 8, 16})
    for (uint32_t seed = 1; seed <= 20; ++seed)
      for (double tol : {0.05, 0.1, 0.2}) {
        const std::vector<CadPiece> docs = random_tick(n, 2048, seed * 31 + uint32_t(n));
        CadPlanOptions o;
        o.tolerance = tol;
        o.q_bytes_per_row = 3 * 256;
        o.kv_bytes_per_row = 2 * 128;
        const CadPlan plan = plan_core_attention(docs, n, o);
        check_plan(docs, n, plan);
        const CadPlan again = plan_core_attention(docs, n, o);
        ASSERT_EQ(again.tasks.size(), plan.tasks.size());
        for (size_t i = 0; i < plan.tasks.size(); ++i) {
          EXPECT_EQ(again.tasks[i].server, plan.tasks[i].server);
          EXPECT_EQ(again.tasks[i].q_begin, plan.tasks[i].q_begin);
          EXPECT_EQ(again.tasks[i].q_len, plan.tasks[i].q_len);
        }
        // head/tail splitting moves work in units of L + 1 pairs, far below the
        // tolerance of 2048-token ticks: the plan must meet it
        EXPECT_LE(max_over_mean(plan.pairs_after), 1.0 + tol + 1e-9)
            << "n " << n << " seed " << seed << " before " << max_over_mean(plan.pairs_before);
      }
}

// With a mask the planner balances the pairs the mask lets through: a sliding window
// (linear work per document), sinks and chunks, every row once, pairs conserved, within
// tolerance.
TEST(CadPlan, MasksBalanceTheirUnmaskedPairs) {
  for (const AttentionMask mask : {AttentionMask{MaskKind::sliding_window, 256, 0, 1},
                                   AttentionMask{MaskKind::sink_window, 128, 4, 1},
                                   AttentionMask{MaskKind::chunked, 1, 0, 300}})
    for (int n : {2, 4, 8})
      for (uint32_t seed = 1; seed <= 10; ++seed) {
        const std::vector<CadPiece> docs = random_tick(n, 4096, seed * 17 + uint32_t(n));
        CadPlanOptions o;
        o.tolerance = 0.1;
        o.mask = mask;
        const CadPlan plan = plan_core_attention(docs, n, o);
        std::map<std::pair<int32_t, int32_t>, int32_t> rows;
        int64_t before = 0, after = 0;
        for (const CadPiece& d : docs) {
          rows[{d.origin, d.doc}] = 0;
          before += prefix_pairs(d.pos, d.len, mask);
        }
        std::vector<int64_t> served(size_t(n), 0);  // counted here, not by the planner
        for (const CadTask& t : plan.tasks) {
          rows[{t.origin, t.doc}] += t.q_len;
          const int64_t p = prefix_pairs(t.q_begin, t.q_len, mask);
          after += p;
          served[size_t(t.server)] += p;
        }
        for (const CadPiece& d : docs) ASSERT_EQ((rows[{d.origin, d.doc}]), d.len);
        EXPECT_EQ(before, after) << mask_kind_name(mask.kind);
        EXPECT_EQ(served, plan.pairs_after);
        EXPECT_LE(max_over_mean(served), 1.1 + 1e-9)
            << mask_kind_name(mask.kind) << " n " << n << " seed " << seed << " before " << max_over_mean(plan.pairs_before);
      }
}

// prefix_lm and shared_question: the planner plans the pieces of whole_sequence (one per
// shared_question segment) with their prefixes and segments: every row once, each task
// inside its piece with the piece's mask data and the keys its queries read, the pairs
// (counted here from the documents' own tasks) conserved and balanced within tolerance.
TEST(CadPlan, PerDocumentMasksCarryPrefixesAndSegments) {
  for (const DocStructure st : {DocStructure{0.3, 0}, DocStructure{0.2, 3}}) {
    const AttentionMask mask{st.answers > 0 ? MaskKind::shared_question : MaskKind::prefix_lm};
    for (int n : {2, 4})
      for (uint32_t seed = 1; seed <= 10; ++seed) {
        std::vector<CadPiece> docs;
        int64_t whole = 0;
        for (int s = 0; s < n; ++s) {
          PackedBatch b;
          b.cu_seqlens = {0};
          for (const CadPiece& d : random_tick(1, 4096, seed * 13 + uint32_t(s))) {
            b.cu_seqlens.push_back(b.cu_seqlens.back() + d.len);
            st.append_piece(b, d.len, 0, d.len);
          }
          b.tokens.assign(size_t(b.cu_seqlens.back()), 1);
          derive_targets_and_positions(b);
          ASSERT_EQ(check_mask_data(b), "");
          whole += attention_pairs(tasks_for_documents(b.cu_seqlens, {b.prefix_lens, b.segment_ids}), mask);
          int32_t i = 0;
          for (const DocPiece& p : whole_sequence(b).pieces)
            docs.push_back({s, i++, p.row, p.len, p.pos, p.prefix_len, p.segment_pos, p.doc_len});
        }
        CadPlanOptions o;
        o.tolerance = 0.1;
        o.mask = mask;
        const CadPlan plan = plan_core_attention(docs, n, o);
        std::map<std::pair<int32_t, int32_t>, const CadPiece*> piece;
        std::map<std::pair<int32_t, int32_t>, int32_t> rows;
        for (const CadPiece& d : docs) piece[{d.origin, d.doc}] = &d, rows[{d.origin, d.doc}] = 0;
        std::vector<int64_t> served(size_t(n), 0);
        int64_t after = 0;
        for (const CadTask& t : plan.tasks) {
          const CadPiece& d = *piece.at({t.origin, t.doc});
          ASSERT_GE(t.q_begin, d.pos);
          ASSERT_LE(t.q_begin + t.q_len, d.pos + d.len);
          EXPECT_EQ(t.prefix_len, d.prefix_len);
          EXPECT_EQ(t.segment_pos, d.segment_pos);
          EXPECT_EQ(t.kv_end, st.answers > 0 ? t.q_begin + t.q_len : std::max(t.q_begin + t.q_len, d.prefix_len));
          rows[{t.origin, t.doc}] += t.q_len;
          const int64_t p = attention_pairs(t.attention_task(0, 0, 0), mask);
          after += p;
          served[size_t(t.server)] += p;
        }
        for (const CadPiece& d : docs) ASSERT_EQ((rows[{d.origin, d.doc}]), d.len);
        EXPECT_EQ(after, whole) << mask_kind_name(mask.kind);
        EXPECT_EQ(std::accumulate(plan.pairs_before.begin(), plan.pairs_before.end(), int64_t(0)), whole);
        EXPECT_EQ(served, plan.pairs_after);
        EXPECT_LE(max_over_mean(served), 1.1 + 1e-9)
            << mask_kind_name(mask.kind) << " n " << n << " seed " << seed << " before " << max_over_mean(plan.pairs_before);
      }
  }
}

// Context-parallel pieces: each document's rows [pos, pos + len) on several ranks,
// every piece against the document's prefix [0, pos + len). Rows still go exactly
// once, pairs are conserved and the plan balances.
TEST(CadPlan, ContextParallelPiecesArePlannedLikeDocuments) {
  for (int n : {2, 4, 8})
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      std::vector<CadPiece> docs;
      std::vector<int32_t> rows(static_cast<size_t>(n), 0), count(static_cast<size_t>(n), 0);
      std::mt19937 rng(seed);
      for (int d = 0; d < 6 * n; ++d) {
        const int32_t L = 2 + int32_t(std::pow(std::uniform_real_distribution<double>(0, 1)(rng), 3.0) * 3000);
        const int s = d % n, t = (d + 1) % n;  // head on s, tail on t (a cp = 2 group)
        docs.push_back({s, count[size_t(s)]++, rows[size_t(s)], L / 2, 0});
        rows[size_t(s)] += L / 2;
        docs.push_back({t, count[size_t(t)]++, rows[size_t(t)], L - L / 2, L / 2});
        rows[size_t(t)] += L - L / 2;
      }
      CadPlanOptions o;
      o.q_bytes_per_row = 3 * 256;
      o.kv_bytes_per_row = 2 * 128;
      const CadPlan plan = plan_core_attention(docs, n, o);
      check_plan(docs, n, plan);
      for (const CadTask& t : plan.tasks) {
        const CadPiece& d = *std::find_if(docs.begin(), docs.end(), [&](const CadPiece& x) {
          return x.origin == t.origin && x.doc == t.doc;
        });
        ASSERT_GE(t.q_begin, d.pos);
        ASSERT_LE(t.q_begin + t.q_len, d.pos + d.len);
      }
      EXPECT_LE(max_over_mean(plan.pairs_after), 1.1 + 1e-9)
          << "n " << n << " seed " << seed << " before " << max_over_mean(plan.pairs_before);
    }
}

// The bytes a moved row costs, as the exchange sends them: fp32 Q there and O, LSE back
// (K, V per key row); a bf16 run carries Q, O, K and V in bf16 and the LSE in fp32.
TEST(CadPlan, RowBytesFollowThePrecision) {
  AttentionParams p;
  p.num_heads = 4, p.num_kv_heads = 2, p.head_dim = 16;
  const CadPlanOptions fp32 = cad_plan_options(p, 0.1, nullptr);
  EXPECT_EQ(fp32.q_bytes_per_row, (2 * 64 + 4) * 4);
  EXPECT_EQ(fp32.kv_bytes_per_row, 2 * 32 * 4);
  p.precision = Precision::bf16;
  const CadPlanOptions bf16 = cad_plan_options(p, 0.1, nullptr);
  EXPECT_EQ(bf16.q_bytes_per_row, 2 * 64 * 2 + 4 * 4);
  EXPECT_EQ(bf16.kv_bytes_per_row, 2 * 32 * 2);
}

TEST(CadPlan, ABalancedBatchMovesNothing) {
  std::vector<CadPiece> docs;
  for (int s = 0; s < 4; ++s)
    for (int d = 0; d < 3; ++d) docs.push_back({s, d, d * 100, 100});
  const CadPlan plan = plan_core_attention(docs, 4, {});
  EXPECT_EQ(plan.bytes_moved, 0);
  for (const CadTask& t : plan.tasks) EXPECT_EQ(t.server, t.origin);
  EXPECT_EQ(plan.tasks.size(), docs.size());
}

TEST(CadPlan, OneLongDocumentIsSplitIntoHeadTailPairs) {
  // server 0: one 2048-token document; server 1: 2048 one-token documents
  std::vector<CadPiece> docs = {{0, 0, 0, 2048}};
  for (int i = 0; i < 2048; ++i) docs.push_back({1, i, i, 1});
  const CadPlan plan = plan_core_attention(docs, 2, {});
  check_plan(docs, 2, plan);
  EXPECT_LE(max_over_mean(plan.pairs_after), 1.1);
  int moved = 0;
  for (const CadTask& t : plan.tasks)
    if (t.server != t.origin) {
      ++moved;
      EXPECT_EQ(t.origin, 0);
    }
  EXPECT_EQ(moved, 2);  // one head and one tail piece
  CadPlanOptions no_tolerance;
  no_tolerance.tolerance = 0.0;
  EXPECT_THROW(plan_core_attention(docs, 2, no_tolerance), std::invalid_argument);
}

CadCostModel small_model() {
  CadCostModel m;
  m.cpu = "test cpu";
  m.blas = "OpenBLAS test";
  m.kernel = "causal";
  m.threads = 2;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.q_grid = {16, 256, 4096};
  m.kv_grid = {16, 256, 4096};
  // small tasks cost more per pair (tile padding), as measured profiles show
  m.seconds_per_pair = {9e-9, 5e-9, 3e-9, 6e-9, 3e-9, 2e-9, 4e-9, 2e-9, 2e-9};
  return m;
}

TEST(CadCost, RoundTripInterpolationAndErrors) {
  const CadCostModel m = small_model();
  const CadCostModel back = parse_cad_cost_toml(cad_cost_toml(m), "t");
  EXPECT_EQ(cad_cost_toml(back), cad_cost_toml(m));
  EXPECT_EQ(back.seconds_per_pair, m.seconds_per_pair);  // every time exactly (TOML keeps doubles)
  EXPECT_EQ(back.cpu, "test cpu");
  const auto pairs = [](int64_t q, int64_t kv) { return double(q * kv - q * (q - 1) / 2); };
  EXPECT_NEAR(m.seconds(16, 16), 9e-9 * pairs(16, 16), 1e-18);    // a grid point
  EXPECT_NEAR(m.seconds(256, 4096), 2e-9 * pairs(256, 4096), 1e-15);
  EXPECT_NEAR(m.seconds(1, 1), 9e-9 * 1, 1e-18);                  // clamped below the grid
  const double mid = m.seconds(64, 64) / pairs(64, 64);           // log-midpoint of 16..256
  EXPECT_NEAR(mid, 0.25 * (9e-9 + 5e-9 + 6e-9 + 3e-9), 1e-15);
  EXPECT_EQ(m.seconds(0, 10), 0.0);
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"heads = 4\n", "q_grid and kv_grid are required"},
           {"q_grid = [4, 2]\nkv_grid = [1]\n", "ascending"},
           {"q_grid = [1]\nkv_grid = [1]\nseconds_per_pair = [[-1.0]]\n", "must be from 1e-15 to 1"},
           // a crafted profile's times a machine cannot measure (issue 87): inf costs, or 0
           {"q_grid = [1]\nkv_grid = [1]\nseconds_per_pair = [[1e300]]\n", "must be from 1e-15 to 1"},
           {"q_grid = [1]\nkv_grid = [1]\nseconds_per_pair = [[1e-320]]\n", "must be from 1e-15 to 1"},
           {"q_grid = [1]\nkv_grid = [1, 2]\nseconds_per_pair = [[1.0]]\n", "one value per kv_grid entry"},
           {"colour = 'blue'\n", "unknown key 'colour'"},
           {"heads = 'four'\n", "heads must be an integer"},
           {"q_grid 1\n", "not a TOML cost model"},
           {"q_grid = [1]\nkv_grid = [1]\nseconds_per_pair = [[1.0]]\n", "kernel, heads, kv_heads and head_dim are required"}}) {
    try {
      parse_cad_cost_toml(text, "bad.txt");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.txt"), std::string::npos);
    }
  }
}

// A run measures the grid its longest task reaches; within it, a task interpolates
// between the same entries as on the whole grid, so the times (and the plan) are the same.
TEST(CadCost, GridFollowsTheLongestTask) {
  EXPECT_EQ(cad_cost_grid(1), (std::vector<int64_t>{16}));
  EXPECT_EQ(cad_cost_grid(16), (std::vector<int64_t>{16}));
  EXPECT_EQ(cad_cost_grid(17), (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(cad_cost_grid(128), (std::vector<int64_t>{16, 64, 256}));
  EXPECT_EQ(cad_cost_grid(2048), (std::vector<int64_t>{16, 64, 256, 1024, 4096}));
  EXPECT_EQ(cad_cost_grid(int64_t(1) << 20), (std::vector<int64_t>{16, 64, 256, 1024, 4096}));
  CadCostModel whole = small_model();
  whole.q_grid = whole.kv_grid = cad_cost_grid(4096);
  whole.seconds_per_pair.clear();
  for (size_t i = 0; i < 25; ++i) whole.seconds_per_pair.push_back(1e-9 * double(10 + (i * 7) % 11));
  CadCostModel cut = whole;  // the first three entries of each grid, as measured for 256
  cut.q_grid = cut.kv_grid = cad_cost_grid(256);
  cut.seconds_per_pair.clear();
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j) cut.seconds_per_pair.push_back(whole.seconds_per_pair[i * 5 + j]);
  EXPECT_TRUE(cut.reaches(200) && cut.reaches(256) && !cut.reaches(257) && whole.reaches(int64_t(1) << 30));
  for (int64_t q : {1, 7, 16, 40, 64, 100, 255, 256})
    for (int64_t kv : {q, q + 1, q + 30, int64_t(256)})
      if (kv >= q && kv <= 256) {
        EXPECT_EQ(cut.seconds(q, kv), whole.seconds(q, kv)) << q << " x " << kv;
      }
}

TEST(CadPlan, WithACostModelBalancesMeasuredTime) {
  const CadCostModel m = small_model();
  for (int n : {2, 4, 8})
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      const std::vector<CadPiece> docs = random_tick(n, 2048, seed * 7 + uint32_t(n));
      CadPlanOptions o;
      o.cost = &m;
      const CadPlan plan = plan_core_attention(docs, n, o);
      check_plan(docs, n, plan);
      double mx = 0, sum = 0;
      for (double x : plan.load_after) mx = std::max(mx, x), sum += x;
      EXPECT_LE(mx / (sum / n), 1.1 + 1e-9) << "n " << n << " seed " << seed;
    }
}

// Ranks of unequal speed: each server's whole time (its other work plus its tasks'
// modelled time, both at its speed) ends within the tolerance of the mean attention
// time of the others'; a slower server serves less, one with more other work too.
TEST(CadPlan, UnequalRanksBalanceTheirWholeTime) {
  const CadCostModel m = small_model();
  for (int n : {2, 4})
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      const std::vector<CadPiece> docs = random_tick(n, 2048, seed * 13 + uint32_t(n));
      CadPlanOptions o;
      o.cost = &m;
      const CadPlan equal = plan_core_attention(docs, n, o);
      o.speed.assign(size_t(n), 1.0);
      o.speed[0] = 1.2;  // rank 0 runs 20% slower
      o.base_seconds.assign(size_t(n), 0.0);
      double attention = 0;
      for (int s = 0; s < n; ++s) attention += equal.load_after[size_t(s)];
      const double linear = attention / n;  // token-linear work as large as the attention
      for (int s = 0; s < n; ++s) o.base_seconds[size_t(s)] = o.speed[size_t(s)] * linear;
      const CadPlan plan = plan_core_attention(docs, n, o);
      check_plan(docs, n, plan);
      double mx = 0, mn = 1e300, sum_attention = 0;
      for (int s = 0; s < n; ++s) {
        const double whole = o.base_seconds[size_t(s)] + o.speed[size_t(s)] * plan.load_after[size_t(s)];
        mx = std::max(mx, whole), mn = std::min(mn, whole);
        sum_attention += o.speed[size_t(s)] * plan.load_after[size_t(s)];
      }
      EXPECT_LE(mx - mn, 2 * 0.1 * sum_attention / n + 1e-12) << "n " << n << " seed " << seed;
      EXPECT_LT(plan.load_after[0], equal.load_after[0]) << "n " << n << " seed " << seed;
    }
  CadPlanOptions bad;
  bad.cost = &m;
  bad.speed = {1.0};
  EXPECT_THROW(plan_core_attention(random_tick(2, 64, 1), 2, bad), std::invalid_argument);
}

// A plan cuts documents only at multiples of the kernel's query tile (split_align), and a
// row's forward is then the same bits however its document was cut: the recomputed
// forward of a pipeline's backward tick (another plan, other tasks) repeats the forward
// exactly. Causal, a mask, DCA, GQA shapes with other tiles, bf16 both ways.
TEST(CadPlan, AlignedCutsGiveEveryRowTheWholeDocumentsBits) {
  const int64_t L = 1500;
  const RopeTable tables = build_rope_table(257, 32, 10000.0);
  struct Case {
    const char* name;
    int H, KV;
    Precision precision;
    bool bf16_instructions;
    MaskKind mask;
    bool dca;
  };
  const Case cases[] = {{"causal", 4, 2, Precision::fp32, true, MaskKind::causal, false},
                        {"causal G=1", 2, 2, Precision::fp32, true, MaskKind::causal, false},
                        {"causal G=4", 8, 2, Precision::fp32, true, MaskKind::causal, false},
                        {"sliding window", 4, 2, Precision::fp32, true, MaskKind::sliding_window, false},
                        {"dca", 4, 2, Precision::fp32, true, MaskKind::causal, true},
                        {"bf16", 4, 2, Precision::bf16, true, MaskKind::causal, false},
                        {"bf16 rounded", 4, 2, Precision::bf16, false, MaskKind::causal, false}};
  std::mt19937_64 rng(5);
  for (const Case& c : cases) {
    test::Problem pr(c.H, c.KV, 32, {0, int32_t(L)});
    pr.precision = c.precision, pr.bf16_kernel = c.bf16_instructions ? Bf16Kernel::automatic : Bf16Kernel::rounded;
    pr.mask.kind = c.mask, pr.mask.window = 300;
    AttentionParams params = pr.params();
    if (c.dca) {
      params.kernel = AttentionKernel::dca;
      params.dca.chunk_size = 256, params.dca.local_size = 32, params.dca.mscale = 1.0f;
      params.dca.rope_cos = tables.cos.data(), params.dca.rope_sin = tables.sin.data();
      params.dca.rope_positions = tables.max_positions;
    }
    const int64_t tile = attention_query_tile(params);
    CadPlanOptions o = cad_plan_options(params, 0.1, nullptr);
    EXPECT_EQ(o.split_align, tile);
    const auto run = [&](const std::vector<int64_t>& cuts) {
      std::vector<AttentionTask> tasks;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        AttentionTask t;
        t.q_row = cuts[i], t.q_pos = int32_t(cuts[i]), t.q_len = int32_t(cuts[i + 1] - cuts[i]);
        t.kv_row = 0, t.kv_pos = 0, t.kv_len = int32_t(cuts[i + 1]), t.doc_len = int32_t(L);
        tasks.push_back(t);
      }
      std::shuffle(tasks.begin(), tasks.end(), rng);  // a server's order of its tasks
      const std::vector<float> q = test::random_vector(L * c.H * 32, 1), k = test::random_vector(L * c.KV * 32, 2),
                               v = test::random_vector(L * c.KV * 32, 3);
      std::vector<float> out(q.size()), lse(size_t(L * c.H));
      attention_forward(params, tasks, q.data(), k.data(), v.data(), out.data(), lse.data());
      out.insert(out.end(), lse.begin(), lse.end());
      return out;
    };
    // whole documents, and context-parallel pieces that start anywhere (here at 37 and
    // 1001): the tiles follow in-document positions, not a task's first row
    const std::vector<float> whole = run({0, L}), pieces = run({0, 37, 1001, L});
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<int64_t> cuts = {0, L};
      if (trial % 2) cuts.insert(cuts.end(), {37, 1001});
      for (int k = 0, n = 1 + int(rng() % 5); k < n; ++k) cuts.push_back(int64_t(1 + rng() % ((L - 1) / tile)) * tile);
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      const std::vector<float> cut = run(cuts), &base = trial % 2 ? pieces : whole;
      EXPECT_EQ(std::memcmp(cut.data(), base.data(), cut.size() * sizeof(float)), 0)
          << c.name << ": cut at " << cuts[1] << " (tile " << tile << ")";
    }
  }
}

TEST(CadPlan, CutsFallOnTheAlignment) {
  // uneven documents over 4 servers: every task starts and ends at a multiple of the
  // alignment or at its piece's ends, every row once, and the balance still holds
  std::vector<CadPiece> docs;
  std::mt19937_64 rng(9);
  for (int r = 0; r < 4; ++r)
    for (int i = 0, row = 0; i < 3; ++i) {
      const int32_t len = int32_t(r == 0 ? 4000 + rng() % 4000 : 200 + rng() % 800);
      docs.push_back({r, i, row, len, 0});
      row += len;
    }
  docs.push_back({3, 3, 0, 900, 1000});  // a context-parallel piece [1000, 1900)
  CadPlanOptions o;
  o.split_align = 64;
  const CadPlan plan = plan_core_attention(docs, 4, o);
  std::map<std::pair<int, int>, int64_t> rows;
  int aligned_tasks = 0;
  for (const CadTask& t : plan.tasks) {
    const CadPiece* d = nullptr;
    for (const CadPiece& p : docs)
      if (p.origin == t.origin && p.doc == t.doc) d = &p;
    ASSERT_NE(d, nullptr);
    const int64_t end = int64_t(t.q_begin) + t.q_len;
    if (d->len >= kAlignedPieceTiles * 64) {  // shorter pieces may be cut anywhere
      EXPECT_TRUE(t.q_begin == d->pos || t.q_begin % 64 == 0) << t.q_begin;
      EXPECT_TRUE(end == d->pos + d->len || end % 64 == 0) << end;
      ++aligned_tasks;
    }
    rows[{t.origin, t.doc}] += t.q_len;
  }
  for (const CadPiece& d : docs) EXPECT_EQ((rows[{d.origin, d.doc}]), d.len);
  EXPECT_GT(aligned_tasks, 3);  // the long documents were split
  const double mean = std::accumulate(plan.pairs_after.begin(), plan.pairs_after.end(), 0.0) / 4;
  for (int64_t p : plan.pairs_after) EXPECT_LE(double(p), 1.1 * mean + 1);
}

TEST(CadPlan, AlignShortPiecesCutsEveryPieceOnTheAlignment) {
  // documents of 30 to 500 rows (all shorter than kAlignedPieceTiles tiles of 64) over 4
  // servers, one server's much longer than the rest so that they must be cut: with
  // align_short_pieces every cut falls on a multiple of 64 or a piece's ends, every row
  // once; without it some cut falls elsewhere (the option acts)
  std::vector<CadPiece> docs;
  const auto unaligned_cuts = [&](bool align) {
    CadPlanOptions o;
    o.split_align = 64;
    o.align_short_pieces = align;
    const CadPlan plan = plan_core_attention(docs, 4, o);
    std::map<std::pair<int, int>, int64_t> rows;
    int unaligned = 0, cut = 0;
    for (const CadTask& t : plan.tasks) {
      const CadPiece* d = nullptr;
      for (const CadPiece& p : docs)
        if (p.origin == t.origin && p.doc == t.doc) d = &p;
      EXPECT_NE(d, nullptr);
      if (!d) continue;
      const int64_t end = int64_t(t.q_begin) + t.q_len;
      if (t.q_begin != d->pos) ++cut, unaligned += t.q_begin % 64 != 0;
      if (end != d->pos + d->len) ++cut, unaligned += end % 64 != 0;
      rows[{t.origin, t.doc}] += t.q_len;
    }
    for (const CadPiece& d : docs) EXPECT_EQ((rows[{d.origin, d.doc}]), d.len);
    EXPECT_GT(cut, 0);  // the long documents were split
    return unaligned;
  };
  int unaligned_without = 0;
  for (uint64_t seed = 11; seed < 19; ++seed) {
    std::mt19937_64 rng(seed);
    docs.clear();
    for (int r = 0; r < 4; ++r)
      for (int i = 0, row = 0; i < 3; ++i) {
        const int32_t len = int32_t(r == 0 ? 300 + rng() % 200 : 30 + rng() % 50);
        docs.push_back({r, i, row, len, 0});
        row += len;
      }
    EXPECT_EQ(unaligned_cuts(true), 0) << "seed " << seed;
    unaligned_without += unaligned_cuts(false);
  }
  EXPECT_GT(unaligned_without, 0);
}

}  // namespace
}  // namespace lct::cad_test
