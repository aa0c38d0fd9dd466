// The process-grid rules, pipeline stages and schedules, and the gradient buckets,
// without MPI (the MPI runs are in mpi_data_parallel.sh and mpi_pipeline.sh).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "model/llama.h"
#include "parallel/grad_reducer.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"
#include "tests/test_util.h"

namespace lct::parallel_test {  // the file's own namespace: a unity build compiles test files together
namespace {

// Runs every stage's list against each other with unbounded message buffers and returns
// "" when all complete, else a description of where they got stuck (a deadlock or a
// receive no one sends). max_slots[s] gets the most micro-batches stage s held at once
// (from its forward, or the receive that starts it, to its backward).
std::string simulate_pipeline(const std::vector<std::vector<PipeAction>>& stages,
                              std::vector<int>* max_slots = nullptr) {
  const int pp = int(stages.size());
  // messages in flight: (from stage, to stage, forward?, micro-batch) -> count
  std::map<std::tuple<int, int, bool, int>, int> sent;
  std::vector<int> held(size_t(pp), 0), peak(size_t(pp), 0);
  std::string error;
  const std::vector<size_t> next = replay_pipeline(stages, [&](int s, size_t index) {
    const PipeAction& act = stages[size_t(s)][index];
    if (!error.empty()) return false;
    if (act.op == PipeOp::recv_forward || act.op == PipeOp::recv_backward) {
      const bool fwd = act.op == PipeOp::recv_forward;
      const auto key = std::make_tuple(fwd ? s - 1 : s + 1, s, fwd, act.micro_batch);
      auto it = sent.find(key);
      if (it == sent.end() || it->second == 0) return false;  // would block
      --it->second;
    } else if (act.op == PipeOp::send_forward || act.op == PipeOp::send_backward) {
      const bool fwd = act.op == PipeOp::send_forward;
      const int to = fwd ? s + 1 : s - 1;
      if (to < 0 || to >= pp) {
        error = "stage " + std::to_string(s) + " sends past the pipeline";
        return false;
      }
      ++sent[std::make_tuple(s, to, fwd, act.micro_batch)];
    }
    // a micro-batch occupies a slot from its first forward action to its backward
    if (act.micro_batch < 0) {  // a tick's dummy: no data, no slot
    } else if (act.op == PipeOp::recv_forward ||
               (act.op == PipeOp::forward && (index == 0 || stages[size_t(s)][index - 1].op != PipeOp::recv_forward)))
      peak[size_t(s)] = std::max(peak[size_t(s)], ++held[size_t(s)]);
    if (act.op == PipeOp::backward && act.micro_batch >= 0) --held[size_t(s)];
    return true;
  });
  if (!error.empty()) return error;
  if (max_slots) *max_slots = peak;
  for (int s = 0; s < pp; ++s)
    if (next[size_t(s)] < stages[size_t(s)].size()) {
      const PipeAction& act = stages[size_t(s)][next[size_t(s)]];
      return "stage " + std::to_string(s) + " blocked at " + pipe_op_name(act.op) +
             " of micro-batch " + std::to_string(act.micro_batch);
    }
  for (const auto& [key, count] : sent)
    if (count != 0)
      return "a message from stage " + std::to_string(std::get<0>(key)) + " to stage " +
             std::to_string(std::get<1>(key)) + " was never received";
  return {};
}

TEST(Layout, InfersTheMinusOneDegree) {
  Layout l;
  EXPECT_EQ(resolve_layout({-1, 1, 1, {}}, 4, 4, 2048, l), "");
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(resolve_layout({2, -1, 1, {}}, 8, 4, 2048, l), "");
  EXPECT_EQ(l.pp, 4);
  EXPECT_EQ(resolve_layout({-1, 2, 2, {}}, 8, 4, 2048, l), "");
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(resolve_layout({-1, 1, 1, {}}, 1, 4, 2048, l), "");  // no MPI: one process
  EXPECT_EQ(l.dp, 1);
}

TEST(Layout, EveryRuleIsAOneLineErrorPrintingTheFactors) {
  Layout l;
  const std::string product = resolve_layout({3, 1, 1, {}}, 2, 4, 2048, l);
  EXPECT_NE(product.find("3 x 1 x 1 = 3 but the MPI world has 2 ranks"), std::string::npos) << product;
  EXPECT_NE(resolve_layout({1, 3, 1, {}}, 3, 4, 2048, l).find("parallel.pp = 3 must divide"), std::string::npos);
  EXPECT_NE(resolve_layout({0, 1, 1, {}}, 1, 4, 2048, l).find("parallel.dp must be a positive"), std::string::npos);
  EXPECT_NE(resolve_layout({1, 1, -3, {}}, 1, 4, 2048, l).find("parallel.cp must be a positive"), std::string::npos);
  EXPECT_NE(resolve_layout({-1, -1, 1, {}}, 4, 4, 2048, l).find("only one"), std::string::npos);
  EXPECT_NE(resolve_layout({-1, 3, 1, {}}, 4, 4, 2048, l).find("cannot infer"), std::string::npos);
  EXPECT_NE(resolve_layout({1, 1, 2, {}}, 2, 4, 2050, l).find("multiple of 2 x parallel.cp"), std::string::npos);
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
  const LlamaConfig c = test::llama_shape(50, 32, 40, 3, 4, 2);
  const TensorTable table = build_llama_table(c);
  for (int64_t bucket : {int64_t(1), int64_t(777), int64_t(5000), table.total(), table.total() * 10}) {
    const GradReducer reducer(table, {{0, table.total()}}, MPI_COMM_NULL, bucket, true);
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

LlamaConfig small_config(int layers, bool tied) { return test::llama_shape(50, 32, 40, layers, 4, 2, tied); }

TEST(PipelineStages, EvenAndUnevenSplitsAndTheirErrors) {
  std::vector<StageSpec> st;
  ASSERT_EQ(split_pipeline_stages(8, 4, {}, st), "");
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[1].first_layer, 2);
  EXPECT_EQ(st[1].end_layer, 4);
  EXPECT_TRUE(st[0].has_embedding && !st[0].has_head);
  EXPECT_TRUE(st[3].has_head && !st[3].has_embedding);
  ASSERT_EQ(split_pipeline_stages(8, 2, {3, 5}, st), "");
  EXPECT_EQ(st[0].end_layer, 3);
  EXPECT_EQ(st[1].first_layer, 3);
  EXPECT_EQ(st[1].end_layer, 8);
  EXPECT_NE(split_pipeline_stages(6, 4, {}, st).find("parallel.pp = 4 must divide model.num_hidden_layers = 6"), std::string::npos);
  EXPECT_NE(split_pipeline_stages(8, 2, {3, 4, 1}, st).find("parallel.pp_layers has 3 entries but parallel.pp = 2"), std::string::npos);
  EXPECT_NE(split_pipeline_stages(8, 2, {3, 4}, st).find("sums to 7 but model.num_hidden_layers = 8"), std::string::npos);
  EXPECT_NE(split_pipeline_stages(8, 2, {0, 8}, st).find("entries must be >= 1"), std::string::npos);
  Layout l;
  EXPECT_NE(resolve_layout({1, 2, 1, {1, 2}}, 2, 4, 2048, l).find("sums to 3"), std::string::npos);
  EXPECT_EQ(resolve_layout({1, 2, 1, {1, 3}}, 2, 4, 2048, l), "");
}

TEST(PipelineStages, OwnedRangesCoverTheArenaOnceExceptTheTiedCopy) {
  for (bool tied : {false, true})
    for (int pp : {1, 2, 3, 6}) {
      const LlamaConfig c = small_config(6, tied);
      const TensorTable table = build_llama_table(c);
      std::vector<StageSpec> st;
      ASSERT_EQ(split_pipeline_stages(6, pp, {}, st), "");
      std::vector<int> counted(size_t(table.total()), 0), owned(size_t(table.total()), 0);
      for (const StageSpec& s : st) {
        for (const ArenaRange& r : counted_ranges(table, c, s))
          for (int64_t i = r.begin; i < r.end; ++i) ++counted[size_t(i)];
        for (const ArenaRange& r : owned_ranges(table, c, s))
          for (int64_t i = r.begin; i < r.end; ++i) ++owned[size_t(i)];
      }
      const TensorSpec& e = table.get("model.embed_tokens.weight");
      for (int64_t i = 0; i < table.total(); ++i) {
        ASSERT_EQ(counted[size_t(i)], 1) << "tied " << tied << " pp " << pp << " at " << i;
        const bool in_embed = i >= e.offset && i < e.offset + e.numel;
        ASSERT_EQ(owned[size_t(i)], tied && pp > 1 && in_embed ? 2 : 1);
      }
      // only the first and the last stage hold a tied copy
      for (const StageSpec& s : st) {
        const ArenaRange r = tied_embedding_range(table, c, s);
        EXPECT_EQ(r.end > r.begin, tied && pp > 1 && (s.has_embedding || s.has_head));
      }
    }
}

TEST(GradBuckets, StayInsideAStagesOwnedRanges) {
  const LlamaConfig c = small_config(4, true);
  const TensorTable table = build_llama_table(c);
  std::vector<StageSpec> st;
  ASSERT_EQ(split_pipeline_stages(4, 2, {}, st), "");
  const std::vector<ArenaRange> owned = owned_ranges(table, c, st[1]);  // embed copy + layers 2-3 + norm
  for (int64_t bucket : {int64_t(1), int64_t(3000), table.total()}) {
    const GradReducer reducer(table, owned, MPI_COMM_NULL, bucket, true);
    int64_t covered = 0;
    for (const ArenaRange& b : reducer.buckets()) {
      for (int64_t i = b.begin; i < b.end; ++i) {  // every element of a bucket is owned
        bool inside = false;
        for (const ArenaRange& r : owned) inside |= i >= r.begin && i < r.end;
        ASSERT_TRUE(inside) << b.begin << ".." << b.end << " at " << i;
      }
      covered += b.end - b.begin;
    }
    int64_t total = 0;
    for (const ArenaRange& r : owned) total += r.end - r.begin;
    EXPECT_EQ(covered, total);
    EXPECT_EQ(reducer.buckets().back().begin, 0);  // the embedding copy comes last
  }
}

// Every stage's action list, for every schedule, pp 2..8 and m 1..16.
TEST(PipelineSchedule, ForwardBeforeBackwardSlotsAndMatchingMessages) {
  for (PipelineSchedule kind :
       {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe, PipelineSchedule::ticks})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 16; ++m) {
        std::vector<std::vector<PipeAction>> all;
        for (int s = 0; s < pp; ++s) {
          const std::vector<PipeAction> a = pipeline_actions(kind, pp, s, m);
          // each micro-batch: exactly one forward and one backward, forward first
          std::vector<int> fwd_at(size_t(m), -1), bwd_at(size_t(m), -1);
          for (size_t i = 0; i < a.size(); ++i) {
            if (a[i].micro_batch < 0) {  // a tick's dummy
              ASSERT_EQ(kind, PipelineSchedule::ticks);
              ASSERT_TRUE(a[i].op == PipeOp::forward || a[i].op == PipeOp::backward);
              continue;
            }
            if (a[i].op == PipeOp::forward) { ASSERT_EQ(fwd_at[size_t(a[i].micro_batch)], -1); fwd_at[size_t(a[i].micro_batch)] = int(i); }
            if (a[i].op == PipeOp::backward) { ASSERT_EQ(bwd_at[size_t(a[i].micro_batch)], -1); bwd_at[size_t(a[i].micro_batch)] = int(i); }
            if (s == 0) { ASSERT_NE(a[i].op, PipeOp::recv_forward); ASSERT_NE(a[i].op, PipeOp::send_backward); }
            if (s == pp - 1) { ASSERT_NE(a[i].op, PipeOp::send_forward); ASSERT_NE(a[i].op, PipeOp::recv_backward); }
          }
          for (int mb = 0; mb < m; ++mb) {
            ASSERT_GE(fwd_at[size_t(mb)], 0);
            ASSERT_GT(bwd_at[size_t(mb)], fwd_at[size_t(mb)]) << "pp " << pp << " stage " << s << " mb " << mb;
          }
          all.push_back(a);
        }
        std::vector<int> slots;
        const std::string problem = simulate_pipeline(all, &slots);
        ASSERT_EQ(problem, "") << pipeline_schedule_name(kind) << " pp " << pp << " m " << m;
        for (int s = 0; s < pp; ++s) {
          if (kind == PipelineSchedule::one_f_one_b)
            ASSERT_LE(slots[size_t(s)], std::min(pp - s, m)) << "pp " << pp << " stage " << s << " m " << m;
          else if (kind == PipelineSchedule::ticks)
            ASSERT_LE(slots[size_t(s)], std::min(2 * (pp - 1 - s) + 1, m)) << "pp " << pp << " stage " << s << " m " << m;
          else
            ASSERT_EQ(slots[size_t(s)], m);
        }
        if (kind == PipelineSchedule::one_f_one_b) {
          ASSERT_EQ(slots[0], std::min(pp, m));
        }
      }
}

// Same-phase ticks (CAD under pipeline parallelism): in every tick every stage runs
// exactly one compute action, all of them forwards or all backwards, m + pp - 1 ticks
// of each; with pp = 1 the ticks are plain 1F1B.
TEST(PipelineSchedule, TicksRunOnePhaseOnEveryStage) {
  for (int pp = 1; pp <= 6; ++pp)
    for (int m = 1; m <= 9; ++m) {
      std::vector<std::vector<PipeOp>> phase(static_cast<size_t>(pp));
      for (int s = 0; s < pp; ++s) {
        int next_tick = 0;
        for (const PipeAction& a : pipeline_actions(PipelineSchedule::ticks, pp, s, m)) {
          ASSERT_GE(a.tick, 0);
          if (a.op != PipeOp::forward && a.op != PipeOp::backward) continue;
          ASSERT_EQ(a.tick, next_tick++) << "pp " << pp << " stage " << s;
          phase[size_t(s)].push_back(a.op);
        }
        ASSERT_EQ(next_tick, 2 * (m + pp - 1));
        ASSERT_EQ(phase[size_t(s)], phase[0]) << "pp " << pp << " m " << m << " stage " << s;
      }
      if (pp == 1) {
        const std::vector<PipeAction> plain = pipeline_actions(PipelineSchedule::one_f_one_b, 1, 0, m);
        std::vector<PipeAction> ticks = pipeline_actions(PipelineSchedule::ticks, 1, 0, m);
        for (PipeAction& a : ticks) a.tick = -1;
        ASSERT_EQ(ticks, plain);
      }
    }
  // pp 2, m 2, stage 0: F0 F1 B(dummy) F(dummy) B0 B1;  stage 1: F(d) F0 B0 F1 B1 B(d)
  std::vector<int> mbs;
  for (const PipeAction& a : pipeline_actions(PipelineSchedule::ticks, 2, 1, 2))
    if (a.op == PipeOp::forward || a.op == PipeOp::backward) mbs.push_back(a.micro_batch);
  EXPECT_EQ(mbs, (std::vector<int>{-1, 0, 0, 1, 1, -1}));
  EXPECT_EQ(parse_pipeline_schedule("ticks"), PipelineSchedule::ticks);
}

TEST(PipelineSchedule, OneFOneBShapeAndTheSimulatorCatchesBadLists) {
  // stage 0 of 3 with 4 micro-batches: warm-up 2 forwards, then 1F1B, then cool-down
  std::vector<PipeOp> ops;
  std::vector<int> mbs;
  for (const PipeAction& a : pipeline_actions(PipelineSchedule::one_f_one_b, 3, 0, 4))
    if (a.op == PipeOp::forward || a.op == PipeOp::backward) {
      ops.push_back(a.op);
      mbs.push_back(a.micro_batch);
    }
  const auto F = PipeOp::forward, B = PipeOp::backward;
  EXPECT_EQ(ops, (std::vector<PipeOp>{F, F, F, B, F, B, B, B}));
  EXPECT_EQ(mbs, (std::vector<int>{0, 1, 2, 0, 3, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 8), 1.0 / 9.0);
  // a last stage that waits for a backward nobody sends deadlocks
  std::vector<std::vector<PipeAction>> bad = {
      pipeline_actions(PipelineSchedule::one_f_one_b, 2, 0, 2),
      {{PipeOp::recv_backward, 0}}};
  EXPECT_NE(simulate_pipeline(bad), "");
  // stages whose orders cross (each waits for what the other sends later) deadlock
  std::vector<std::vector<PipeAction>> crossed = {
      {{PipeOp::recv_backward, 0}, {PipeOp::forward, 0}, {PipeOp::send_forward, 0}},
      {{PipeOp::recv_forward, 0}, {PipeOp::forward, 0}, {PipeOp::backward, 0}, {PipeOp::send_backward, 0}}};
  EXPECT_NE(simulate_pipeline(crossed).find("blocked"), std::string::npos);
  EXPECT_THROW(parse_pipeline_schedule("zigzag"), std::invalid_argument);
}

}  // namespace
}  // namespace lct::parallel_test
