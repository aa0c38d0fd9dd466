#include "src/cli/simulate.h"
#include "src/cli/command.h"
#include "src/io/paths.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "attention/cad_cost.h"
#include "attention/cad_plan.h"
#include "data/balance.h"
#include "data/context_shards.h"
#include "src/train/memory_budget.h"
#include "data/nano_batches.h"
#include "src/train/cad_profile.h"
#include "data/packing.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "model/trace.h"
#include "src/io/output_files.h"
#include "src/io/trace_json.h"
#include "src/train/flops.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/layout.h"
#include "src/util/machine.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"

namespace lct {
namespace {

// Seconds of this machine's phases, from single-process steps (see simulate.h).
struct Calibration {
  double linear_per_token_layer = 0;  // before + after attention, forward + backward
  double head_per_token = 0;          // embedding and loss, forward + backward
  double attention_per_pair_layer = 0;
  double optimizer = 0;               // one step
  int64_t tokens = 0, pairs = 0;      // what was timed
  // the forward's share of the linear and the attention costs (what recomputation
  // repeats; src/train/flops.h's convention: a third)
  double linear_forward = 1.0 / 3, attention_forward = 1.0 / 3;
  // per token and layer / per pair and layer, already in the costs above: what
  // train.recompute adds (with_recompute)
  double recompute_linear = 0, recompute_attention = 0;
};

Calibration measure_calibration(const Config& config, const SimulateOptions& o);

// The costs of src/train/flops.h's convention (a step is 3 x forward) at the given throughput.
Calibration analytic_calibration(const LlamaConfig& mc, const SimulateOptions& o) {
  const double linear = o.tflops * 1e12;
  const double attention = (o.attention_tflops > 0 ? o.attention_tflops : o.tflops) * 1e12;
  const double C = double(mc.hidden_size), layers = double(mc.num_hidden_layers);
  const double head_params = double(mc.vocab_size) * C;
  const double layer_params = (double(matmul_params_per_token(mc)) - head_params) / layers;
  Calibration c;
  c.linear_per_token_layer = 3.0 * 2.0 * layer_params / linear;
  c.head_per_token = 3.0 * 2.0 * head_params / linear;
  c.attention_per_pair_layer =
      3.0 * 4.0 * double(mc.num_attention_heads) * double(mc.head_dim()) / attention;
  return c;
}

// train.recompute's cost, added to the per-layer costs (averaged over the layers when only
// recompute_layers of them recompute): a recomputing layer repeats its forward's token-linear
// work but the down projection (selective and full), and its attention forward (full).
void with_recompute(const Config& config, Calibration& c) {
  const Recompute mode = config.train.recompute;
  if (mode == Recompute::none) return;
  const LlamaConfig& mc = config.model;
  const double C = double(mc.hidden_size), I = double(mc.intermediate_size), hd = double(mc.head_dim());
  const double qkvo = C * hd * (2.0 * double(mc.num_attention_heads) + 2.0 * double(mc.num_key_value_heads));
  const double not_down = (qkvo + 2 * C * I) / (qkvo + 3 * C * I);  // of a layer's products
  const double L = double(mc.num_hidden_layers);
  const double share = config.train.recompute_layers == 0 ? 1.0 : double(config.train.recompute_layers) / L;
  c.recompute_linear = share * c.linear_forward * not_down * c.linear_per_token_layer;
  c.recompute_attention = mode == Recompute::full ? share * c.attention_forward * c.attention_per_pair_layer : 0;
  c.linear_per_token_layer += c.recompute_linear;
  c.attention_per_pair_layer += c.recompute_attention;
}

// The costs: timed here, or read from --calibration (one line: linear_per_token_layer
// head_per_token attention_per_pair_layer optimizer tokens pairs linear_forward
// attention_forward, in seconds and fractions); written to --calibration-out when
// asked. The scales apply to read costs too; train.recompute's cost is added last.
Calibration calibrate(const Config& config, const SimulateOptions& o) {
  Calibration c;
  if (o.tflops > 0) {
    if (!o.calibration.empty() || !o.calibration_out.empty())
      throw std::invalid_argument("lct simulate: --tflops replaces the calibration (drop --calibration and "
                                  "--calibration-out)");
    c = analytic_calibration(config.model, o);
  } else if (o.calibration.empty()) {
    c = measure_calibration(config, o);  // unscaled
  } else {
    std::ifstream in(o.calibration);
    std::string key;
    if (!(in >> key >> c.linear_per_token_layer >> c.head_per_token >> c.attention_per_pair_layer >>
          c.optimizer >> c.tokens >> c.pairs >> c.linear_forward >> c.attention_forward) ||
        key != "calibration" || !std::isfinite(c.linear_per_token_layer + c.head_per_token + c.attention_per_pair_layer + c.optimizer) ||
        !(c.linear_per_token_layer > 0) || !(c.attention_per_pair_layer > 0) ||
        !(c.linear_forward > 0 && c.linear_forward < 1) || !(c.attention_forward > 0 && c.attention_forward < 1))
      throw std::invalid_argument("lct simulate: --calibration '" + o.calibration +
                                  "' is not a calibration written by --calibration-out");
  }
  if (!o.calibration_out.empty()) {  // as measured: the scales apply when it is used
    std::ostringstream out;
    out.precision(10);
    out << "calibration " << c.linear_per_token_layer << ' ' << c.head_per_token << ' '
        << c.attention_per_pair_layer << ' ' << c.optimizer << ' ' << c.tokens << ' ' << c.pairs << ' '
        << c.linear_forward << ' ' << c.attention_forward << '\n';
    write_text_atomically(o.calibration_out, out.str());
  }
  c.linear_per_token_layer *= o.linear_scale;  // token-linear work: layers, head, optimizer
  c.head_per_token *= o.linear_scale;
  c.optimizer *= o.linear_scale;
  c.attention_per_pair_layer *= o.attention_scale;
  with_recompute(config, c);
  return c;
}

Calibration measure_calibration(const Config& config, const SimulateOptions& o) {
  const LlamaConfig mc = config.model;
  LlamaModel model(mc);  // no recomputation: with_recompute adds its cost
  model.set_tile_tokens(config.train.tile_tokens);
  init_llama_params(model.table(), mc, uint64_t(config.train.seed), model.params.data());
  Optimizer optimizer(optimizer_config(config), model.table());
  const std::unique_ptr<DocumentSource> source = make_document_source(config);
  SequencePacker packer(*source, config.data.seq_len, doc_structure_of(config));
  Trace trace(TraceClock::now());
  Trace::activate(&trace);
  Calibration c;
  double optimizer_s = 0;
  try {
    for (int64_t k = 0; k <= o.calibration_steps; ++k) {
      if (k == 1) trace.clear();  // the first step warms up (allocations)
      const PackedBatch b = packer.sequence(k);
      model.zero_grads();
      model.forward_backward(b, 1.0f / float(std::max<int64_t>(1, b.num_targets())), true);
      const auto t0 = TraceClock::now();
      optimizer.step(model.params, model.grads, 1e-6, 1.0);
      if (k > 0) {
        optimizer_s += std::chrono::duration<double>(TraceClock::now() - t0).count();
        c.tokens += b.num_tokens();
        c.pairs += attention_pairs(tasks_for_documents(b.cu_seqlens, {b.prefix_lens, b.segment_ids}), mc.attention_mask);
      }
    }
  } catch (...) {
    Trace::activate(nullptr);
    throw;
  }
  Trace::activate(nullptr);
  std::map<std::string, double> seconds;
  for (const TraceSpan& s : trace.spans())
    seconds[s.name] += std::chrono::duration<double>(s.end - s.begin).count();
  const double layers = double(mc.num_hidden_layers);
  c.linear_per_token_layer = (seconds["before attention"] + seconds["after attention"] +
                              seconds["before attention backward"] +
                              seconds["after attention backward"]) /
                             (double(c.tokens) * layers);
  c.head_per_token = (seconds["embedding"] + seconds["embedding backward"] + seconds["loss"]) /
                     double(c.tokens);
  c.attention_per_pair_layer = (seconds["attention"] + seconds["attention backward"]) /
                               (double(std::max<int64_t>(1, c.pairs)) * layers);
  const double linear_fwd = seconds["before attention"] + seconds["after attention"];
  const double linear_all = linear_fwd + seconds["before attention backward"] + seconds["after attention backward"];
  if (linear_all > 0) c.linear_forward = std::clamp(linear_fwd / linear_all, 0.01, 0.99);
  const double attention_all = seconds["attention"] + seconds["attention backward"];
  if (attention_all > 0) c.attention_forward = std::clamp(seconds["attention"] / attention_all, 0.01, 0.99);
  c.optimizer = optimizer_s / double(o.calibration_steps);
  return c;
}

// Attention seconds (forward + backward, one layer) of a task whose keys start at its
// document's start, under the model's mask.
struct AttentionCost {
  const Calibration& cal;
  const std::optional<CaCostModel>& profile;
  double scale;
  AttentionMask mask;
  double operator()(const AttentionTask& t) const {
    if (t.q_len <= 0) return 0;
    if (profile) return profile->seconds(t, mask) * scale;  // the task's measured time
    return cal.attention_per_pair_layer * double(attention_pairs(t, mask));
  }
  // a piece's queries against the keys they read
  double operator()(const DocPiece& p) const { return (*this)(p.task(0, 0, p.key_end(mask))); }
};

struct StepPrediction {
  double seconds = 0;
  std::vector<double> compute;  // per rank
  double pairs_before = 1, pairs_after = 1;  // max/mean over ranks
  double bytes_per_rank = 0;    // exchanged per step (CAD, context parallelism)
  double exposed_per_rank = 0;  // seconds a rank waits for its own context-parallel exchange
  int64_t tokens = 0;
};

// The predicted timeline (trace.path): every rank's compute and wait spans of each
// simulated step, steps laid end to end, in the training timeline's format
// (src/io/trace_json.h), so a prediction and a measured run open side by side. Times are
// seconds from the step's start; a rank's compute spans sum to its predicted compute
// and its wait spans to the rest of the step (the idle figure).
class SimTimeline {
 public:
  SimTimeline(const std::string& path, int ranks) : path_(path), ranks_(static_cast<size_t>(ranks)) {}
  bool on() const { return !path_.empty(); }
  void compute(int r, const char* name, double begin, double end) { add(r, TraceTrack::compute, name, begin, end); }
  void wait(int r, const char* name, double begin, double end) { add(r, TraceTrack::wait, name, begin, end); }
  void end_step(double seconds) {
    for (size_t r = 0; r < ranks_.size(); ++r) add(int(r), TraceTrack::step, "step", 0.0, seconds);
    origin_ += seconds;
    ++step_;
  }
  void write(const Layout& layout) {
    if (!on()) return;
    for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r].name = rank_name(layout, int(r)) + " simulated";
    write_trace_json(path_, ranks_, "trace.path");
  }

