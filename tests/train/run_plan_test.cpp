// The run plan (src/train/run_plan.h): every cross-field rule of a run, decided once and
// without MPI.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "src/config/config.h"
#include "src/train/flops.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"
#include "src/train/step_model.h"

namespace lct::run_plan_test {  // the file's own namespace: a unity build compiles test files together
namespace {

Config config_with(const std::map<std::string, std::string>& overrides) {
  Config c;
  apply_overrides(c, overrides);
  validate_config(c);
  return c;
}

std::string refusal(const Config& c, int world) {
  try {
    make_run_plan(c, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RunPlan, DefaultsOnOneAndTwoRanks) {
  const RunPlan one = make_run_plan(Config{}, 1);
  EXPECT_EQ(one.layout.dp, 1);
  EXPECT_EQ(one.placement, Placement::colocated);
  EXPECT_EQ(one.lanes, 1);
  EXPECT_EQ(one.schedule, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(one.stages.size(), 1u);
  EXPECT_EQ(one.tokens_per_step(), Config{}.data.seq_len);
  const RunPlan two = make_run_plan(Config{}, 2);
  EXPECT_EQ(two.layout.dp, 2);  // parallel.dp = -1: inferred
  EXPECT_EQ(two.tokens_per_step(), 2 * Config{}.data.seq_len);
}

TEST(RunPlan, CadWithPipelineRunsTicksWhateverTheConfigSays) {
  for (const char* schedule : {"1f1b", "gpipe", "ticks"}) {
    const RunPlan p = make_run_plan(
        config_with({{"attention.placement", "cad"}, {"parallel.pp", "2"}, {"parallel.pp_schedule", schedule}}), 2);
    EXPECT_EQ(p.placement, Placement::cad);
    EXPECT_EQ(p.schedule, PipelineSchedule::ticks) << schedule;
    EXPECT_EQ(p.schedule_reason.empty(), std::string(schedule) == "ticks") << schedule;
    EXPECT_NE(describe_run_plan(p).find("pipeline schedule ticks"), std::string::npos) << describe_run_plan(p);
  }
  // colocated keeps the configured schedule
  const RunPlan p = make_run_plan(config_with({{"parallel.pp", "2"}, {"parallel.pp_schedule", "gpipe"}}), 2);
  EXPECT_EQ(p.schedule, PipelineSchedule::gpipe);
  EXPECT_TRUE(p.schedule_reason.empty());
}

TEST(RunPlan, PlacementAndLanes) {
  // CAD on one rank has nobody to balance with: it runs colocated, one lane
  const RunPlan one = make_run_plan(config_with({{"attention.placement", "cad"}, {"attention.cad_pingpong", "true"}}), 1);
  EXPECT_EQ(one.placement, Placement::colocated);
  EXPECT_EQ(one.lanes, 1);
  const RunPlan pingpong =
      make_run_plan(config_with({{"attention.placement", "cad"}, {"attention.cad_pingpong", "true"}}), 2);
  EXPECT_EQ(pingpong.placement, Placement::cad);
  EXPECT_EQ(pingpong.lanes, 2);
  EXPECT_FALSE(pingpong.cad.rank_speeds);  // ping-pong plans each lane alone
  const RunPlan cad = make_run_plan(config_with({{"attention.placement", "cad"}}), 2);
  EXPECT_EQ(cad.lanes, 1);  // attention.cad_pingpong = auto: off without pipeline parallelism
  EXPECT_FALSE(cad.lanes_reason.empty());
  // auto: on under pipeline ticks; an explicit setting wins either way
  EXPECT_EQ(make_run_plan(config_with({{"attention.placement", "cad"}, {"parallel.pp", "2"}}), 2).lanes, 2);
  EXPECT_EQ(make_run_plan(config_with({{"attention.placement", "cad"}, {"parallel.pp", "2"},
                                       {"attention.cad_pingpong", "false"}}), 2).lanes, 1);
  const RunPlan off = make_run_plan(config_with({{"attention.placement", "cad"}, {"attention.cad_pingpong", "false"}}), 2);
  EXPECT_EQ(off.lanes, 1);
  EXPECT_TRUE(off.lanes_reason.empty());
  EXPECT_TRUE(cad.cad.rank_speeds);  // auto cost model, one lane
  EXPECT_FALSE(make_run_plan(config_with({{"attention.placement", "cad"}, {"attention.cad_profile", "pairs"}}), 2)
                   .cad.rank_speeds);  // pairs have no seconds to set speeds against
  // ping-pong is a CAD feature: colocated attention has no traffic to hide
  EXPECT_EQ(make_run_plan(config_with({{"attention.cad_pingpong", "true"}}), 2).lanes, 1);
  const RunPlan cp = make_run_plan(config_with({{"parallel.cp", "2"}, {"parallel.cp_comm", "allgather"}}), 2);
  EXPECT_EQ(cp.placement, Placement::context_parallel);
  EXPECT_EQ(cp.cp_comm, CpComm::allgather);
  EXPECT_EQ(make_run_plan(config_with({{"parallel.cp", "2"}, {"attention.placement", "cad"}}), 2).placement,
            Placement::cad);  // CAD plans the cp pieces like documents
}

// Ulysses and the hybrid split heads over their all-to-all group; the double ring splits
// the ring. Defaults: 4 heads, 2 KV heads (configs/default.toml).
TEST(RunPlan, ContextParallelExchanges) {
  const RunPlan u = make_run_plan(config_with({{"parallel.cp", "4"}, {"parallel.cp_comm", "ulysses"}}), 4);
  EXPECT_EQ(u.cp_ulysses, 4);  // 2 KV heads over 4 ranks: each replicated twice
  const RunPlan h = make_run_plan(
      config_with({{"parallel.cp", "4"}, {"parallel.cp_comm", "hybrid"}, {"parallel.cp_ulysses", "2"}}), 4);
  EXPECT_EQ(h.cp_ulysses, 2);
  EXPECT_NE(describe_run_plan(h).find("hybrid 2 x 2"), std::string::npos);
  const RunPlan d = make_run_plan(config_with({{"parallel.cp", "4"}, {"parallel.cp_comm", "double_ring"}}), 4);
  EXPECT_EQ(d.cp_inner_ring, 2);
  EXPECT_EQ(d.cp_ulysses, 1);
  EXPECT_NE(describe_run_plan(d).find("double_ring 2 x 2"), std::string::npos);
  // CAD replaces the exchange: nothing is checked against it
  EXPECT_EQ(make_run_plan(config_with({{"parallel.cp", "3"}, {"parallel.cp_comm", "ulysses"}, {"data.seq_len", "96"},
                                       {"attention.placement", "cad"}}), 3).placement,
            Placement::cad);
  EXPECT_NE(refusal(config_with({{"parallel.cp", "3"}, {"parallel.cp_comm", "ulysses"}, {"data.seq_len", "96"}}), 3)
                .find("model.num_attention_heads = 4 does not split over parallel.cp = 3 ranks"),
            std::string::npos);
  EXPECT_NE(refusal(config_with({{"parallel.cp", "3"}, {"parallel.cp_comm", "ulysses"}, {"data.seq_len", "96"},
                                 {"model.hidden_size", "48"}, {"model.num_attention_heads", "6"}}), 3)
                .find("model.num_key_value_heads = 2 must be a multiple or a divisor of parallel.cp = 3"),
            std::string::npos);
  EXPECT_NE(refusal(config_with({{"parallel.cp", "4"}, {"parallel.cp_comm", "hybrid"}, {"parallel.cp_ulysses", "4"}}), 4)
                .find("parallel.cp_ulysses = 4 to divide parallel.cp = 4"),
            std::string::npos);
  EXPECT_NE(refusal(config_with({{"parallel.cp", "4"}, {"parallel.cp_comm", "double_ring"},
                                 {"parallel.cp_inner_ring", "3"}}), 4)
                .find("parallel.cp_inner_ring = 3 to divide parallel.cp = 4"),
            std::string::npos);
}

TEST(RunPlan, Balance) {
  EXPECT_EQ(make_run_plan(config_with({{"parallel.dp_balance", "packing"}}), 2).balance, DpBalance::packing);
  EXPECT_EQ(make_run_plan(config_with({{"parallel.dp_balance", "packing"}}), 1).balance, DpBalance::none);
  EXPECT_EQ(make_run_plan(config_with({{"parallel.dp_balance", "packing"}, {"parallel.pp", "2"}}), 4).balance,
            DpBalance::packing);
}

TEST(RunPlan, Refusals) {
  EXPECT_NE(refusal(config_with({{"parallel.dp", "2"}}), 3).find("MPI world has 3 ranks"), std::string::npos);
  EXPECT_NE(refusal(config_with({{"parallel.dp_balance", "packing"}, {"attention.placement", "cad"}}), 2)
                .find("parallel.dp_balance = packing"),
            std::string::npos);
  EXPECT_NE(refusal(config_with({{"parallel.dp_balance", "packing"}, {"parallel.cp", "2"}}), 2)
                .find("parallel.dp_balance = packing"),
            std::string::npos);
  EXPECT_NE(refusal(config_with({{"attention.placement", "cad"}, {"parallel.pp", "2"}, {"parallel.pp_layers", "[1, 3]"}}), 2)
                .find("same number of layers on every stage"),
            std::string::npos);
  EXPECT_NE(refusal(config_with({{"parallel.cp", "2"}, {"data.seq_len", "2046"}}), 2).find("multiple of 2 x parallel.cp"),
            std::string::npos);
  // unequal stages are fine without CAD
  EXPECT_EQ(refusal(config_with({{"parallel.pp", "2"}, {"parallel.pp_layers", "[1, 3]"}}), 2), "");
}

}  // namespace
}  // namespace lct::run_plan_test

namespace lct::run_plan_test {
namespace {

// The step model (src/train/step_model.h): replica d of a step starting at `first` reads
// sequences first + d x mb + m, its context-parallel ranks split each one with every
// token and attention pair once; packing re-packs exactly the global batch's documents.
TEST(StepModel, EveryRankTrainsItsShareOfTheGlobalBatch) {
  for (const char* mask : {"causal", "sliding_window"}) {
    const Config c = config_with({{"data.seq_len", "512"}, {"data.max_doc_len", "300"}, {"train.micro_batches", "2"},
                                  {"parallel.cp", "2"}, {"attention.mask", mask}, {"attention.window", "64"}});
    const RunPlan plan = make_run_plan(c, 4);  // dp 2 x cp 2
    ASSERT_EQ(plan.layout.dp, 2);
    DocumentStream stream(plan);
    const int64_t first = 6, mb = 2;
    for (int d = 0; d < 2; ++d) {
      std::vector<std::vector<LocalBatch>> by_cp;
      for (int cp = 0; cp < 2; ++cp) {
        std::set<int64_t> asked;
        by_cp.push_back(step_micro_batches(
            plan, [&](int64_t i) { asked.insert(i); return stream.sequence(i); }, first, d, cp));
        EXPECT_EQ(asked, (std::set<int64_t>{first + d * mb, first + d * mb + 1})) << mask;
        ASSERT_EQ(by_cp.back().size(), size_t(mb));
      }
      for (int64_t m = 0; m < mb; ++m) {
        const LocalBatch whole = whole_sequence(stream.sequence(first + d * mb + m));
        const MicroBatchCost a = micro_batch_cost(plan, by_cp[0][size_t(m)]), b = micro_batch_cost(plan, by_cp[1][size_t(m)]);
        EXPECT_EQ(a.tokens + b.tokens, 512) << mask;
        EXPECT_EQ(a.pairs + b.pairs, whole.attention_pairs(plan.model.attention_mask)) << mask;
        EXPECT_DOUBLE_EQ(a.forward_flops, forward_flops(plan.model, a.tokens, a.pairs));
      }
    }
  }
  // packing: the global batch's documents, re-packed by work over the replicas
  const Config c = config_with({{"data.seq_len", "512"}, {"data.max_doc_len", "300"}, {"train.micro_batches", "2"},
                                {"parallel.dp_balance", "packing"}});
  const RunPlan plan = make_run_plan(c, 2);
  ASSERT_EQ(plan.balance, DpBalance::packing);
  DocumentStream stream(plan);
  int64_t tokens = 0, pairs = 0;
  for (int d = 0; d < 2; ++d) {
    std::set<int64_t> asked;
    for (const LocalBatch& b : step_micro_batches(
             plan, [&](int64_t i) { asked.insert(i); return stream.sequence(i); }, 4, d, 0)) {
      tokens += micro_batch_cost(plan, b).tokens;
      pairs += micro_batch_cost(plan, b).pairs;
    }
    EXPECT_EQ(asked, (std::set<int64_t>{4, 5, 6, 7}));  // the whole global batch
  }
  int64_t global_pairs = 0;
  for (int64_t i = 4; i < 8; ++i) global_pairs += whole_sequence(stream.sequence(i)).attention_pairs({});
  EXPECT_EQ(tokens, 4 * 512);
  EXPECT_EQ(pairs, global_pairs);
  // the work packing balances is the mask's: a window reads fewer pairs than causal
  EXPECT_DOUBLE_EQ(document_work(plan, 1000), forward_flops(plan.model, 1000, 1000 * 1001 / 2));
  const RunPlan windowed =
      make_run_plan(config_with({{"attention.mask", "sliding_window"}, {"attention.window", "64"}}), 1);
  EXPECT_LT(document_work(windowed, 1000), document_work(plan, 1000));
}

}  // namespace
}  // namespace lct::run_plan_test
