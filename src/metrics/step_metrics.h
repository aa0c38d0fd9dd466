// Step metrics: one record per training step, and one schema of its figures that every
// consumer follows. The schema (step_metrics()) drives
//   - the reduction over ranks: each rank fills a StepRecord with its own values, the
//     trainer all-gathers the fields whose `over` is not `none` and reduces them here
//     (reduce_over_ranks);
//   - the log line (the fields with a log format, in schema order);
//   - metrics.jsonl (every field, write_metrics_json);
//   - the checkpoint's /metrics/<name> datasets (src/io/checkpoint.cpp);
//   - lct inspect and --compare (every field's summary over the last steps).
// Adding a metric is one entry in step_metrics.cpp; tests/step_metrics.sh checks that
// every field reaches all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

namespace lct {

struct StepRecord {
  int64_t step = 0;  // 1-based step just completed
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0, gflops = 0;
  int64_t tokens = 0, targets = 0;
  int64_t answers = 0, answers_correct = 0;  // synthetic retrieval targets
  // Straggler figures over the ranks of the step (1 and 0 in a single process):
  // max / mean of per-rank compute time, and the mean fraction of the step a rank
  // spent waiting in communication.
  double compute_max_over_mean = 1.0, idle_fraction = 0.0;
  // Pipeline figures (0 without pipeline parallelism): the worst stage's bubble (time
  // blocked on activations/gradients from neighbours over the schedule's time), the
  // theoretical (pp - 1) / (m + pp - 1), and the largest stage's peak activation bytes.
  double bubble_fraction = 0.0, bubble_theoretical = 0.0;
  int64_t peak_activation_bytes = 0;
  // Bytes this rank sent to its neighbouring pipeline stages (activations forward,
  // gradients back; bf16 in a bf16 run), mean over ranks.
  double pipeline_bytes_sent = 0.0;
  // Attention work (pairs) of the busiest rank over the mean, before and after the
  // placement (CAD's plan); exchange bytes sent per rank (mean) and the step's fractions
  // of exposed and hidden exchange time (mean over ranks); the largest rank's peak
  // resident memory.
  double attention_pairs_max_over_mean = 1.0, attention_pairs_served_max_over_mean = 1.0;
  double exchange_bytes_sent = 0.0;
  double exchange_exposed_fraction = 0.0, exchange_hidden_fraction = 0.0;
  double exchange_bytes_per_layer = 0.0, exchange_exposed_ms_per_layer = 0.0;  // per layer and micro-batch
  int64_t peak_rss_bytes = 0;
  // What the model held per token of a micro-batch (the largest rank's): activations kept
  // for backward (peak slots and the recomputation workspace) and backward scratch;
  // train.recompute decides the first (model/recompute.h).
  double activation_bytes_per_token = 0.0, scratch_bytes_per_token = 0.0;
  // Per pipeline stage (log and metrics.jsonl only, not checkpointed).
  std::vector<double> stage_bubble;
  std::vector<int64_t> stage_activation_bytes;
  // Per rank, in world-rank order (metrics.jsonl only, not checkpointed): the tokens of
  // the micro-batches it trained and the attention pairs its queries read under the mask
  // (the step model, src/train/step_model.h; lct simulate --json predicts the same), and
  // the bytes its attention exchange sent (the simulator predicts them exactly for the
  // ring, the all-gather and the double ring).
  std::vector<int64_t> rank_tokens, rank_attention_pairs, rank_exchange_bytes;
  double retrieval_acc() const;  // NaN when the step had no answers
};

// How the ranks' values of a field become the step's value.
enum class OverRanks {
  none,           // computed once (the same on every rank, or rank 0's)
  max,            // the largest rank's
  mean,           // the mean over ranks
  max_over_mean,  // the largest over the mean (1 when all are 0)
};

// How lct inspect summarises a field over a window of steps.
enum class Summary {
  none,    // not summarised (identifiers and counts)
  median,  // the median step's value
  rate,    // a rate: total over total time (tokens/s, GFLOP/s), never a median of rates
  mean,    // the mean step (ms)
};

// When the log line shows a field.
enum class LogWhen { never, always, ranks, pipeline, exchange };
struct LogContext {
  int ranks = 1;           // more than one: the straggler figures
  bool pipelined = false;  // pp > 1: bubble and activations
  bool exchanges = false;  // context parallelism or CAD: pairs, bytes, exposed / hidden
};

struct StepMetric {
  std::string name;   // metrics.jsonl key, /metrics/<name>, inspect's JSON key
  std::string unit;   // "", "ms", "tokens/s", "GFLOP/s", "bytes", "fraction", "ratio"
  OverRanks over = OverRanks::none;
  Summary summary = Summary::none;
  bool integer = false;   // int64 in checkpoints
  bool optional = false;  // absent from checkpoints written before it existed
  // a fraction of the step: each rank sends seconds, and the reduced value is divided by
  // the step's wall-clock seconds (rank 0's, which the log and metrics.jsonl report)
  bool of_step = false;
  LogWhen when = LogWhen::never;
  std::string log;         // the log line's printf text for it, e.g. "idle %4.1f%%" (fmt::sprintf)
  double log_scale = 1.0;  // the value is multiplied by this in the log (100: percent)
  std::function<double(const StepRecord&)> get;
  std::function<void(StepRecord&, double)> set;
};

const std::vector<StepMetric>& step_metrics();
const StepMetric* find_step_metric(const std::string& name);

// The fields reduced over ranks (over != none), in schema order: what a rank sends.
std::vector<double> rank_values(const StepRecord& mine);
// Reduces every rank's rank_values (rows of `ranks` consecutive values) into `record`;
// `stage_of[r]` is rank r's pipeline stage (the per-stage bubble and activation bytes);
// fields `of_step` are then divided by step_seconds. With one rank the straggler figures
// stay 1 and 0.
void reduce_over_ranks(const std::vector<double>& rows, const std::vector<int>& stage_of, int stages,
                       double step_seconds, StepRecord& record);

// One JSON object on one line (metrics.jsonl): every schema field, the per-stage arrays
// under pipeline parallelism and retrieval_acc when the step had answers.
void write_metrics_json(std::ostream& out, const StepRecord& r);
// The log line's fields: "loss 5.6040 | lr 3.000e-04 | ...".
std::string step_log_fields(const StepRecord& r, const LogContext& context);

}  // namespace lct