 private:
  void add(int r, TraceTrack track, const char* name, double begin, double end) {
    if (!on() || !(end > begin)) return;
    ranks_[size_t(r)].events.push_back({track, 1e6 * (origin_ + begin), 1e6 * (origin_ + end), step_ + 1, name});
  }
  std::string path_;
  std::vector<TraceProcess> ranks_;
  double origin_ = 0;
  int64_t step_ = 0;
};

double max_over_mean(const std::vector<double>& v) {
  const double mx = *std::max_element(v.begin(), v.end());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return mean > 0 ? mx / mean : 1.0;
}

// --profile, or attention.cad_profile as training resolves it (src/train/cad_profile.h): the
// same cost model the run's planner would balance with
std::optional<CaCostModel> load_profile(const SimulateOptions& o, const LlamaConfig& m) {
  if (o.profile.empty() || o.tflops > 0) return std::nullopt;
  try {
    return resolve_cad_cost(o.profile, m).model;
  } catch (const ConfigError& e) {
    throw std::invalid_argument(std::string("lct simulate: ") + e.what());
  }
}

// Means over the simulated steps, printed (or one JSON object).
void report(const Config& config, const SimulateOptions& o, const RunPlan& plan, const std::string& layout,
            const std::string& placement, const Calibration& cal, bool profile, int threads,
            const std::vector<StepPrediction>& steps, double bubble) {
  const int n = o.ranks;
  // lct's estimate of a rank's weights, optimizer, activations and buffers
  // (src/train/memory_budget.h), without the process baseline: this process is not a rank
  const MemoryEstimate estimate = estimate_rank_memory(config, plan);
  const double memory = estimate.total() - estimate.process;
  double seconds = 0, tokens = 0, cmm = 0, idle = 0, before = 0, after = 0, bytes = 0, exposed = 0;
  for (const StepPrediction& p : steps) {
    seconds += p.seconds;
    tokens += double(p.tokens);
    cmm += max_over_mean(p.compute) / double(steps.size());
    double busy = 0;
    for (double c : p.compute) busy += (c + cal.optimizer) / p.seconds / double(n);
    idle += (1.0 - busy) / double(steps.size());
    before += p.pairs_before / double(steps.size());
    after += p.pairs_after / double(steps.size());
    bytes += p.bytes_per_rank / double(steps.size());
    exposed += p.exposed_per_rank;
  }
  const double step_s = seconds / double(steps.size());
  for (const double v : {step_s, tokens / seconds, cmm, idle, bubble, before, after, bytes, exposed, memory})
    if (!std::isfinite(v))
      throw std::runtime_error("lct simulate: the prediction is not a finite number (from --bandwidth, "
                               "--latency, --tflops or the scales?)");
  if (o.json) {
    std::printf("{\"ranks\":%d,\"layout\":\"%s\",\"placement\":\"%s\",\"step_seconds\":%.6g,"
                "\"tokens_per_s\":%.6g,\"compute_max_over_mean\":%.6g,\"idle_fraction\":%.6g,"
                "\"bubble_fraction\":%.6g,\"attention_pairs_max_over_mean\":%.6g,"
                "\"attention_pairs_served_max_over_mean\":%.6g,\"exchange_bytes_per_rank\":%.6g,"
                "\"exchange_exposed_fraction\":%.6g,\"memory_per_rank_bytes\":%.6g,"
                "\"recompute\":\"%s\",\"stored_bytes_per_token\":%.6g,"
                "\"calibration\":{\"linear_per_token_layer\":%.6g,\"head_per_token\":%.6g,"
                "\"attention_per_pair_layer\":%.6g,\"optimizer\":%.6g,\"threads\":%d,"
                "\"linear_forward\":%.6g,\"attention_forward\":%.6g,\"recompute_linear_per_token_layer\":%.6g,"
                "\"recompute_attention_per_pair_layer\":%.6g}}\n",
                n, layout.c_str(), placement.c_str(), step_s, tokens / seconds, cmm, idle, bubble,
                before, after, bytes, exposed / seconds, memory, recompute_name(plan.recompute.mode),
                estimate.stored_per_token, cal.linear_per_token_layer, cal.head_per_token,
                cal.attention_per_pair_layer, cal.optimizer, threads, cal.linear_forward, cal.attention_forward,
                cal.recompute_linear, cal.recompute_attention);
    return;
  }
  std::printf("lct simulate | %s | %d ranks (%s), %s | %lld steps of %lld micro-batches x %lld tokens\n",
              blas_description().c_str(), n, layout.c_str(), placement.c_str(), (long long)o.steps,
              (long long)config.train.micro_batches, (long long)config.data.seq_len);
  char source[96];
  if (o.tflops > 0)
    std::snprintf(source, sizeof source, "analytic at %.4g TFLOP/s (attention %.4g)", o.tflops,
                  o.attention_tflops > 0 ? o.attention_tflops : o.tflops);
  else
    std::snprintf(source, sizeof source, "calibrated at %d thread(s) on %lld tokens", threads,
                  (long long)cal.tokens);
  std::printf("%s: linear %.4g ns/token/layer, embedding + loss "
              "%.4g ns/token, attention %.4g ns/pair/layer%s, optimizer %.1f ms; bandwidth %.2f GB/s, "
              "latency %.1f us\n",
              source, 1e9 * cal.linear_per_token_layer, 1e9 * cal.head_per_token,
              1e9 * cal.attention_per_pair_layer, profile ? " (tasks: the profile)" : "",
              1e3 * cal.optimizer, o.bandwidth_gbps, o.latency_us);
  std::printf("predicted: %.1f ms per step, %.0f tok/s | compute max/mean %.3f | idle %.1f%% | "
              "attention pairs max/mean %.3f -> %.3f",
              1e3 * step_s, tokens / seconds, cmm, 100 * idle, before, after);
  if (bubble > 0) std::printf(" | bubble %.1f%%", 100 * bubble);
  if (bytes > 0) std::printf(" | %.1f MiB exchanged per rank and step", bytes / 1048576.0);
  if (exposed > 0) std::printf(" | exchange exposed %.1f%%", 100 * exposed / seconds);
  std::printf(" | memory per rank %.0f MiB (estimate, without the process baseline)\n", memory / 1048576.0);
  if (plan.recompute.mode != Recompute::none)
    std::printf("%s: %.4g ns/token/layer and %.4g ns/pair/layer of the costs above are recomputation; "
                "%.1f KiB stored per token\n",
                describe_activations(plan).c_str(), 1e9 * cal.recompute_linear, 1e9 * cal.recompute_attention,
                estimate.stored_per_token / 1024);
}

// CAD's cost of one decoder layer (forward + backward) over every rank's batch (possibly
// empty: a pipeline tick's dummy): lct's planner over the documents (or, with
// ping-pong, over each nano-batch), its tasks charged to their servers; a rank's layer
// time is its linear work + the attention it serves + its exchange not hidden (behind
// its own tasks, or with ping-pong behind the other nano-batch's linear layers), and the
// layer ends with the slowest rank. Bytes: Q (+ LSE) and O, dO, dQ of every shipped task;
// K, V (twice) and dK, dV of the longest prefix a server needs of each document, charged
// to the server and to the query's holder (with cp the prefix has several holders: an
// approximation).
struct CadLayer {
  double seconds = 0;
  std::vector<double> busy;  // per rank: linear + attention served
  double bytes = 0;          // sent, summed over the ranks
};

class CadLayerCost {
 public:
  CadLayerCost(const RunPlan& plan, const Calibration& cal, const AttentionCost& attn,
               const std::optional<CaCostModel>& profile, double bandwidth, double latency)
      : mc_(plan.model), cal_(cal), attn_(attn), bandwidth_(bandwidth), latency_(latency),
        lanes_(plan.lanes) {
    qd_ = mc_.num_attention_heads * mc_.head_dim();
    kvd_ = mc_.num_key_value_heads * mc_.head_dim();
    po_ = ca_plan_options(plan.attention, plan.cad.tolerance, profile ? &*profile : nullptr);
  }
  int lanes() const { return lanes_; }

