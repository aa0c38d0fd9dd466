// lct simulate: the command's options and its report; the prediction is src/sim/.
#include "src/cli/simulate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/cli/command.h"
#include "src/io/output_files.h"
#include "src/io/paths.h"
#include "src/sim/predict.h"
#include "src/train/cad_profile.h"
#include "src/train/memory_budget.h"
#include "src/util/machine.h"

namespace lct {
namespace {


// Means over the simulated steps, printed (or one JSON object).
void report(const SimulateOptions& o, const RunPlan& plan, const Prediction& prediction) {
  const int n = o.ranks;
  const std::string &layout = prediction.layout, &placement = prediction.placement;
  const Calibration& cal = prediction.calibration;
  const bool profile = prediction.profile;
  const int threads = prediction.threads;
  const std::vector<StepPrediction>& steps = prediction.steps;
  const double bubble = prediction.bubble;
  // lct's estimate of a rank's weights, optimizer, activations and buffers
  // (src/train/memory_budget.h), without the process baseline: this process is not a rank
  const MemoryEstimate estimate = estimate_rank_memory(plan);
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
              (long long)plan.micro_batches, (long long)plan.data.seq_len);
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

}  // namespace

int run_simulate(const RunPlan& plan, const SimulateOptions& options) {
  report(options, plan, predict(plan, options));
  return 0;
}

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
            if (s.ranks < 1) throw std::invalid_argument("lct simulate: --ranks must be >= 1");
            RunPlan plan;
            try {
              plan = make_run_plan(config, s.ranks);  // the layouts lct train accepts, and no others
            } catch (const ConfigError& e) {
              throw std::invalid_argument("lct simulate --ranks " + std::to_string(s.ranks) + ": " + e.what());
            }
            return run_simulate(plan, s);
          }};
}

}  // namespace lct
