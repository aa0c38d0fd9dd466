// lct simulate's network (src/sim/network.h): links within a host hide what lct overlaps,
// links between hosts run at the host bandwidth and hide nothing. Checked on the cost
// functions with hand-set costs, so every figure follows from the formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/llama.h"
#include "src/config/config.h"
#include "src/sim/calibration.h"
#include "src/sim/costs.h"
#include "src/sim/network.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"

namespace lct::sim_test {  // the file's own namespace: a unity build compiles test files together
namespace {

RunPlan plan_with(const std::map<std::string, std::string>& overrides, int world) {
  Config c;
  apply_overrides(c, overrides);
  validate_config(c);
  return make_run_plan(c, world);
}

Calibration costs() {
  Calibration cal;
  cal.linear_per_token_layer = 1e-6;
  cal.head_per_token = 1e-7;
  cal.attention_per_pair_layer = 1e-9;
  return cal;
}

// The first step's micro-batch 0 on every rank (ranks_micro_batches: rank d * cp + c).
std::vector<LocalBatch> first_micro_batch(const RunPlan& plan) {
  DocumentStream stream(plan);
  std::vector<PackedBatch> global;
  for (int64_t i = 0; i < int64_t(plan.layout.dp) * plan.micro_batches; ++i) global.push_back(stream.sequence(i));
  std::vector<LocalBatch> out;
  for (const std::vector<LocalBatch>& rank : ranks_micro_batches(plan, global)) out.push_back(rank[0]);
  return out;
}

// The calibration times the run's arithmetic: a bf16 run in bf16 on the kernel lct train
// would choose (it used to time every run in fp32 on OpenBLAS, and predicted a bf16 step
// of one 16K document at 20.4 s that ran in 9.8-10.9 s), with the run's token tiles.
TEST(SimCalibration, TimesTheRunsArithmetic) {
  for (const std::string precision : {"fp32", "bf16"}) {
    const RunPlan plan = plan_with({{"train.precision", precision}, {"train.fp32_gemm", "openblas"},
                                    {"train.bf16_kernel", "rounded"}, {"train.tile_tokens", "1024"}},
                                   1);
    LlamaModel m(plan.model);
    prepare_calibration_model(plan, m);
    EXPECT_EQ(m.precision(), plan.precision) << precision;
    EXPECT_EQ(bf16_kernel_of(m.arithmetic()), precision == "bf16" ? Bf16Kernel::rounded : bf16_kernel_of({}))
        << precision;
    EXPECT_EQ(m.arithmetic().fp32_library, Fp32Library::openblas);
    EXPECT_EQ(m.tile_tokens(), 1024);
  }
}

TEST(SimNetwork, HostsAreBlocksOfConsecutiveRanks) {
  SimulateOptions o;
  o.ranks = 8;
  o.hosts = 2;
  o.bandwidth_gbps = 10;
  o.host_bandwidth_gbps = 0.5;
  o.host_latency_us = 60;
  const Network net = network_of(o);
  EXPECT_EQ(net.ranks_per_host, 4);
  EXPECT_EQ(net.host_of(3), 0);
  EXPECT_EQ(net.host_of(4), 1);
  EXPECT_FALSE(net.spans_hosts({0, 1, 2, 3}));
  EXPECT_TRUE(net.spans_hosts({3, 4}));
  EXPECT_DOUBLE_EQ(net.seconds(1e9, 2, true), 1e9 / 0.5e9 + 2 * 60e-6);
  EXPECT_DOUBLE_EQ(net.seconds(1e9, 2, false), 1e9 / 10e9 + 2 * 5e-6);
  o.host_bandwidth_gbps = 0;  // unset: the host link is the local one
  o.host_latency_us = -1;
  EXPECT_DOUBLE_EQ(network_of(o).host_bandwidth, 10e9);
  EXPECT_DOUBLE_EQ(network_of(o).host_latency, 5e-6);
}

TEST(SimNetwork, GradientAllReduceAcrossHostsIsNotHidden) {
  const RunPlan plan = plan_with({}, 4);
  const double grad = double(build_llama_table(plan.model).total()) * sizeof(float);
  const double bucket = double(plan.reduction.bucket_size) * sizeof(float);
  ASSERT_TRUE(plan.reduction.overlap);
  ASSERT_LT(bucket, grad);  // otherwise the tail is the whole arena anyway
  const Network one = Network::one_host(4, 2e9, 5e-6);
  Network two = one;
  two.ranks_per_host = 2;
  two.host_bandwidth = 0.1e9;
  two.host_latency = 60e-6;
  // within a host only the last bucket is left when backward ends; 2 (n - 1) / n of it moves
  EXPECT_DOUBLE_EQ(allreduce_tail_seconds(plan, plan.model, 1, {0, 1}, two), 2.0 / 2 * bucket / 2e9 + 2 * 5e-6);
  // across hosts all of it, at the host link
  EXPECT_DOUBLE_EQ(allreduce_tail_seconds(plan, plan.model, 1, {0, 1, 2, 3}, two),
                   2.0 * 3 / 4 * grad / 0.1e9 + 6 * 60e-6);
  EXPECT_DOUBLE_EQ(allreduce_tail_seconds(plan, plan.model, 1, {0, 1, 2, 3}, one), 2.0 * 3 / 4 * bucket / 2e9 + 6 * 5e-6);
  EXPECT_EQ(allreduce_tail_seconds(plan, plan.model, 1, {2}, two), 0.0);
}

TEST(SimNetwork, ContextParallelRingAcrossHostsIsExposed) {
  for (const char* comm : {"ring", "allgather", "ulysses"}) {
    const RunPlan plan = plan_with({{"parallel.cp", "2"}, {"parallel.cp_comm", comm}}, 2);
    const std::vector<LocalBatch> pieces = first_micro_batch(plan);
    const double tokens = double(pieces[0].num_tokens() + pieces[1].num_tokens());
    const Calibration cal = costs();
    const std::optional<CadCostModel> none;
    const AttentionCost attn{cal, none, 1.0, plan.model.attention_mask};
    const Network one = Network::one_host(2, 1e9, 5e-6);
    Network two = one;
    two.ranks_per_host = 1;
    two.host_bandwidth = 0.2e9;
    two.host_latency = 60e-6;
    const CpLayer local = cp_layer_cost(plan, pieces, tokens, attn, cal, one, {0, 1});
    const CpLayer remote = cp_layer_cost(plan, pieces, tokens, attn, cal, two, {0, 1});
    EXPECT_EQ(local.bytes, remote.bytes) << comm;
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(local.busy[size_t(c)], remote.busy[size_t(c)]) << comm;
      EXPECT_GE(remote.time[size_t(c)], local.time[size_t(c)]) << comm;
    }
    if (std::string(comm) == "ring") {
      // every byte at the host link, nothing hidden behind the rank's attention
      for (int c = 0; c < 2; ++c)
        EXPECT_DOUBLE_EQ(remote.time[size_t(c)], remote.busy[size_t(c)] + remote.bytes / 0.2e9 + 3 * 60e-6);
      // within a host at an unbounded link: hidden
      const Network fast = Network::one_host(2, 1e30, 0);
      const CpLayer hidden = cp_layer_cost(plan, pieces, tokens, attn, cal, fast, {0, 1});
      for (int c = 0; c < 2; ++c) EXPECT_DOUBLE_EQ(hidden.time[size_t(c)], hidden.busy[size_t(c)]);
    }
    // the group on one host of two: the host link does not enter
    Network wide = two;
    wide.ranks_per_host = 2;
    wide.host_bandwidth = 1e-3;
    const CpLayer same = cp_layer_cost(plan, pieces, tokens, attn, cal, wide, {0, 1});
    for (int c = 0; c < 2; ++c) EXPECT_EQ(same.time[size_t(c)], local.time[size_t(c)]) << comm;
  }
}

TEST(SimNetwork, CadExchangeAcrossHostsIsNotHidden) {
  const RunPlan plan = plan_with({{"attention.placement", "cad"}, {"attention.cad_pingpong", "false"}}, 2);
  const std::vector<LocalBatch> batches = first_micro_batch(plan);
  const Calibration cal = costs();
  const std::optional<CadCostModel> none;
  const AttentionCost attn{cal, none, 1.0, plan.model.attention_mask};
  std::vector<double> served(2);
  const auto layer = [&](const Network& net) { return CadLayerCost(plan, cal, attn, none, net).cost(batches, served); };
  const CadLayer local = layer(Network::one_host(2, 1e30, 0));
  ASSERT_GT(local.bytes, 0);  // the planner ships tasks, or there is nothing to check
  const double busy = *std::max_element(local.busy.begin(), local.busy.end());
  EXPECT_DOUBLE_EQ(local.seconds, busy);  // an unbounded link within a host: all hidden
  Network two = Network::one_host(1, 1e30, 0);
  two.host_bandwidth = 0.2e9;
  two.host_latency = 60e-6;
  const CadLayer remote = layer(two);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_EQ(remote.busy, local.busy);
  // each rank waits for its bytes, phase after phase (at most all bytes moved), and four
  // rounds of messages
  EXPECT_GT(remote.seconds, busy + 4 * 60e-6);
  EXPECT_LE(remote.seconds, busy + remote.bytes / 0.2e9 + 4 * 60e-6 + 1e-12);
  // the same ranks on one host at that bandwidth hide part of it behind their own tasks
  Network slow_local = Network::one_host(2, 0.2e9, 60e-6);
  EXPECT_LE(layer(slow_local).seconds, remote.seconds);
}

}  // namespace
}  // namespace lct::sim_test