  // `served` (per rank) accumulates the attention pairs each rank computes.
  CadLayer cost(const std::vector<LocalBatch>& batches, std::vector<double>& served) const {
    const int n = int(batches.size());
    // the groups: the batches themselves, or their two nano-batches
    std::vector<std::vector<LocalBatch>> groups(static_cast<size_t>(lanes_));
    for (const LocalBatch& b : batches) {
      if (lanes_ == 2) {
        const std::array<LocalBatch, 2> h = split_nano_batches(b);
        groups[0].push_back(h[0]);
        groups[1].push_back(h[1]);
      } else {
        groups[0].push_back(b);
      }
    }
    CadLayer out;
    std::vector<std::vector<double>> linear(static_cast<size_t>(lanes_)), work(static_cast<size_t>(lanes_)),
        own(static_cast<size_t>(lanes_)), comm(static_cast<size_t>(lanes_));
    for (int g = 0; g < lanes_; ++g) {
      std::vector<CaPiece> docs;
      for (int r = 0; r < n; ++r) {
        int32_t i = 0;
        for (const DocPiece& d : groups[size_t(g)][size_t(r)].pieces)
          docs.push_back({r, i++, d.row, d.len, d.pos, d.prefix_len, d.segment_pos});
      }
      const CaPlan plan = plan_core_attention(docs, n, po_);
      linear[size_t(g)].assign(size_t(n), 0.0);
      work[size_t(g)].assign(size_t(n), 0.0);
      own[size_t(g)].assign(size_t(n), 0.0);
      comm[size_t(g)].assign(size_t(n), 0.0);
      std::vector<double> bytes(static_cast<size_t>(n), 0.0);
      for (int r = 0; r < n; ++r)
        linear[size_t(g)][size_t(r)] = cal_.linear_per_token_layer * double(groups[size_t(g)][size_t(r)].num_tokens());
      std::map<std::tuple<int32_t, int32_t, int32_t>, int64_t> prefix;  // (server, origin, doc) -> longest prefix
      for (const CaTask& t : plan.tasks) {
        const AttentionTask task = t.attention_task(0, 0, 0);
        const double c = attn_(task);
        work[size_t(g)][size_t(t.server)] += c;
        served[size_t(t.server)] += double(attention_pairs(task, mc_.attention_mask));
        if (t.server == t.origin) {
          own[size_t(g)][size_t(t.server)] += c;
          continue;
        }
        // Q there and O, LSE back in forward; Q, O, dO, LSE there and dQ back in backward
        const double q = double(t.q_len) * double((2 * qd_ + mc_.num_attention_heads) +
                                                  (3 * qd_ + mc_.num_attention_heads + qd_)) * sizeof(float);
        bytes[size_t(t.origin)] += q;
        bytes[size_t(t.server)] += q;
        int64_t& pre = prefix[{t.server, t.origin, t.doc}];
        pre = std::max<int64_t>(pre, t.kv_len());
      }
      for (const auto& [key, rows] : prefix) {
        // K, V there twice (forward, backward) and dK, dV back
        const double kv = double(rows) * 3.0 * 2.0 * double(kvd_) * sizeof(float);
        bytes[size_t(std::get<0>(key))] += kv;  // the server
        bytes[size_t(std::get<1>(key))] += kv;  // the query's holder
      }
      for (int r = 0; r < n; ++r) {
        comm[size_t(g)][size_t(r)] = bytes[size_t(r)] / 2.0 / bandwidth_ + (n > 1 ? 4 * latency_ : 0);
        out.bytes += bytes[size_t(r)] / 2.0;
      }
    }
    out.busy.assign(size_t(n), 0.0);
    for (int r = 0; r < n; ++r) {
      double t = 0;
      for (int g = 0; g < lanes_; ++g) {
        const double hide = lanes_ == 2 ? linear[size_t(1 - g)][size_t(r)] : own[size_t(g)][size_t(r)];
        t += linear[size_t(g)][size_t(r)] + work[size_t(g)][size_t(r)] +
             std::max(0.0, comm[size_t(g)][size_t(r)] - hide);
        out.busy[size_t(r)] += linear[size_t(g)][size_t(r)] + work[size_t(g)][size_t(r)];
      }
      out.seconds = std::max(out.seconds, t);
    }
    return out;
  }

