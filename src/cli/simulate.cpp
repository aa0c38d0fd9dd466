// lct simulate: the command's options and its report; the prediction is src/sim/.
#include "src/cli/simulate.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/cli/command.h"
#include "src/io/output_files.h"
#include "src/io/paths.h"
#include "src/sim/costs.h"
#include "src/sim/predict.h"
#include "src/tune/cad_profile.h"
#include "src/train/memory_budget.h"
#include "src/util/json.h"
#include "src/util/log.h"
#include "src/util/machine.h"

namespace lct {
namespace {


// The means over the simulated steps that the report gives.
struct Means {
  double step_s = 0, tokens_per_s = 0, cmm = 0, idle = 0, before = 0, after = 0, bytes = 0, exposed = 0;
  MemoryEstimate estimate;  // lct's estimate of a rank (src/train/memory_budget.h)
  double memory = 0;        // without the process baseline: this process is not a rank
};

Means means_of(const SimulateOptions& o, const RunPlan& plan, const Prediction& prediction) {
  const std::vector<StepPrediction>& steps = prediction.steps;
  const double count = double(steps.size());
  Means m;
  m.estimate = estimate_rank_memory(plan);
  m.memory = m.estimate.total() - m.estimate.process;
  double seconds = 0, tokens = 0, exposed = 0;
  for (const StepPrediction& p : steps) {
    seconds += p.seconds;
    tokens += double(p.tokens);
    m.cmm += max_over_mean(p.compute) / count;
    double busy = 0;
    for (double c : p.compute) busy += (c + prediction.calibration.optimizer) / p.seconds / double(o.ranks);
    m.idle += (1.0 - busy) / count;
    m.before += p.pairs_before / count;
    m.after += p.pairs_after / count;
    m.bytes += p.bytes_per_rank / count;
    exposed += p.exposed_per_rank;
  }
  m.step_s = seconds / count;
  m.tokens_per_s = tokens / seconds;
  m.exposed = exposed / seconds;  // a fraction of the step
  for (const double v : {m.step_s, m.tokens_per_s, m.cmm, m.idle, prediction.bubble, m.before, m.after, m.bytes,
                         m.exposed, m.memory})
    if (!std::isfinite(v))
      throw std::runtime_error("lct simulate: the prediction is not a finite number (from --bandwidth, "
                               "--latency, --tflops or the scales?)");
  return m;
}

void print_json(const SimulateOptions& o, const RunPlan& plan, const Prediction& prediction, const Means& m) {
  const Calibration& cal = prediction.calibration;
  const Json calibration = {{"linear_per_token_layer", cal.linear_per_token_layer},
                            {"head_per_token", cal.head_per_token},
                            {"attention_per_pair_layer", cal.attention_per_pair_layer}, {"optimizer", cal.optimizer},
                            {"threads", prediction.threads}, {"linear_forward", cal.linear_forward},
                            {"attention_forward", cal.attention_forward},
                            {"recompute_linear_per_token_layer", cal.recompute_linear},
                            {"recompute_attention_per_pair_layer", cal.recompute_attention}};
  const Network net = network_of(o);
  Json j = {{"ranks", o.ranks}, {"hosts", o.hosts}, {"host_bandwidth_gbps", net.host_bandwidth / 1e9},
            {"host_latency_us", net.host_latency * 1e6}, {"layout", prediction.layout}, {"placement", prediction.placement},
            {"step_seconds", m.step_s}, {"tokens_per_s", m.tokens_per_s}, {"compute_max_over_mean", m.cmm},
            {"idle_fraction", m.idle}, {"bubble_fraction", prediction.bubble},
            {"attention_pairs_max_over_mean", m.before}, {"attention_pairs_served_max_over_mean", m.after},
            {"exchange_bytes_per_rank", m.bytes}, {"exchange_exposed_fraction", m.exposed},
            {"memory_per_rank_bytes", m.memory}, {"recompute", recompute_name(plan.recompute.mode)},
            {"stored_bytes_per_token", m.estimate.stored_per_token}, {"calibration", calibration},
            {"steps", Json::array()}};
  for (const StepPrediction& p : prediction.steps) {  // what each rank trains, as lct train's metrics.jsonl
    Json row = {{"rank_tokens", Json::array()}, {"rank_attention_pairs", Json::array()}};
    for (size_t r = 0; r < p.rank_tokens.size(); ++r) {
      row["rank_tokens"].push_back(int64_t(p.rank_tokens[r]));
      row["rank_attention_pairs"].push_back(int64_t(p.rank_pairs[r]));
    }
    if (p.rank_bytes_exact) {
      row["rank_exchange_bytes"] = Json::array();
      for (double b : p.rank_bytes) row["rank_exchange_bytes"].push_back(int64_t(b));
    }
    j["steps"].push_back(row);
  }
  print_out("{}\n", json_text(j));
}

void print_text(const SimulateOptions& o, const RunPlan& plan, const Prediction& prediction, const Means& m) {
  const Calibration& cal = prediction.calibration;
  print_out("lct simulate | {} | {} ranks ({}), {} | {} steps of {} micro-batches x {} tokens\n",
            blas_description(), o.ranks, prediction.layout, prediction.placement, o.steps, plan.micro_batches,
            plan.data.seq_len);
  const std::string source =
      o.tflops > 0 ? fmt::format("analytic at {:.4g} TFLOP/s (attention {:.4g})", o.tflops,
                                 o.attention_tflops > 0 ? o.attention_tflops : o.tflops)
                   : fmt::format("calibrated at {} thread(s) on {} tokens", prediction.threads, cal.tokens);
  print_out("{}: linear {:.4g} ns/token/layer, embedding + loss "
            "{:.4g} ns/token, attention {:.4g} ns/pair/layer{}, optimizer {:.1f} ms; bandwidth {:.2f} GB/s, "
            "latency {:.1f} us\n",
            source, 1e9 * cal.linear_per_token_layer, 1e9 * cal.head_per_token, 1e9 * cal.attention_per_pair_layer,
            prediction.profile ? " (tasks: the profile)" : "", 1e3 * cal.optimizer, o.bandwidth_gbps, o.latency_us);
  if (o.hosts > 1) {
    const Network net = network_of(o);
    print_out("{} hosts of {} ranks: between them {:.3g} GB/s, latency {:.1f} us, nothing overlapped "
              "(src/sim/network.h)\n",
              o.hosts, net.ranks_per_host, net.host_bandwidth / 1e9, net.host_latency * 1e6);
  }
  print_out("predicted: {:.1f} ms per step, {:.0f} tok/s | compute max/mean {:.3f} | idle {:.1f}% | "
            "attention pairs max/mean {:.3f} -> {:.3f}",
            1e3 * m.step_s, m.tokens_per_s, m.cmm, 100 * m.idle, m.before, m.after);
  if (prediction.bubble > 0) print_out(" | bubble {:.1f}%", 100 * prediction.bubble);
  if (m.bytes > 0) print_out(" | {:.1f} MiB exchanged per rank and step", m.bytes / 1048576.0);
  if (m.exposed > 0) print_out(" | exchange exposed {:.1f}%", 100 * m.exposed);
  print_out(" | memory per rank {:.0f} MiB (estimate, without the process baseline)\n", m.memory / 1048576.0);
  if (plan.recompute.mode != Recompute::none)
    print_out("{}: {:.4g} ns/token/layer and {:.4g} ns/pair/layer of the costs above are recomputation; "
              "{:.1f} KiB stored per token\n",
              describe_activations(plan), 1e9 * cal.recompute_linear, 1e9 * cal.recompute_attention,
              m.estimate.stored_per_token / 1024);
}

// Means over the simulated steps, printed (or one JSON object).
void report(const SimulateOptions& o, const RunPlan& plan, const Prediction& prediction) {
  const Means m = means_of(o, plan, prediction);
  if (o.json) print_json(o, plan, prediction, m);
  else print_text(o, plan, prediction, m);
}

}  // namespace

int run_simulate(const RunPlan& plan, const SimulateOptions& options) {
  report(options, plan, predict(plan, options));
  return 0;
}

namespace {

// lct simulate's own options (the config's keys come from add_config_options)
void add_simulate_options(CLI::App* simulate, SimulateOptions& s) {
  simulate->add_option("--ranks", s.ranks, "ranks (dp x pp x cp)")
      ->check(whole_integer())
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  simulate->add_option("--first-step", s.first_step,
                       "the first step simulated (0-based): match a measured run's warm-up, e.g. 1 for its steps 2..")
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40))
      ->capture_default_str();
  simulate->add_option("--steps", s.steps, "steps simulated (mean reported)")
      ->check(whole_integer())
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  simulate->add_option("--calibration-steps", s.calibration_steps, "single-process steps timed for the costs")
      ->check(whole_integer())
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  simulate->add_option("--profile", s.profile,
                       "attention time per task from a CAD profile (lct bench --sections profile)");
  simulate->add_option("--bandwidth", s.bandwidth_gbps, "point-to-point GB/s (within a host)")
      ->check(positive())
      ->capture_default_str();
  simulate->add_option("--latency", s.latency_us, "point-to-point latency, us (within a host)")
      ->check(non_negative())
      ->capture_default_str();
  simulate->add_option("--hosts", s.hosts,
                       "the ranks over this many hosts, ranks / hosts consecutive ranks each; between hosts "
                       "nothing overlaps compute (TCP)")
      ->check(whole_integer())
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  simulate->add_option("--host-bandwidth", s.host_bandwidth_gbps,
                       "GB/s between hosts (default: --bandwidth; lct train logs the probed value)")
      ->check(positive());
  simulate->add_option("--host-latency", s.host_latency_us, "latency between hosts, us (default: --latency)")
      ->check(non_negative());
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
}

