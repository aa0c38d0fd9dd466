// The step metrics schema (src/metrics/step_metrics.h) reaches every consumer: the
// reduction over ranks, metrics.jsonl, the log line, the checkpoint's /metrics and lct
// inspect's summary (whose --compare rows follow the same summaries).
#include <fmt/printf.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "src/cli/inspect.h"
#include "src/config/config.h"
#include "src/io/checkpoint.h"
#include "src/metrics/step_metrics.h"
#include "src/train/run_plan.h"
#include "src/util/json.h"
#include "tests/test_util.h"

namespace lct::step_metrics_test {  // the file's own namespace: a unity build compiles test files together
namespace {
namespace fs = std::filesystem;

// A record whose every field holds its own value (field i: 10 + i, times 1000 for the
// byte counts so that the log's MiB stay readable).
StepRecord distinct_record() {
  StepRecord r;
  double v = 10;
  for (const StepMetric& m : step_metrics()) m.set(r, m.unit == "bytes" ? 1048576.0 * v : v), v += 1;
  r.answers = std::max<int64_t>(r.answers, 1);
  return r;
}

TEST(StepMetrics, NamesAreUnique) {
  for (const StepMetric& m : step_metrics()) {
    EXPECT_EQ(find_step_metric(m.name), &m) << m.name;
    EXPECT_TRUE(m.get && m.set) << m.name;
  }
}

TEST(StepMetrics, EveryFieldReachesMetricsJsonl) {
  const StepRecord r = distinct_record();
  std::ostringstream out;
  write_metrics_json(out, r);
  const Json row = Json::parse(out.str());  // one line of JSON, every value exactly
  for (const StepMetric& m : step_metrics()) {
    ASSERT_TRUE(row.contains(m.name)) << m.name << " not in " << out.str();
    if (m.integer) EXPECT_EQ(row[m.name].get<int64_t>(), int64_t(m.get(r))) << m.name;
    else EXPECT_EQ(row[m.name].get<double>(), m.get(r)) << m.name;
  }
}

TEST(StepMetrics, EveryLoggedFieldReachesTheLogLine) {
  const StepRecord r = distinct_record();
  const std::string line = step_log_fields(r, {2, true, true});
  for (const StepMetric& m : step_metrics()) {
    if (m.when == LogWhen::never) continue;
    const std::string want = fmt::sprintf(m.log, m.get(r) * m.log_scale);  // as step_log_fields formats it
    EXPECT_NE(line.find(want), std::string::npos) << want << " not in " << line;
  }
  // and only where it applies: one rank without pipeline or exchange shows none of those
  const std::string plain = step_log_fields(r, {1, false, false});
  for (const StepMetric& m : step_metrics()) {
    if (m.when == LogWhen::never || m.when == LogWhen::always) continue;
    const std::string text = fmt::sprintf(m.log, m.get(r) * m.log_scale);
    EXPECT_EQ(plain.find(text), std::string::npos) << text << " in " << plain;
  }
}

TEST(StepMetrics, EveryFieldReachesTheCheckpoint) {
  const fs::path path = fs::temp_directory_path() / ("lct_step_metrics_" + std::to_string(::getpid()) + ".h5");
  Config config;
  config.model = test::llama_shape(64, 16, 24, 1, 2, 1);
  LlamaModel model(config.model);
  Optimizer optimizer(make_run_plan(config, 1).optimizer, model.table());
  TrainerState state;
  state.step = 1;
  const StepRecord r = distinct_record();
  write_checkpoint(path.string(), config_to_toml(config), model, optimizer, state, {r});
  const CheckpointContents c = read_checkpoint_header(H5File::open_read(path.string()));
  fs::remove(path);
  ASSERT_EQ(c.history.size(), 1u);
  for (const StepMetric& m : step_metrics()) EXPECT_EQ(m.get(c.history[0]), m.get(r)) << m.name;
}

TEST(StepMetrics, EverySummarisedFieldReachesInspect) {
  const std::string json = metrics_summary_json({distinct_record(), distinct_record(), distinct_record()});
  for (const StepMetric& m : step_metrics())
    if (m.summary != Summary::none) {
      EXPECT_NE(json.find("\"" + m.name + "\":"), std::string::npos) << m.name << " not in " << json;
    }
  // rates by the clock: three equal steps give the step's own rate
  const StepRecord r = distinct_record();
  EXPECT_NE(json.find("\"tokens_per_s\":" + std::to_string(int(r.tokens_per_s))), std::string::npos) << json;
}

TEST(StepMetrics, ReductionOverRanks) {
  // two ranks on two pipeline stages: each field by its rule
  StepRecord a, b;
  a.compute_max_over_mean = 3, b.compute_max_over_mean = 1;  // compute seconds: max/mean 1.5
  a.idle_fraction = 0.1, b.idle_fraction = 0.3;              // seconds: mean 0.2 of a 2 s step
  a.bubble_fraction = 0.05, b.bubble_fraction = 0.25;        // max, and per stage
  a.peak_activation_bytes = 7, b.peak_activation_bytes = 9;
  a.peak_rss_bytes = 5, b.peak_rss_bytes = 4;                // max
  std::vector<double> rows = rank_values(a);
  for (double v : rank_values(b)) rows.push_back(v);
  StepRecord r;
  reduce_over_ranks(rows, {0, 1}, 2, 2.0, r);
  EXPECT_DOUBLE_EQ(r.compute_max_over_mean, 1.5);
  EXPECT_DOUBLE_EQ(r.idle_fraction, 0.1);
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 0.25);
  EXPECT_EQ(r.peak_activation_bytes, 9);
  EXPECT_EQ(r.peak_rss_bytes, 5);
  EXPECT_EQ(r.stage_bubble, (std::vector<double>{0.05, 0.25}));
  EXPECT_EQ(r.stage_activation_bytes, (std::vector<int64_t>{7, 9}));
  // one rank: the straggler figures are those of no straggler
  StepRecord one;
  reduce_over_ranks(rank_values(a), {0}, 1, 1.0, one);
  EXPECT_EQ(one.compute_max_over_mean, 1.0);
  EXPECT_EQ(one.idle_fraction, 0.0);
}

}  // namespace
}  // namespace lct::step_metrics_test