 private:
  const LlamaConfig& mc_;
  const Calibration& cal_;
  const AttentionCost& attn_;
  double bandwidth_, latency_;
  int lanes_;
  int64_t qd_ = 0, kvd_ = 0;
  CaPlanOptions po_;
};

// The gradient all-reduce after the last backward over `reducers` ranks, of one stage's
// share of the arena (1/stages): with overlap only the last bucket (the embedding end)
// is left when backward ends; a ring all-reduce moves 2 (n - 1) / n of it.
double allreduce_tail_seconds(const Config& config, const LlamaConfig& mc, int stages, int reducers,
                              double bandwidth, double latency) {
  if (reducers <= 1) return 0.0;
  const double grad_bytes = double(build_llama_table(mc).total()) * sizeof(float) / stages;
  const double tail = config.parallel.overlap_grad_reduce
                          ? std::min(grad_bytes, double(config.parallel.bucket_size) * sizeof(float))
                          : grad_bytes;
  return 2.0 * (reducers - 1) / reducers * tail / bandwidth + 2.0 * (reducers - 1) * latency;
}

// Replica d's micro-batches of a step's global batch, as the trainer takes them: [m][c],
// micro-batch m's piece on context-parallel rank c (sequence d * mb + m, split; or with
// packing the whole batch re-packed over the replicas by work).
std::vector<std::vector<LocalBatch>> replica_pieces(const RunPlan& plan, const std::vector<PackedBatch>& global,
                                                    int d) {
  const int64_t mb = plan.micro_batches;
  const int dp = plan.layout.dp, cp = plan.layout.cp;
  const LlamaConfig& mc = plan.model;
  const std::vector<LocalBatch> packed =
      plan.balance == DpBalance::packing
          ? pack_for_balance(global, dp, int(mb), d, [&mc](int64_t L) { return forward_flops(mc, L, L * (L + 1) / 2); })
          : std::vector<LocalBatch>{};
  std::vector<std::vector<LocalBatch>> pieces(static_cast<size_t>(mb));
  for (int64_t m = 0; m < mb; ++m) {
    const PackedBatch& b = global[size_t(d * mb + m)];
    for (int c = 0; c < cp; ++c)
      pieces[size_t(m)].push_back(!packed.empty() ? packed[size_t(m)]
                                  : cp > 1        ? shard_sequence(b, cp, c, plan.cp_split, plan.cp_split_work)
                                                  : whole_sequence(b));
  }
  return pieces;
}

// Per stage and micro-batch: the stage's forward and backward seconds (its context-
// parallel group's slowest piece, ring included), and each piece's own compute.
struct StageCosts {
  std::vector<std::vector<double>> fwd, bwd;                     // [stage][micro-batch]
  std::vector<std::vector<std::vector<double>>> own_f, own_b;    // [stage][micro-batch][piece]
};
struct StageClocks {
  std::vector<double> clock, wait;  // per stage: when its last action ends, time blocked
};

// One replica's pipeline: every stage's action list (parallel/pipeline_schedule.h) run
// against the others, a receive waiting for its message (message[m]: the transfer time
// of micro-batch m's activations or gradients). Timeline spans go to the ranks
// rank_of(stage, piece).
StageClocks run_stage_lists(PipelineSchedule schedule, int mb, int cp, const StageCosts& t,
                            const std::vector<double>& message, const std::function<int(int, int)>& rank_of,
                            SimTimeline& timeline) {
  const int pp = int(t.fwd.size());
  std::vector<std::vector<PipeAction>> lists;
  for (int s = 0; s < pp; ++s) lists.push_back(pipeline_actions(schedule, pp, s, mb));
  std::vector<size_t> next(size_t(pp), 0);
  StageClocks out{std::vector<double>(size_t(pp), 0.0), std::vector<double>(size_t(pp), 0.0)};
  std::map<std::tuple<int, bool, int>, double> ready;  // (to stage, forward?, mb) -> arrival
  // a stage's compute of one action: each piece's own part, then the wait for the group
  const auto run = [&](int s, const char* name, double begin, double group, const std::vector<double>& own) {
    for (int c = 0; c < cp; ++c) {
      const int rank = rank_of(s, c);
      timeline.compute(rank, name, begin, begin + own[size_t(c)]);
      timeline.wait(rank, "context-parallel ring", begin + own[size_t(c)], begin + group);
    }
  };
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int s = 0; s < pp; ++s)
      while (next[size_t(s)] < lists[size_t(s)].size()) {
        const PipeAction& act = lists[size_t(s)][next[size_t(s)]];
        double& c = out.clock[size_t(s)];
        const size_t m = size_t(act.micro_batch);
        if (act.micro_batch < 0) {  // a tick's dummy: colocated attention, nothing to do
        } else if (act.op == PipeOp::recv_forward || act.op == PipeOp::recv_backward) {
          const auto it = ready.find({s, act.op == PipeOp::recv_forward, act.micro_batch});
          if (it == ready.end()) break;  // not sent yet
          if (it->second > c) {
            for (int k = 0; k < cp; ++k)
              timeline.wait(rank_of(s, k),
                            act.op == PipeOp::recv_forward ? "pipeline receive (activations)"
                                                           : "pipeline receive (gradients)",
                            c, it->second);
            out.wait[size_t(s)] += it->second - c, c = it->second;
          }
        } else if (act.op == PipeOp::forward) {
          run(s, "stage forward", c, t.fwd[size_t(s)][m], t.own_f[size_t(s)][m]);
          c += t.fwd[size_t(s)][m];
        } else if (act.op == PipeOp::backward) {
          run(s, "stage backward", c, t.bwd[size_t(s)][m], t.own_b[size_t(s)][m]);
          c += t.bwd[size_t(s)][m];
        } else if (act.op == PipeOp::send_forward) {
          ready[{s + 1, true, act.micro_batch}] = c + message[m];
        } else {
          ready[{s - 1, false, act.micro_batch}] = c + message[m];
        }
        ++next[size_t(s)];
        progressed = true;
      }
  }
  for (int s = 0; s < pp; ++s)
    if (next[size_t(s)] != lists[size_t(s)].size())
      throw std::logic_error("lct simulate: pipeline stage " + std::to_string(s) + " stalled");
  return out;
}