int run_simulate_command(const ConfigOptions& config_options, const SimulateOptions& s) {
  const Config config = resolve_config(config_options);
  NamedPaths inputs = config_inputs(config, config_options.file);
  inputs.emplace_back("--calibration", s.calibration);
  inputs.emplace_back("--profile", s.profile);
  // outputs are checked before the work, not after it (a folder, a device)
  check_outputs({{"--calibration-out", s.calibration_out}, {"trace.path", config.trace.path}}, inputs, {"trace.path"});
  if (s.ranks < 1) throw std::invalid_argument("lct simulate: --ranks must be >= 1");
  if (s.ranks % s.hosts != 0)
    throw std::invalid_argument("lct simulate: --hosts " + std::to_string(s.hosts) +
                                " must divide --ranks " + std::to_string(s.ranks) +
                                " (each host runs ranks / hosts consecutive ranks)");
  RunPlan plan;
  try {
    plan = make_run_plan(config, s.ranks);  // the layouts lct train accepts, and no others
  } catch (const ConfigError& e) {
    throw std::invalid_argument("lct simulate --ranks " + std::to_string(s.ranks) + ": " + e.what());
  }
  return run_simulate(plan, s);
}

}  // namespace

Command add_simulate_command(CLI::App& lct) {
  struct Options {
    ConfigOptions config;
    SimulateOptions simulate;
  };
  auto o = std::make_shared<Options>();
  CLI::App* simulate = lct.add_subcommand(
      "simulate", "predict training steps on N ranks (every layout lct train runs) from costs calibrated here");
  add_simulate_options(simulate, o->simulate);
  add_config_options(simulate, o->config);
  return {simulate, [o] { return run_simulate_command(o->config, o->simulate); }};
}

}  // namespace lct
