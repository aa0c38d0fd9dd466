#include "src/sim/calibration.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>
#include <map>
#include <stdexcept>
#include <string>

#include "data/files.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "model/trace.h"
#include "src/config/config_text.h"
#include "src/io/output_files.h"
#include "src/train/flops.h"
#include "src/train/machine_choices.h"
#include "src/train/run_objects.h"

namespace lct {
namespace {

Calibration measure_calibration(const RunPlan& plan, const SimulateOptions& o);

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
void with_recompute(const RunPlan& plan, Calibration& c) {
  const Recompute mode = plan.recompute.mode;
  if (mode == Recompute::none) return;
  const LlamaConfig& mc = plan.model;
  const double C = double(mc.hidden_size), I = double(mc.intermediate_size), hd = double(mc.head_dim());
  const double qkvo = C * hd * (2.0 * double(mc.num_attention_heads) + 2.0 * double(mc.num_key_value_heads));
  const double not_down = (qkvo + 2 * C * I) / (qkvo + 3 * C * I);  // of a layer's products
  const double L = double(mc.num_hidden_layers);
  const double share = plan.recompute.layers == 0 ? 1.0 : double(plan.recompute.layers) / L;
  c.recompute_linear = share * c.linear_forward * not_down * c.linear_per_token_layer;
  c.recompute_attention = mode == Recompute::full ? share * c.attention_forward * c.attention_per_pair_layer : 0;
  c.linear_per_token_layer += c.recompute_linear;
  c.attention_per_pair_layer += c.recompute_attention;
}

}  // namespace

void prepare_calibration_model(const RunPlan& plan, LlamaModel& model) {
  // the run's precision on this machine's kernels, as lct train chooses them (a bf16 run
  // timed in fp32 on OpenBLAS was predicted 2x slower than it ran); one process, so not
  // CAD's cost model, which the calibration does not use
  RunPlan timed = plan;
  timed.placement = Placement::colocated;
  resolve_machine_choices(timed, single_process_grid());
  model.set_arithmetic(timed.arithmetic());
  // no recomputation: with_recompute adds its cost
  model.set_tile_tokens(plan.tile_tokens);
  init_llama_params(model.table(), plan.model, uint64_t(plan.seed), model.params.data());
}

namespace {
Calibration measure_calibration(const RunPlan& plan, const SimulateOptions& o) {
  const LlamaConfig mc = plan.model;
  LlamaModel model(mc);
  prepare_calibration_model(plan, model);
  Optimizer optimizer(plan.optimizer, model.table());
  DocumentStream stream(plan);
  Trace trace(TraceClock::now());
  Trace::activate(&trace);
  Calibration c;
  double optimizer_s = 0;
  try {
    for (int64_t k = 0; k <= o.calibration_steps; ++k) {
      if (k == 1) trace.clear();  // the first step warms up (allocations)
      const PackedBatch b = stream.sequence(k);
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
  for (const auto& [name, t] : phase_times(trace.spans())) seconds[name] = t.seconds;
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

// The calibration file (TOML; --calibration-out writes it, --calibration reads it):
// linear_per_token_layer, head_per_token, attention_per_pair_layer and optimizer in
// seconds; tokens and pairs timed; linear_forward and attention_forward, fractions.
std::string calibration_toml(const Calibration& c) {
  const toml::table t{{"linear_per_token_layer", c.linear_per_token_layer}, {"head_per_token", c.head_per_token},
                      {"attention_per_pair_layer", c.attention_per_pair_layer}, {"optimizer", c.optimizer},
                      {"tokens", c.tokens}, {"pairs", c.pairs}, {"linear_forward", c.linear_forward},
                      {"attention_forward", c.attention_forward}};
  std::ostringstream out;
  out << t << "\n";
  return out.str();
}

Calibration read_calibration(const std::string& path) {
  const std::string refused = "lct simulate: --calibration '" + path + "' is not a calibration written by --calibration-out";
  Calibration c;
  try {
    const std::string text = read_document_file(path, "--calibration");  // never a FIFO or a device
    check_toml_nesting(text, path);
    const toml::table t = toml::parse(text, path);
    const auto number = [&](const char* key) {
      const std::optional<double> v = t[key].value<double>();
      if (!v) throw std::invalid_argument(refused + " (" + key + " missing)");
      return *v;
    };
    c.linear_per_token_layer = number("linear_per_token_layer");
    c.head_per_token = number("head_per_token");
    c.attention_per_pair_layer = number("attention_per_pair_layer");
    c.optimizer = number("optimizer");
    // counts as whole numbers a real calibration can have (below 2^53, where a double
    // still holds every integer), converted only once in range
    const auto count = [&](const char* key) {
      const double v = number(key);
      if (!(v >= 0 && v < 9007199254740992.0) || v != std::floor(v))
        throw std::invalid_argument(refused + " (" + key + " = " + fmt::format("{}", v) +
                                    " is not a whole number from 0 to 2^53)");
      return int64_t(v);
    };
    c.tokens = count("tokens");
    c.pairs = count("pairs");
    c.linear_forward = number("linear_forward");
    c.attention_forward = number("attention_forward");
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {  // unreadable, or not TOML
    throw std::invalid_argument(refused + " (" + e.what() + ")");
  }
  // Costs a real machine can measure: per token or pair at least 1e-15 s (a PFLOP/s per
  // core would be needed to go faster) and at most 1 s; an optimizer step at most a day.
  // A crafted 1e300 or a denormal would otherwise give inf or absurd predictions.
  const auto plausible = [](double v, bool may_be_zero) { return (v >= 1e-15 || (may_be_zero && v == 0)) && v <= 1; };
  if (!plausible(c.linear_per_token_layer, false) || !plausible(c.attention_per_pair_layer, false) ||
      !plausible(c.head_per_token, true) || !(c.optimizer >= 0 && c.optimizer <= 86400) ||
      !(c.linear_forward > 0 && c.linear_forward < 1) || !(c.attention_forward > 0 && c.attention_forward < 1) ||
      c.tokens < 1)
    throw std::invalid_argument(refused + " (a cost out of range: per token or pair 1e-15 to 1 s, tokens >= 1)");
  return c;
}

}  // namespace

// The costs: timed here, or read from --calibration; written to --calibration-out when
// asked. The scales apply to read costs too; train.recompute's cost is added last.
Calibration calibrate(const RunPlan& plan, const SimulateOptions& o) {
  Calibration c;
  if (o.tflops > 0) {
    if (!o.calibration.empty() || !o.calibration_out.empty())
      throw std::invalid_argument("lct simulate: --tflops replaces the calibration (drop --calibration and "
                                  "--calibration-out)");
    c = analytic_calibration(plan.model, o);
  } else if (o.calibration.empty()) {
    c = measure_calibration(plan, o);  // unscaled
  } else {
    c = read_calibration(o.calibration);
  }
  // as measured: the scales apply when it is used
  if (!o.calibration_out.empty()) write_text_atomically(o.calibration_out, calibration_toml(c));
  c.linear_per_token_layer *= o.linear_scale;  // token-linear work: layers, head, optimizer
  c.head_per_token *= o.linear_scale;
  c.optimizer *= o.linear_scale;
  c.attention_per_pair_layer *= o.attention_scale;
  with_recompute(plan, c);
  return c;
}

}  // namespace lct