// One layer of a context-parallel group on one micro-batch (pieces[c]: rank c's piece of
// a sequence of `tokens` tokens): each rank's compute (token-linear rows + the attention
// it computes) and its layer time, the compute plus the exchange it waits for; and the
// bytes each rank sends per layer (forward and backward). K, V, Q, O and dO travel in
// the run's precision, the LSE and every gradient in fp32, as lct sends them.
//   ring, double_ring  K, V blocks travel while the rank computes the block in hand:
//                      cp - 1 blocks forward, cp - 1 backward plus cp dK/dV accumulators
//                      (fp32); the part not hidden behind the rank's attention waits.
//                      On one bandwidth the double ring moves the same bytes.
//   allgather          its block twice and its share of the dK/dV reduce-scatter, in
//                      blocking collectives: all exposed.
//   ulysses, hybrid    two blocking all-to-alls per direction inside groups of U ranks;
//                      each rank computes its group's attention for H / U heads
//                      (hybrid: its group's pieces against the sequence, with a K/V ring
//                      of R = cp / U groups on H / U heads, hidden as the ring's).
struct CpLayer {
  std::vector<double> busy, time;
  double bytes = 0;
};
CpLayer cp_layer_cost(const RunPlan& plan, const std::vector<LocalBatch>& pieces, double tokens,
                      const AttentionCost& attn, const Calibration& cal, double bandwidth, double latency) {
  const int cp = plan.layout.cp;
  const LlamaConfig& mc = plan.model;
  const double hd = double(mc.head_dim()), H = double(mc.num_attention_heads), KV = double(mc.num_key_value_heads);
  const double wire = plan.precision == Precision::bf16 ? 2.0 : 4.0, f32 = 4.0;
  CpLayer out;
  out.busy.assign(size_t(cp), 0.0);
  out.time.assign(size_t(cp), 0.0);
  std::vector<double> own_attention(size_t(cp), 0.0);
  for (int c = 0; c < cp; ++c)
    for (const DocPiece& piece : pieces[size_t(c)].pieces) own_attention[size_t(c)] += attn(piece);
  // a ring of `ranks` over blocks of `rows` rows and `kv` K (and V) elements per row
  const auto ring_bytes = [&](int ranks, double rows, double kv) {
    const double n = rows * kv;
    return 2.0 * double(ranks - 1) * 2.0 * n * wire + double(ranks) * 2.0 * n * f32;
  };
  const auto link_seconds = [&](double bytes, double messages) { return bytes / bandwidth + messages * latency; };
  if (cp <= 1) {
    for (int c = 0; c < cp; ++c) {
      out.busy[size_t(c)] = cal.linear_per_token_layer * double(pieces[size_t(c)].num_tokens()) + own_attention[size_t(c)];
      out.time[size_t(c)] = out.busy[size_t(c)];
    }
    return out;
  }
  if (plan.cp_comm == CpComm::ring || plan.cp_comm == CpComm::double_ring || plan.cp_comm == CpComm::allgather) {
    // the all-gather sends its block twice (forward, backward) and its share of the
    // dK/dV reduce-scatter (fp32)
    const double n = tokens / cp * KV * hd;
    out.bytes = plan.cp_comm == CpComm::allgather ? double(cp - 1) * 2.0 * n * (2.0 * wire + f32)
                                                  : ring_bytes(cp, tokens / cp, KV * hd);
    const double transfer = link_seconds(out.bytes, 3.0 * (cp - 1));
    for (int c = 0; c < cp; ++c) {
      const double a = own_attention[size_t(c)];
      out.busy[size_t(c)] = cal.linear_per_token_layer * double(pieces[size_t(c)].num_tokens()) + a;
      out.time[size_t(c)] =
          out.busy[size_t(c)] + (plan.cp_comm == CpComm::allgather ? transfer : std::max(0.0, transfer - a));
    }
    return out;
  }
  // ulysses (U = cp) and hybrid (U x R)
  const int U = plan.cp_ulysses, R = cp / U;
  const double hq = H / U, hk = KV >= U ? KV / U : 1.0;
  // bytes per row: out (a rank's own rows to each other member) forward Q, K, V and
  // backward Q, K, V, O, dO + LSE; back (each other member's rows to it) forward O + LSE
  // and backward dQ, dK, dV
  const double out_row = (hq + 2 * hk) * hd * wire + (3 * hq + 2 * hk) * hd * wire + hq * f32;
  const double back_row = (hq * hd + hq) * f32 + (hq + 2 * hk) * hd * f32;
  double total = 0;  // over the group's ranks
  for (int g = 0; g < R; ++g) {
    double group_attention = 0, group_rows = 0;
    for (int j = 0; j < U; ++j) {
      group_attention += own_attention[size_t(g * U + j)];
      group_rows += double(pieces[size_t(g * U + j)].num_tokens());
    }
    const double share = group_attention / U;  // its heads of the group's attention
    const double ring = R > 1 ? ring_bytes(R, group_rows, hk * hd) : 0.0;
    const double ring_time = R > 1 ? link_seconds(ring, 3.0 * (R - 1)) : 0.0;
    for (int j = 0; j < U; ++j) {
      const int c = g * U + j;
      const double rows = double(pieces[size_t(c)].num_tokens());
      const double a2a = double(U - 1) * rows * out_row + (group_rows - rows) * back_row;
      out.busy[size_t(c)] = cal.linear_per_token_layer * rows + share;
      out.time[size_t(c)] =
          out.busy[size_t(c)] + link_seconds(a2a, 4.0 * (U - 1)) + std::max(0.0, ring_time - share);
      total += a2a + ring;
    }
  }
  out.bytes = total / cp;  // per rank, as the ring's
  return out;
}

// One replica's StageCosts: per stage and micro-batch the group's forward and backward
// seconds (the slowest rank's layer time, exchange included) and each piece's own
// compute; pieces[m][c] is micro-batch m's piece on context-parallel rank c, holding
// seq_tokens[m] tokens in all. Adds the replica's tokens, compute and exchange bytes to
// p, and its attention pairs to pairs (per rank_of(stage, piece)).
StageCosts replica_stage_costs(const RunPlan& plan, const std::vector<std::vector<LocalBatch>>& pieces,
                               const std::vector<double>& seq_tokens, const AttentionCost& attn,
                               const Calibration& cal, const SimulateOptions& o,
                               const std::function<int(int, int)>& rank_of, StepPrediction& p,
                               std::vector<double>& pairs) {
  const int pp = plan.layout.pp, cp = plan.layout.cp;
  const double bandwidth = o.bandwidth_gbps * 1e9, latency = o.latency_us * 1e-6;
  const size_t S = size_t(pp), M = pieces.size(), P = size_t(cp);
  StageCosts t;
  t.fwd.assign(S, std::vector<double>(M));
  t.bwd = t.fwd;
  t.own_f.assign(S, std::vector<std::vector<double>>(M, std::vector<double>(P)));
  t.own_b = t.own_f;
  for (size_t m = 0; m < M; ++m) {
    const CpLayer cpl = cp_layer_cost(plan, pieces[m], seq_tokens[m], attn, cal, bandwidth, latency);
    double layer = 0, head = 0;
    std::vector<double> head_c(P);
    for (int c = 0; c < cp; ++c) {
      const LocalBatch& l = pieces[m][size_t(c)];
      layer = std::max(layer, cpl.time[size_t(c)]);
      head_c[size_t(c)] = cal.head_per_token * double(l.num_tokens());
      head = std::max(head, head_c[size_t(c)]);
      p.tokens += l.num_tokens();
      for (int s = 0; s < pp; ++s) pairs[size_t(rank_of(s, c))] += double(l.attention_pairs(plan.model.attention_mask));
    }
    for (int s = 0; s < pp; ++s) {
      const double layers = double(plan.stages[size_t(s)].num_layers());
      const bool last = s == pp - 1;
      t.fwd[size_t(s)][m] = layers * layer / 3.0 + (last ? head : 0.0);
      t.bwd[size_t(s)][m] = 2.0 * layers * layer / 3.0;
      for (size_t c = 0; c < P; ++c) {
        t.own_f[size_t(s)][m][c] = layers * cpl.busy[c] / 3.0 + (last ? head_c[c] : 0.0);
        t.own_b[size_t(s)][m][c] = 2.0 * layers * cpl.busy[c] / 3.0;
        p.compute[size_t(rank_of(s, int(c)))] += t.own_f[size_t(s)][m][c] + t.own_b[size_t(s)][m][c];
        p.exposed_per_rank += layers * (cpl.time[c] - cpl.busy[c]) / double(o.ranks);
      }
      p.bytes_per_rank += cpl.bytes * layers * double(cp) / double(o.ranks);
    }
  }
  return t;
}

