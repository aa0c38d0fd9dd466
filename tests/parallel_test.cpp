// The process-grid rules and the gradient buckets, without MPI (the MPI runs are in
// mpi_data_parallel.sh).
#include <gtest/gtest.h>

#include <set>

#include "model/llama.h"
#include "parallel/grad_reducer.h"
#include "parallel/process_grid.h"

namespace lct {
namespace {

TEST(Layout, InfersTheMinusOneDegree) {
  Layout l;
  EXPECT_EQ(resolve_layout({-1, 1, 1}, 4, 4, 2048, l), "");
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(resolve_layout({2, -1, 1}, 8, 4, 2048, l), "");
  EXPECT_EQ(l.pp, 4);
  EXPECT_EQ(resolve_layout({-1, 2, 2}, 8, 4, 2048, l), "");
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(resolve_layout({-1, 1, 1}, 1, 4, 2048, l), "");  // no MPI: one process
  EXPECT_EQ(l.dp, 1);
}

TEST(Layout, EveryRuleIsAOneLineErrorPrintingTheFactors) {
  Layout l;
  const std::string product = resolve_layout({3, 1, 1}, 2, 4, 2048, l);
  EXPECT_NE(product.find("3 x 1 x 1 = 3 but the MPI world has 2 ranks"), std::string::npos) << product;
  EXPECT_NE(resolve_layout({1, 3, 1}, 3, 4, 2048, l).find("parallel.pp = 3 must divide"), std::string::npos);
  EXPECT_NE(resolve_layout({0, 1, 1}, 1, 4, 2048, l).find("parallel.dp must be a positive"), std::string::npos);
  EXPECT_NE(resolve_layout({1, 1, -3}, 1, 4, 2048, l).find("parallel.cp must be a positive"), std::string::npos);
  EXPECT_NE(resolve_layout({-1, -1, 1}, 4, 4, 2048, l).find("only one"), std::string::npos);
  EXPECT_NE(resolve_layout({-1, 3, 1}, 4, 4, 2048, l).find("cannot infer"), std::string::npos);
  EXPECT_NE(resolve_layout({1, 1, 2}, 2, 4, 2050, l).find("multiple of 2 x parallel.cp"), std::string::npos);
  for (const std::string& e : {product}) EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(Layout, RankOrderIsCpFastestThenDpThenPp) {
  const Layout l{2, 3, 2};  // dp 2, pp 3, cp 2: 12 ranks
  std::set<int> seen;
  for (int r = 0; r < 12; ++r) {
    const GridCoordinates c = grid_coordinates(l, r);
    EXPECT_EQ(world_rank_of(l, c), r);
    seen.insert(r);
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(grid_coordinates(l, 1).cp_rank, 1);  // neighbours differ in cp first
  EXPECT_EQ(grid_coordinates(l, 2).dp_rank, 1);
  EXPECT_EQ(grid_coordinates(l, 4).pp_rank, 1);  // a stage is dp x cp = 4 ranks
  EXPECT_EQ(grid_coordinates(l, 11).pp_rank, 2);
}

TEST(GradBuckets, CoverTheArenaExactlyInReverseLayerOrder) {
  LlamaConfig c;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  const TensorTable table = build_llama_table(c);
  for (int64_t bucket : {int64_t(1), int64_t(777), int64_t(5000), table.total(), table.total() * 10}) {
    const GradReducer reducer(table, MPI_COMM_NULL, bucket, true);
    const auto& b = reducer.buckets();
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.front().end, table.total()) << bucket;  // starts at the end (LM head)
    EXPECT_EQ(b.back().begin, 0) << bucket;             // ends with the embedding
    for (size_t i = 0; i + 1 < b.size(); ++i) {
      EXPECT_EQ(b[i + 1].end, b[i].begin);               // contiguous, no gap, no overlap
      EXPECT_GE(b[i].end - b[i].begin, bucket);          // only the last may be smaller
    }
    if (bucket == 1) {
      EXPECT_EQ(b.size(), table.specs().size());  // one tensor each
    }
    if (bucket >= table.total()) {
      EXPECT_EQ(b.size(), 1u);
    }
    EXPECT_FALSE(reducer.active());  // no MPI: reductions are no-ops
  }
}

}  // namespace
}  // namespace lct
