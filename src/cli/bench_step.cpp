// lct bench: the step section (whole training steps) and the profile section (where a
// step goes, and the CAD cost model of this machine).
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/core_attention.h"
#include "compute/gemm.h"
#include "data/doc_lengths.h"
#include "model/trace.h"
#include "parallel/cad_cost.h"
#include "src/cli/bench_common.h"
#include "src/io/output_files.h"
#include "src/train/trainer.h"
#include "src/train/flops.h"
#include "src/tune/cad_profile.h"
#include "src/util/machine.h"

namespace lct::bench {
namespace {

Config config_at_length(const Config& base, int64_t L) {
  Config c = base;
  c.data.seq_len = L;
  c.data.max_doc_len = L;
  c.train.micro_batches = 1;
  c.train.steps = 1 << 20;  // the schedule is irrelevant; keep lr in warmup
  c.train.heartbeat_s = 0;  // lct bench's own heartbeat says where it is (on stderr: stdout is its report)
  return c;
}

StepRow bench_step(const BenchOptions& o, const Config& base, int64_t L, Precision precision) {
  attention_release_workspace();
  malloc_trim(0);
  reset_peak_rss();
  StepRow r;
  r.seq_len = L;
  r.precision = precision_name(precision);
  {
    Config c = config_at_length(base, L);
    c.train.precision = precision;
    Trainer trainer(make_run_plan(c, 1));
    const auto runs = repeat_timed(o, [&] {
      const StepRecord s = trainer.train_step();
      return std::vector<double>{s.ms, double(s.tokens), s.gflops * s.ms};  // GFLOP/s x ms
    });
    r.runs = int(runs.size());
    // total tokens (FLOPs) over the total time of the measured steps
    const double ms = mean(column(runs, 0));
    r.ms = ms;
    r.tokens_per_s = mean(column(runs, 1)) / (ms / 1e3);
    r.gflops = mean(column(runs, 2)) / ms;
    r.activation_bytes = trainer.model().activation_bytes();
    r.documents = first_sequence(base, L).num_docs();
    r.peak_rss = peak_rss_bytes();
  }
  attention_release_workspace();
  malloc_trim(0);
  return r;
}

PhaseRow profile_step(const BenchOptions& o, const Config& base, int64_t L, Precision precision) {
  PhaseRow r;
  r.precision = precision_name(precision);
  r.seq_len = L;
  r.steps = std::max(3, o.repeats);
  Config c = config_at_length(base, L);
  c.train.precision = precision;
  Trainer trainer(make_run_plan(c, 1));
  for (int i = 0; i < 2; ++i) trainer.train_step();  // warm-up (allocations, primitives)
  Trace trace(TraceClock::now());
  Trace::activate(&trace);
  double tokens = 0, flops = 0;
  try {
    const auto t0 = Clock::now();
    for (int i = 0; i < r.steps; ++i) {
      const StepRecord s = trainer.train_step();
      tokens += double(s.tokens);
      flops += s.gflops * 1e9 * (s.ms / 1e3);  // train_step_flops of the step
    }
    r.step_ms = 1e3 * seconds_since(t0) / r.steps;
  } catch (...) {
    Trace::activate(nullptr);
    throw;
  }
  Trace::activate(nullptr);
  r.phases = phase_times(trace.spans());
  r.tokens = int64_t(tokens / r.steps + 0.5);
  r.product_flops = train_step_flops(trainer.model().config(), r.tokens, 0);
  r.attention_flops = flops / r.steps - r.product_flops;
  return r;
}

// The profile section's first part: per precision (--step-precisions), at the config's
// sequence length (data.seq_len: the length the run trains at; not --step-lengths, so
// that writing a CAD cost model with --profile-out stays cheap), each phase's ms per
// step, split into the linear products and the rest.
void phase_profile(const Config& config, const BenchOptions& o, BenchResults& res) {
  say(o, "\nprofile  where a step goes: ms per step of each phase (the spans trace.path records), split into the "
      "linear layers' products and everything else (norms, RoPE, SwiGLU, residual adds, rounding, copies)\n");
  std::vector<Precision> precisions;
  for (const std::string& name : o.step_precisions) precisions.push_back(parse_precision(name));
  if (precisions.empty()) precisions.push_back(config.train.precision);
  const int64_t L = config.data.seq_len;
  for (const Precision precision : precisions) {
    const PhaseRow r = profile_step(o, config, L, precision);
    res.phases.push_back(r);
    say(o, "  {}, {} tokens, {} steps after 2 warm-up: {:.1f} ms per step\n", r.precision, L, r.steps, r.step_ms);
    say(o, "    {:<28} {:>9} {:>9} {:>9}\n", "phase", "ms/step", "products", "other");
    for (const auto& [name, t] : r.phases)
      say(o, "    {:<28} {:>9.2f} {:>9.2f} {:>9.2f}\n", name, 1e3 * t.seconds / r.steps,
          1e3 * t.product_seconds / r.steps, 1e3 * (t.seconds - t.product_seconds) / r.steps);
    const StepSplit sp = step_split(r);
    const double not_products_ms = sp.attention_ms + sp.other_ms;
    say(o, "    {:<28} {:>9.2f} {:>9.2f} {:>9.2f}   (untraced: {:.2f})\n", "all phases",
        sp.products_ms + not_products_ms, sp.products_ms, not_products_ms, sp.untraced_ms);
    // the split against the same run's ceilings (when the ceilings section ran)
    const double gemm = step_ceilings(res, precision).gemm;
    const auto of = [&](double gflops) { return gemm > 0 ? fmt::format(" = {:.2f} of the GEMM ceiling", gflops / gemm) : ""; };
    say(o, "    split: linear products {:.2f} ms ({:.1f} GFLOP/s{}) | core attention {:.2f} ms ({:.1f} GFLOP/s{}) | "
        "the rest {:.2f} ms ({:.1f} ns/token{}) | untraced {:.2f} ms\n",
        sp.products_ms, sp.products_gflops, of(sp.products_gflops), sp.attention_ms, sp.attention_gflops,
        of(sp.attention_gflops), sp.other_ms, sp.other_ns_per_token,
        res.stream_triad > 0 ? fmt::format("; STREAM triad {:.1f} GB/s", res.stream_triad) : "", sp.untraced_ms);
  }
}

}  // namespace

StepSplit step_split(const PhaseRow& r) {
  StepSplit sp;
  double traced_ms = 0;
  for (const auto& [name, t] : r.phases) {
    const double ms = 1e3 * t.seconds / r.steps, product_ms = 1e3 * t.product_seconds / r.steps;
    traced_ms += ms;
    sp.products_ms += product_ms;
    (is_core_attention_phase(name) ? sp.attention_ms : sp.other_ms) += ms - product_ms;
  }
  sp.untraced_ms = r.step_ms - traced_ms;
  if (sp.products_ms > 0) sp.products_gflops = r.product_flops / (sp.products_ms / 1e3) / 1e9;
  if (sp.attention_ms > 0) sp.attention_gflops = r.attention_flops / (sp.attention_ms / 1e3) / 1e9;
  if (r.tokens > 0) sp.other_ns_per_token = 1e6 * sp.other_ms / double(r.tokens);
  return sp;
}

// The first packed sequence of length L from the config's data: its documents, and their
// prefixes or segments under a per-document mask.
PackedBatch first_sequence(const Config& base, int64_t L) {
  DocumentStream stream(make_run_plan(config_at_length(base, L), 1));
  return stream.sequence(0);
}

// The profile section: where a step goes, and the CAD cost model of this machine (and --profile-out).
void profile_section(const Config& config, const LlamaConfig& model, const BenchOptions& o, BenchResults& res) {
  phase_profile(config, o, res);
  const AttentionParams& pp = model.attention_kernel == AttentionKernel::dca ? res.dca : res.causal;
  // the grid the config's documents reach (the default 2K sequences: every entry)
  const CadCostModel m =
      measure_cost_model(pp, res.cpu, blas_description(), omp_get_max_threads(), longest_document_piece(config.data));
  say(o, "\nprofile  CAD cost model: attention fwd+bwd ns per pair, {} kernel, H {}, KV {}, hd {} "
      "(rows: query rows q; columns: key rows kv)\n", m.kernel, m.heads, m.kv_heads, m.head_dim);
  say(o, "  {:>6}", "q \\ kv");
  for (int64_t kv : m.kv_grid) say(o, " {:8}", kv);
  say(o, "\n");
  for (size_t i = 0; i < m.q_grid.size(); ++i) {
    say(o, "  {:6}", m.q_grid[i]);
    for (size_t j = 0; j < m.kv_grid.size(); ++j) say(o, " {:>8.3f}", 1e9 * m.seconds_per_pair[i * m.kv_grid.size() + j]);
    say(o, "\n");
  }
  if (!o.profile_out.empty()) {
    write_text_atomically(o.profile_out, cad_cost_toml(m));
    say(o, "  written to {} (attention.cad_profile)\n", o.profile_out);
  }
}

// Whole training steps at each --step-lengths and precision, against the ceilings.
void step_section(const Config& config, const LlamaConfig& model, const BenchOptions& o, BenchResults& res) {
  say(o, "\nstep  {} layers, hidden {}, heads {}/{} (hd {}), mlp {}, vocab {}, {} "
      "documents | model GFLOP/s (src/train/flops.h), MFU vs the precision's GEMM ceiling and peak loop "
      "(fp32: the faster fp32 GEMM library, FMA; bf16: oneDNN bf16 GEMM, VDPBF16PS, or the fp32 ones where bf16 "
      "runs as fp32)\n",
      model.num_hidden_layers, model.hidden_size, model.num_attention_heads, model.num_key_value_heads,
      model.head_dim(), model.intermediate_size, model.vocab_size, doc_length_dist_name(config.data.doc_lengths));
  say(o, "  {:<9} {:>7} {:>5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10} {:>5}\n", "precision", "tokens", "docs", "ms",
      "tokens/s", "GFLOP/s", "xGEMM", "xPEAK", "peak MiB", "acts MiB", "runs");
  std::vector<Precision> precisions;
  for (const std::string& name : o.step_precisions) precisions.push_back(parse_precision(name));
  if (precisions.empty()) precisions.push_back(config.train.precision);
  for (const Precision precision : precisions)
    for (int64_t L : o.step_lengths) {
      StepRow r = bench_step(o, config, L, precision);
      const StepCeilings ceilings = step_ceilings(res, precision);
      r.gemm_ceiling = ceilings.gemm;
      r.peak_ceiling = ceilings.peak;
      res.step.push_back(r);
      say(o, "  {:<9} {:7} {:5} {:>9.1f} {:>9.0f} {:>9.1f} {:>8.2f} {:>8.2f} {:>10.0f} {:>10.0f} {:5}\n", r.precision,
          r.seq_len, r.documents, r.ms, r.tokens_per_s, r.gflops, r.gflops / r.gemm_ceiling,
          r.gflops / r.peak_ceiling, double(r.peak_rss) / 1048576.0, double(r.activation_bytes) / 1048576.0,
          r.runs);
    }
}

}  // namespace lct::bench