// Pipeline (colocated, the configured schedule) and/or context parallelism (the
// configured split, ring), with data parallelism around them. Per micro-batch of a
// replica and stage:
//   cp  every layer waits for the group's exchange: layer time = max over the group of
//       linear(T_r) + the attention r computes + the exchange r waits for
//       (cp_layer_cost, per parallel.cp_comm; without cp: the whole sequence's linear +
//       attention);
//   pp  a stage's forward costs a third and its backward two thirds of its layers' time
//       (the last stage's forward also runs the loss); the stages' action lists
//       (parallel/pipeline_schedule.h) run against each other with messages of
//       T / cp x hidden floats over the bandwidth, and what a stage waits on a receive
//       is its bubble.
// The step is the slowest replica plus the gradient all-reduce's tail and the optimizer.
int simulate_model_parallel(const Config& config, const SimulateOptions& o, const RunPlan& plan,
                            const std::optional<CaCostModel>& profile, int threads, const Calibration& cal) {
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const AttentionCost attn{cal, profile, o.attention_scale, plan.model.attention_mask};
  const double bandwidth = o.bandwidth_gbps * 1e9, latency = o.latency_us * 1e-6;
  const int n = o.ranks, dp = layout.dp, pp = layout.pp, cp = layout.cp;
  const int64_t mb = plan.micro_batches;
  const double allreduce = allreduce_tail_seconds(config, mc, pp, dp * cp, bandwidth, latency);
  const CpSplit split = plan.cp_split;
  // a stage updates only its own parameters: about 1/pp of the optimizer step
  Calibration per_stage = cal;
  per_stage.optimizer = cal.optimizer / pp;
  const double optimizer = per_stage.optimizer;
  const PipelineSchedule schedule = plan.schedule;
  const auto rank_of = [&](int s, int d, int c) { return world_rank_of(layout, {d, s, c}); };

  const std::unique_ptr<DocumentSource> source = make_document_source(config);
  SequencePacker packer(*source, config.data.seq_len, doc_structure_of(config));
  std::vector<StepPrediction> steps;
  SimTimeline timeline(config.trace.path, n);
  double bubble_sum = 0;
  for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    StepPrediction p;
    p.compute.assign(size_t(n), 0.0);
    std::vector<double> pairs(static_cast<size_t>(n), 0.0);
    std::vector<double> finish(static_cast<size_t>(n), 0.0);  // when each rank's last compute ends
    double slowest = 0, bubble = 0;
    // the step's global batch, as the trainer takes it: replica d trains sequences
    // d * mb + m, or with packing the whole batch re-packed over the replicas by work
    std::vector<PackedBatch> global;
    for (int64_t i = 0; i < dp * mb; ++i) global.push_back(packer.sequence(step * dp * mb + i));
    for (int d = 0; d < dp; ++d) {
      // pieces[m][c]: micro-batch m's piece on context-parallel rank c; tokens[m] in all
      const std::vector<std::vector<LocalBatch>> pieces = replica_pieces(plan, global, d);
      std::vector<double> seq_tokens;
      for (const std::vector<LocalBatch>& m : pieces) {
        seq_tokens.push_back(0);
        for (const LocalBatch& l : m) seq_tokens.back() += double(l.num_tokens());
      }
      double replica = 0;
      const StageCosts costs = replica_stage_costs(
          plan, pieces, seq_tokens, attn, cal, o, [&](int s, int c) { return rank_of(s, d, c); }, p, pairs);
      // the stages' action lists against each other, with message times (each rank of a
      // stage sends its T / cp rows to its peer of the next stage)
      const std::vector<double> message = [&] {
        std::vector<double> t;
        for (const double tokens : seq_tokens)
          t.push_back(tokens / cp * double(mc.hidden_size) * sizeof(float) / bandwidth + latency);
        return t;
      }();
      const StageClocks run = run_stage_lists(schedule, int(mb), cp, costs, message,
                                              [&](int s, int c) { return rank_of(s, d, c); }, timeline);
      const std::vector<double>&clock = run.clock, &wait = run.wait;
      for (int s = 0; s < pp; ++s) {
        replica = std::max(replica, clock[size_t(s)]);
        for (int c = 0; c < cp; ++c) finish[size_t(rank_of(s, d, c))] = clock[size_t(s)];
        // activations out and gradients back, one direction at each end stage
        const int directions = (s > 0 ? 1 : 0) + (s < pp - 1 ? 1 : 0);
        for (const double t : seq_tokens)
          p.bytes_per_rank += double(directions) * t * double(mc.hidden_size) * sizeof(float) / double(n);
      }
      if (pp > 1)
        for (int s = 0; s < pp; ++s) bubble = std::max(bubble, wait[size_t(s)] / std::max(replica, 1e-12));
      slowest = std::max(slowest, replica);
    }
    p.seconds = slowest + allreduce + optimizer;
    p.pairs_before = p.pairs_after = max_over_mean(pairs);
    bubble_sum += bubble / double(o.steps);
    steps.push_back(p);
    for (int r = 0; r < n; ++r) {
      timeline.wait(r, "gradient all-reduce", finish[size_t(r)], slowest + allreduce);
      timeline.compute(r, "optimizer", slowest + allreduce, p.seconds);
    }
    timeline.end_step(p.seconds);
  }
  std::string placement =
      cp > 1 ? std::string("context-parallel ") + cp_comm_name(plan.cp_comm) + ", " + cp_split_name(split) : "colocated";
  if (pp > 1) placement += std::string(", ") + pipeline_schedule_name(schedule);
  report(config, o, plan, layout_name(layout), placement,
         per_stage, profile.has_value(), threads, steps, bubble_sum);
  timeline.write(layout);
  return 0;
}

