#include "src/metrics/step_metrics.h"

#include "src/util/json.h"

#include <fmt/format.h>
#include <fmt/printf.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <type_traits>

namespace lct {

double StepRecord::retrieval_acc() const {
  return answers > 0 ? double(answers_correct) / double(answers) : std::numeric_limits<double>::quiet_NaN();
}

namespace {

constexpr double kMiB = 1.0 / 1048576.0;

// One entry: a double or int64 field of StepRecord.
template <typename T>
StepMetric field(std::string name, std::string unit, T StepRecord::*member, OverRanks over, Summary summary,
                 bool optional, LogWhen when, std::string log, double log_scale = 1.0, bool of_step = false) {
  StepMetric m;
  m.name = std::move(name);
  m.unit = std::move(unit);
  m.over = over;
  m.summary = summary;
  m.integer = std::is_integral_v<T>;
  m.optional = optional;
  m.when = when;
  m.log = std::move(log);
  m.log_scale = log_scale;
  m.of_step = of_step;
  m.get = [member](const StepRecord& r) { return double(r.*member); };
  m.set = [member](StepRecord& r, double v) { r.*member = T(v); };
  return m;
}

std::vector<StepMetric> make_schema() {
  using O = OverRanks;
  using S = Summary;
  using W = LogWhen;
  return {
      // the step itself (format v1: every checkpoint has these)
      field("step", "", &StepRecord::step, O::none, S::none, false, W::never, ""),
      field("loss", "", &StepRecord::loss, O::none, S::none, false, W::always, "loss %.4f"),
      field("lr", "", &StepRecord::lr, O::none, S::none, false, W::always, "lr %.3e"),
      field("grad_norm", "", &StepRecord::grad_norm, O::none, S::median, false, W::always, "gnorm %.3f"),
      field("ms", "ms", &StepRecord::ms, O::none, S::mean, false, W::always, "%7.1f ms"),
      field("tokens", "tokens", &StepRecord::tokens, O::none, S::none, false, W::never, ""),
      field("targets", "tokens", &StepRecord::targets, O::none, S::none, false, W::never, ""),
      field("tokens_per_s", "tokens/s", &StepRecord::tokens_per_s, O::none, S::rate, false, W::always, "%8.0f tok/s"),
      field("gflops", "GFLOP/s", &StepRecord::gflops, O::none, S::rate, false, W::always, "%6.1f GFLOP/s"),
      field("answers", "", &StepRecord::answers, O::none, S::none, false, W::never, ""),
      field("answers_correct", "", &StepRecord::answers_correct, O::none, S::none, false, W::never, ""),
      // over the ranks (added with data parallelism); each rank's own value: its compute
      // seconds, its seconds in communication
      field("compute_max_over_mean", "ratio", &StepRecord::compute_max_over_mean, O::max_over_mean, S::median,
            true, W::ranks, "compute max/mean %.2f"),
      field("idle_fraction", "fraction", &StepRecord::idle_fraction, O::mean, S::median, true, W::ranks,
            "idle %4.1f%%", 100, true),
      // pipeline parallelism: each rank's bubble and peak activation bytes
      field("bubble_fraction", "fraction", &StepRecord::bubble_fraction, O::max, S::median, true, W::pipeline,
            "bubble %4.1f%%", 100),
      field("bubble_theoretical", "fraction", &StepRecord::bubble_theoretical, O::none, S::median, true,
            W::pipeline, "theory %4.1f%%", 100),
      field("peak_activation_bytes", "bytes", &StepRecord::peak_activation_bytes, O::max, S::median, true,
            W::pipeline, "activations %.1f MiB", kMiB),
      field("pipeline_bytes_sent", "bytes", &StepRecord::pipeline_bytes_sent, O::mean, S::median, true,
            W::pipeline, "pipe %.2f MiB sent/rank", kMiB),
      // placements (added with context parallelism): each rank's attention pairs (its
      // queries', and those it computed), exchange bytes and exposed / hidden seconds
      field("attention_pairs_max_over_mean", "ratio", &StepRecord::attention_pairs_max_over_mean,
            O::max_over_mean, S::median, true, W::exchange, "pairs max/mean %.3f"),
      field("exchange_bytes_sent", "bytes", &StepRecord::exchange_bytes_sent, O::mean, S::median, true,
            W::exchange, "%.1f MiB sent/rank", kMiB),
      field("exchange_exposed_fraction", "fraction", &StepRecord::exchange_exposed_fraction, O::mean, S::median,
            true, W::exchange, "exposed %4.1f%%", 100, true),
      field("exchange_hidden_fraction", "fraction", &StepRecord::exchange_hidden_fraction, O::mean, S::median,
            true, W::exchange, "hidden %4.1f%%", 100, true),
      // the same per layer and micro-batch (the rank's stage's layers)
      field("exchange_bytes_per_layer", "bytes", &StepRecord::exchange_bytes_per_layer, O::mean, S::median, true,
            W::exchange, "%.2f MiB/layer", kMiB),
      field("exchange_exposed_ms_per_layer", "ms", &StepRecord::exchange_exposed_ms_per_layer, O::mean, S::median,
            true, W::exchange, "exposed %.2f ms/layer"),
      field("attention_pairs_served_max_over_mean", "ratio", &StepRecord::attention_pairs_served_max_over_mean,
            O::max_over_mean, S::median, true, W::exchange, "served pairs max/mean %.3f"),
      field("peak_rss_bytes", "bytes", &StepRecord::peak_rss_bytes, O::max, S::median, true, W::exchange,
            "peak RSS %.0f MiB", kMiB),
      // activation memory (added with recomputation): each rank's bytes per token
      field("activation_bytes_per_token", "bytes", &StepRecord::activation_bytes_per_token, O::max, S::median,
            true, W::always, "stored %.1f KiB/token", 1.0 / 1024),
      field("scratch_bytes_per_token", "bytes", &StepRecord::scratch_bytes_per_token, O::max, S::median, true,
            W::always, "scratch %.1f KiB/token", 1.0 / 1024),
  };
}

double reduce(OverRanks over, const std::vector<double>& v) {
  double mx = 0, sum = 0;
  for (double x : v) mx = std::max(mx, x), sum += x;
  const double mean = v.empty() ? 0 : sum / double(v.size());
  switch (over) {
    case OverRanks::max: return mx;
    case OverRanks::mean: return mean;
    case OverRanks::max_over_mean: return mean > 0 ? mx / mean : 1.0;
    case OverRanks::none: break;
  }
  return 0;
}

}  // namespace

const std::vector<StepMetric>& step_metrics() {
  static const std::vector<StepMetric> schema = make_schema();
  return schema;
}

const StepMetric* find_step_metric(const std::string& name) {
  for (const StepMetric& m : step_metrics())
    if (m.name == name) return &m;
  return nullptr;
}

std::vector<double> rank_values(const StepRecord& mine) {
  std::vector<double> v;
  for (const StepMetric& m : step_metrics())
    if (m.over != OverRanks::none) v.push_back(m.get(mine));
  return v;
}

void reduce_over_ranks(const std::vector<double>& rows, const std::vector<int>& stage_of, int stages,
                       double step_seconds, StepRecord& record) {
  const size_t ranks = stage_of.size();
  const size_t width = size_t(std::count_if(step_metrics().begin(), step_metrics().end(),
                                            [](const StepMetric& m) { return m.over != OverRanks::none; }));
  if (ranks == 0 || rows.size() != ranks * width) return;
  record.stage_bubble.assign(size_t(stages), 0.0);
  record.stage_activation_bytes.assign(size_t(stages), 0);
  size_t col = 0;
  for (const StepMetric& m : step_metrics()) {
    if (m.over == OverRanks::none) continue;
    std::vector<double> v(ranks);
    for (size_t r = 0; r < ranks; ++r) v[r] = rows[r * width + col];
    m.set(record, reduce(m.over, v) / (m.of_step ? std::max(step_seconds, 1e-9) : 1.0));
    for (size_t r = 0; r < ranks; ++r) {  // per pipeline stage: its worst rank
      const size_t s = size_t(stage_of[r]);
      if (m.name == "bubble_fraction") record.stage_bubble[s] = std::max(record.stage_bubble[s], v[r]);
      if (m.name == "peak_activation_bytes")
        record.stage_activation_bytes[s] = std::max(record.stage_activation_bytes[s], int64_t(v[r]));
    }
    ++col;
  }
  if (ranks == 1) record.compute_max_over_mean = 1.0, record.idle_fraction = 0.0;  // figures of several ranks
}

void write_metrics_json(std::ostream& out, const StepRecord& r) {
  Json row;
  for (const StepMetric& m : step_metrics()) {
    if (m.integer) row[m.name] = int64_t(m.get(r));
    else row[m.name] = m.get(r);
  }
  if (r.stage_bubble.size() > 1) {
    row["stage_bubble"] = r.stage_bubble;
    row["stage_activation_bytes"] = r.stage_activation_bytes;
  }
  if (r.answers > 0) row["retrieval_acc"] = r.retrieval_acc();
  if (!r.rank_tokens.empty()) {
    row["rank_tokens"] = r.rank_tokens;
    row["rank_attention_pairs"] = r.rank_attention_pairs;
    row["rank_exchange_bytes"] = r.rank_exchange_bytes;
  }
  out << json_text(row) << "\n";
}

std::string step_log_fields(const StepRecord& r, const LogContext& c) {
  std::string s;
  for (const StepMetric& m : step_metrics()) {
    const bool shown = m.when == LogWhen::always || (m.when == LogWhen::ranks && c.ranks > 1) ||
                       (m.when == LogWhen::pipeline && c.pipelined) || (m.when == LogWhen::exchange && c.exchanges);
    if (!shown || m.log.empty()) continue;
    // m.log is a printf format held in the table (a runtime value, which fmt's compile-time
    // checked "{}" formats cannot be), hence fmt::sprintf
    s += (s.empty() ? "" : " | ") + fmt::sprintf(m.log, m.get(r) * m.log_scale);
    if (m.name == "gflops" && r.answers > 0)  // the synthetic source's retrieval answers
      s += fmt::format(" | recall {:.3f}", r.retrieval_acc());
  }
  return s;
}

}  // namespace lct