// CAD under pipeline parallelism, as lct trains it: same-phase ticks
// (parallel/pipeline_schedule.h). In forward tick k stage s runs micro-batch k - s of
// its replica, in backward tick k micro-batch k - (pp - 1 - s); out of range it runs a
// dummy that only serves attention. All ranks of all stages serve one plan per tick
// (CadLayerCost over every rank's batch, empty for dummies), so each of the stage's
// layers ends with the slowest rank; a forward tick costs a third of the layer cost,
// a backward tick two thirds. The last stage's forward tick adds its embedding + loss;
// after each tick the stages' activations (gradients) travel to the next (previous)
// stage, exposed. With cp > 1 every rank holds its piece of the sequences.
int simulate_cad_ticks(const Config& config, const SimulateOptions& o, const RunPlan& plan,
                       const std::optional<CaCostModel>& profile, int threads, const Calibration& cal) {
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const AttentionCost attn{cal, profile, o.attention_scale, plan.model.attention_mask};
  const double bandwidth = o.bandwidth_gbps * 1e9, latency = o.latency_us * 1e-6;
  const int n = o.ranks, dp = layout.dp, pp = layout.pp, cp = layout.cp;
  const int64_t mb = plan.micro_batches;
  const std::vector<StageSpec>& stages = plan.stages;  // equal layers (the run plan's rule)
  const double stage_layers = double(stages[0].num_layers());
  const CpSplit split = plan.cp_split;
  const CadLayerCost cad_layer(plan, cal, attn, profile, bandwidth, latency);
  const double allreduce = allreduce_tail_seconds(config, mc, pp, dp * cp, bandwidth, latency);
  Calibration per_stage = cal;  // a stage updates about 1/pp of the parameters
  per_stage.optimizer = cal.optimizer / pp;
  const auto rank_of = [&](int s, int d, int c) { return world_rank_of(layout, {d, s, c}); };

  const std::unique_ptr<DocumentSource> source = make_document_source(config);
  SequencePacker packer(*source, config.data.seq_len, doc_structure_of(config));
  std::vector<StepPrediction> steps;
  SimTimeline timeline(config.trace.path, n);
  for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    // batches[d][m][c]: replica d's micro-batch m, piece c
    std::vector<std::vector<std::vector<LocalBatch>>> batches(static_cast<size_t>(dp));
    StepPrediction p;
    p.compute.assign(size_t(n), 0.0);
    std::vector<double> pairs(static_cast<size_t>(n), 0.0), served(static_cast<size_t>(n), 0.0);
    for (int d = 0; d < dp; ++d)
      for (int64_t m = 0; m < mb; ++m) {
        const PackedBatch b = packer.sequence((step * dp + d) * mb + m);
        batches[size_t(d)].emplace_back();
        for (int c = 0; c < cp; ++c) {
          batches[size_t(d)].back().push_back(cp > 1 ? shard_sequence(b, cp, c, split, plan.cp_split_work) : whole_sequence(b));
          const LocalBatch& l = batches[size_t(d)].back().back();
          p.tokens += l.num_tokens();
          for (int s = 0; s < pp; ++s) pairs[size_t(rank_of(s, d, c))] += double(l.attention_pairs(plan.model.attention_mask));
        }
      }
    double t = 0;  // the tick's start
    for (const bool forward : {true, false})
      for (int64_t k = 0; k < mb + pp - 1; ++k) {
        std::vector<LocalBatch> tick(static_cast<size_t>(n));  // empty: a dummy
        for (int s = 0; s < pp; ++s) {
          const int64_t m = forward ? k - s : k - (pp - 1 - s);
          if (m < 0 || m >= mb) continue;
          for (int d = 0; d < dp; ++d)
            for (int c = 0; c < cp; ++c) tick[size_t(rank_of(s, d, c))] = batches[size_t(d)][size_t(m)][size_t(c)];
        }
        const CadLayer cost = cad_layer.cost(tick, served);
        const double w = forward ? 1.0 / 3.0 : 2.0 / 3.0, layer = w * cost.seconds;
        std::vector<double> head(static_cast<size_t>(n), 0.0);
        double head_max = 0, message = 0;
        for (int r = 0; r < n; ++r) {
          const double tokens = double(tick[size_t(r)].num_tokens());
          const int s = grid_coordinates(layout, r).pp_rank;
          if (forward && s == pp - 1) head[size_t(r)] = cal.head_per_token * tokens;
          head_max = std::max(head_max, head[size_t(r)]);
          if (tokens > 0 && (forward ? s < pp - 1 : s > 0)) {  // to the next (previous) stage
            const double bytes = tokens * double(mc.hidden_size) * sizeof(float);
            message = std::max(message, bytes / bandwidth + latency);
            p.bytes_per_rank += bytes / double(n);
          }
          p.compute[size_t(r)] += stage_layers * w * cost.busy[size_t(r)] + head[size_t(r)];
          for (int64_t l = 0; l < stages[0].num_layers() && timeline.on(); ++l) {
            const double t0 = t + double(l) * layer;
            timeline.compute(r, forward ? "tick forward layer (linear + attention served)"
                                        : "tick backward layer (linear + attention served)",
                             t0, t0 + w * cost.busy[size_t(r)]);
            timeline.wait(r, "attention exchange (CAD)", t0 + w * cost.busy[size_t(r)], t0 + layer);
          }
        }
        p.bytes_per_rank += stage_layers * w * cost.bytes / double(n);
        const double body = stage_layers * layer;
        for (int r = 0; r < n && timeline.on(); ++r) {
          timeline.compute(r, "embedding + loss", t + body, t + body + head[size_t(r)]);
          timeline.wait(r, "pipeline send/receive", t + body + head[size_t(r)], t + body + head_max + message);
        }
        t += body + head_max + message;
      }
    p.seconds = t + allreduce + per_stage.optimizer;
    p.pairs_before = max_over_mean(pairs);
    p.pairs_after = max_over_mean(served);
    steps.push_back(p);
    for (int r = 0; r < n; ++r) {
      timeline.wait(r, "gradient all-reduce", t, t + allreduce);
      timeline.compute(r, "optimizer", t + allreduce, p.seconds);
    }
    timeline.end_step(p.seconds);
  }
  report(config, o, plan, layout_name(layout),
         cad_layer.lanes() == 2 ? "cad (ping-pong), ticks" : "cad (one exchange at a time), ticks", per_stage,
         profile.has_value(), threads, steps, 0.0);
  timeline.write(layout);
  return 0;
}

}  // namespace

// Every rank's micro-batches of a step (without pipeline parallelism), as the trainer
// packs them: rank d * cp + c holds piece c of replica d's sequences of `global`.
std::vector<std::vector<LocalBatch>> ranks_micro_batches(const RunPlan& plan,
                                                         const std::vector<PackedBatch>& global) {
  const int n = plan.world, cp = plan.layout.cp;
  const int64_t mb = plan.micro_batches;
  std::vector<std::vector<LocalBatch>> local(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (plan.balance == DpBalance::packing)
      local[size_t(r)] = pack_for_balance(global, n, int(mb), r, [&plan](int64_t L) {
        return forward_flops(plan.model, L, L * (L + 1) / 2);
      });
    else
      for (int64_t m = 0; m < mb; ++m) {
        const PackedBatch& b = global[size_t((r / cp) * mb + m)];
        local[size_t(r)].push_back(cp > 1 ? shard_sequence(b, cp, r % cp, plan.cp_split, plan.cp_split_work) : whole_sequence(b));
      }
  }
  return local;
}

// Data parallelism (colocated, packing or CAD), and CAD with context parallelism: rank
// d * cp + c holds piece c of replica d's sequences.
int simulate_data_parallel(const Config& config, const SimulateOptions& o, const RunPlan& plan,
                           const std::optional<CaCostModel>& profile, int threads, const Calibration& cal) {
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const bool cad = plan.placement == Placement::cad;
  const int n = o.ranks, cp = layout.cp, dp = layout.dp;
  const AttentionCost attn{cal, profile, o.attention_scale, plan.model.attention_mask};
  const double bandwidth = o.bandwidth_gbps * 1e9, latency = o.latency_us * 1e-6;
  const double layers = double(mc.num_hidden_layers);
  const int64_t mb = plan.micro_batches;
  const bool packing = plan.balance == DpBalance::packing;
  const CadLayerCost cad_layer(plan, cal, attn, profile, bandwidth, latency);
  const int lanes = cad ? cad_layer.lanes() : 1;
  const double allreduce = allreduce_tail_seconds(config, mc, 1, n, bandwidth, latency);

  const std::unique_ptr<DocumentSource> source = make_document_source(config);
  SequencePacker packer(*source, config.data.seq_len, doc_structure_of(config));
  std::vector<StepPrediction> steps;
  SimTimeline timeline(config.trace.path, n);
  for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    std::vector<PackedBatch> global;
    for (int64_t s = 0; s < dp * mb; ++s) global.push_back(packer.sequence(step * dp * mb + s));
    const std::vector<std::vector<LocalBatch>> local = ranks_micro_batches(plan, global);
    StepPrediction p;
    p.compute.assign(size_t(n), 0.0);
    std::vector<double> pairs(static_cast<size_t>(n), 0.0), served(static_cast<size_t>(n), 0.0);
    double sync = 0;  // CAD: time of the per-layer synchronised part
    std::vector<double> head(static_cast<size_t>(n), 0.0);  // embedding + loss, per rank
    for (int r = 0; r < n; ++r)
      for (const LocalBatch& b : local[size_t(r)]) {
        p.tokens += b.num_tokens();
        pairs[size_t(r)] += double(b.attention_pairs(plan.model.attention_mask));
        const double begin = p.compute[size_t(r)];
        head[size_t(r)] += cal.head_per_token * double(b.num_tokens());
        p.compute[size_t(r)] += cal.head_per_token * double(b.num_tokens());
        if (cad) continue;
        double t = cal.linear_per_token_layer * double(b.num_tokens());
        for (const DocPiece& d : b.pieces) t += attn(d);
        p.compute[size_t(r)] += layers * t;
        timeline.compute(r, "micro-batch (forward + backward)", begin, p.compute[size_t(r)]);
        served[size_t(r)] += double(b.attention_pairs(plan.model.attention_mask));
      }
    if (cad) {
      for (int64_t m = 0; m < mb; ++m) {
        std::vector<LocalBatch> micro;
        for (int r = 0; r < n; ++r) micro.push_back(local[size_t(r)][size_t(m)]);
        const CadLayer layer = cad_layer.cost(micro, served);
        for (int r = 0; r < n && timeline.on(); ++r)  // every layer ends when the slowest rank's does
          for (int64_t l = 0; l < mc.num_hidden_layers; ++l) {
            const double t0 = sync + double(l) * layer.seconds;
            timeline.compute(r, "layer (linear + attention served)", t0, t0 + layer.busy[size_t(r)]);
            timeline.wait(r, "attention exchange (CAD)", t0 + layer.busy[size_t(r)], t0 + layer.seconds);
          }
        sync += layers * layer.seconds;
        for (int r = 0; r < n; ++r) p.compute[size_t(r)] += layers * layer.busy[size_t(r)];
        p.bytes_per_rank += layer.bytes * layers / double(n);
      }
    }
    const double slowest = *std::max_element(p.compute.begin(), p.compute.end());
    const double head_max = *std::max_element(head.begin(), head.end());
    const double work_end = cad ? sync + head_max : slowest;
    p.seconds = work_end + allreduce + cal.optimizer;
    p.pairs_before = max_over_mean(pairs);
    p.pairs_after = max_over_mean(served);
    steps.push_back(p);
    for (int r = 0; r < n; ++r) {
      if (cad) timeline.compute(r, "embedding + loss", sync, sync + head[size_t(r)]);
      timeline.wait(r, "gradient all-reduce", cad ? sync + head[size_t(r)] : p.compute[size_t(r)],
                    work_end + allreduce);
      timeline.compute(r, "optimizer", work_end + allreduce, p.seconds);
    }
    timeline.end_step(p.seconds);
  }

  const std::string placement = cad ? (lanes == 2 ? "cad (ping-pong)" : "cad (one exchange at a time)")
                                    : packing ? "colocated + packing" : "colocated";
  report(config, o, plan, cp > 1 ? layout_name(layout) : "dp " + std::to_string(n),
         placement, cal, profile.has_value(), threads, steps, 0.0);
  timeline.write(layout);
  return 0;
}

int run_simulate(const Config& config, const SimulateOptions& options) {
  SimulateOptions o = options;
  // a cost model file, as training would balance with it; not "auto": the calibration
  // run times attention in place (an isolated kernel profile is 15-20% faster per pair
  // than attention inside a step, which made every prediction that much too fast)
  if (o.profile.empty()) o.profile = cad_profile_file(config.attention.cad.profile);
  if (o.ranks < 1) throw std::invalid_argument("lct simulate: --ranks must be >= 1");
  RunPlan plan;
  try {
    plan = make_run_plan(config, o.ranks);  // the layouts lct train accepts, and no others
  } catch (const ConfigError& e) {
    throw std::invalid_argument("lct simulate --ranks " + std::to_string(o.ranks) + ": " + e.what());
  }
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const bool cad = plan.placement == Placement::cad;
  const std::optional<CaCostModel> profile = load_profile(o, mc);
  const int threads = o.tflops > 0 ? 0 : configure_threads(config.train.threads);
  const Calibration cal = calibrate(config, o);
  if (cad && layout.pp > 1) return simulate_cad_ticks(config, o, plan, profile, threads, cal);
  if (!cad && (layout.pp > 1 || layout.cp > 1))
    return simulate_model_parallel(config, o, plan, profile, threads, cal);
  return simulate_data_parallel(config, o, plan, profile, threads, cal);
}

}  // namespace lct

namespace lct {

Command add_simulate_command(CLI::App& lct) {
  struct Options {
    ConfigOptions config;
    SimulateOptions simulate;
  };
  auto o = std::make_shared<Options>();
  CLI::App* simulate = lct.add_subcommand(
      "simulate", "predict training steps on N ranks (every layout lct train runs) from costs calibrated here");
  SimulateOptions& s = o->simulate;
  simulate->add_option("--ranks", s.ranks, "ranks (dp x pp x cp)")->check(CLI::Range(1, 65536))->capture_default_str();
  simulate->add_option("--first-step", s.first_step,
                       "the first step simulated (0-based): match a measured run's warm-up, e.g. 1 for its steps 2..")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40))
      ->capture_default_str();
  simulate->add_option("--steps", s.steps, "steps simulated (mean reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  simulate->add_option("--calibration-steps", s.calibration_steps, "single-process steps timed for the costs")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  simulate->add_option("--profile", s.profile,
                       "attention time per task from a CAD profile (lct bench --sections profile)");
  simulate->add_option("--bandwidth", s.bandwidth_gbps, "point-to-point GB/s")->check(positive())->capture_default_str();
  simulate->add_option("--latency", s.latency_us, "point-to-point latency, us")
      ->check(non_negative())
      ->capture_default_str();
  simulate->add_option("--tflops", s.tflops,
                       "analytic costs at this TFLOP/s per rank instead of timing here (e.g. 990 for H200)")
      ->check(positive());
  simulate->add_option("--attention-tflops", s.attention_tflops,
                       "with --tflops: core attention's TFLOP/s (default: the same)")
      ->check(positive());
  simulate->add_option("--linear-scale", s.linear_scale, "multiply the calibrated token-linear costs (another machine)")
      ->check(positive())
      ->capture_default_str();
  simulate->add_option("--attention-scale", s.attention_scale, "multiply the calibrated attention costs")
      ->check(positive())
      ->capture_default_str();
  simulate->add_option("--calibration", s.calibration, "reuse the costs written by an earlier --calibration-out");
  simulate->add_option("--calibration-out", s.calibration_out, "write this run's calibrated costs to a file");
  simulate->add_flag("--json", s.json, "print one JSON object");
  add_config_options(simulate, o->config);
  return {simulate, [o] {
            const Config config = resolve_config(o->config);
            const SimulateOptions& s = o->simulate;
            refuse_aliasing({{"--calibration-out", s.calibration_out}, {"trace.path", config.trace.path}},
                            {{"--config", o->config.file},
                             {"--calibration", s.calibration},
                             {"--profile", s.profile},
                             {"attention.cad_profile", cad_profile_file(config.attention.cad.profile)},
                             {"data.path", config.data.path}});
            // outputs are checked before the work, not after it (a folder, a device)
            if (!s.calibration_out.empty()) require_writable_output(s.calibration_out, "--calibration-out");
            if (!config.trace.path.empty()) require_writable_output(config.trace.path, "trace.path", true);
            return run_simulate(config, s);
          }};
}

}  // namespace lct
