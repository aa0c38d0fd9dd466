#include "src/cli/bench.h"
#include "src/cli/bench_common.h"
#include "src/cli/command.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "attention/core_attention.h"
#include "model/rope.h"
#include "src/io/output_files.h"
#include "src/io/paths.h"
#include "src/train/memory_budget.h"
#include "src/train/trainer.h"
#include "src/util/heartbeat.h"
#include "src/util/log.h"
#include "src/util/machine.h"

namespace lct {
namespace {

bool wants(const BenchOptions& o, const char* section) {
  return std::find(o.sections.begin(), o.sections.end(), section) != o.sections.end();
}

// What the sections will allocate, before any of them runs: a training step of the
// config, and the attention kernel's Q, K, V, O, LSE, their gradients and its scratch at
// the longest --attention-lengths.
void check_bench_memory(const RunPlan& plan, const BenchOptions& o) {
  const AttentionParams& ap = plan.attention;
  if (wants(o, "step") || wants(o, "profile")) {
    const std::string no = check_memory_budget(estimate_rank_memory(plan), available_memory(1));
    if (!no.empty()) throw std::invalid_argument("lct bench --sections step: " + no);
  }
  if (wants(o, "attention") && !o.attention_lengths.empty()) {
    const int64_t L = *std::max_element(o.attention_lengths.begin(), o.attention_lengths.end());
    const double per_row = 4.0 * (2 * double(ap.num_heads) * ap.head_dim + 2 * double(ap.num_kv_heads) * ap.head_dim +
                                  ap.num_heads) * 2;  // fp32 values and gradients
    const double bytes = per_row * double(L) + double(attention_workspace_bytes(ap, L, L, omp_get_max_threads()));
    const std::string no = check_command_memory("lct bench --attention-lengths " + std::to_string(L), bytes,
                                                "Q, K, V, O, LSE, their gradients and the kernel's scratch",
                                                "give shorter --attention-lengths");
    if (!no.empty()) throw std::invalid_argument(no);
  }
}

// bench: section attention (3 of 4), 17 timed runs | 95 s in
// (no time to go: a section's runs differ too much in length to extrapolate from)
std::string bench_heartbeat_line(const BenchProgress& p, const std::vector<std::string>& sections, double elapsed_s) {
  const std::string section = p.section.load(std::memory_order_relaxed);
  const auto at = std::find(sections.begin(), sections.end(), section);
  return fmt::format("bench: section {}{}, {} timed runs | {}", section.empty() ? "(starting)" : section,
                     at == sections.end() ? "" : fmt::format(" ({} of {})", at - sections.begin() + 1, sections.size()),
                     p.runs.load(std::memory_order_relaxed), Heartbeat::time_text(elapsed_s, 0));
}

}  // namespace

int run_bench(const Config& config, const BenchOptions& options) {
  const RunPlan plan = make_run_plan(config, 1);  // one process: the config's model and kernel
  // train.heartbeat_s: a line on stderr every so often while it runs (stdout is the report)
  BenchProgress progress;
  BenchOptions o = options;
  o.progress = &progress;
  Heartbeat heartbeat(plan.run.heartbeat_s, stderr);
  const HeartbeatScope beat(&heartbeat, [&](double elapsed_s) { return bench_heartbeat_line(progress, o.sections, elapsed_s); });
  auto section = [&](const char* name) {
    if (!wants(o, name)) return false;
    progress.section.store(name, std::memory_order_relaxed);
    return true;
  };
  const LlamaConfig& model = plan.model;
  AttentionParams ap = plan.attention;
  check_bench_memory(plan, o);
  // DCA beside causal on the same shapes: [attention] dca_* keys of the config, with a
  // RoPE table covering positions 0..C
  const RopeTable dca_rope =
      build_rope_table(model.dca_chunk_size + 1, model.head_dim(), model.rope_theta);
  AttentionParams dca_ap = ap;
  dca_ap.kernel = AttentionKernel::dca;
  dca_ap.mask = {};  // DCA is causal only
  dca_ap.dca.rope_cos = dca_rope.cos.data();
  dca_ap.dca.rope_sin = dca_rope.sin.data();
  dca_ap.dca.rope_positions = dca_rope.max_positions;
  ap.kernel = AttentionKernel::causal;

  bench::BenchResults res;
  res.threads = omp_get_max_threads();
  res.coretype = std::getenv("OPENBLAS_CORETYPE");
  res.cpu = cpu_model_name();
  res.blas_warning = blas_capability_warning();
  res.causal = ap;
  res.dca = dca_ap;
  if (!o.ceilings_from.empty()) bench::ceilings_from_file(o.ceilings_from, res);
  const int threads = res.threads;
  const std::string& cpu = res.cpu;
  const std::string& blas_warning = res.blas_warning;

  bench::say(o, "lct bench | {} | {} threads (OpenMP {}, OpenBLAS {}) | {}\n", cpu, threads,
      omp_get_max_threads(), openblas_get_num_threads(), blas_description());
  if (!blas_warning.empty() && !o.json) log_warn(blas_warning);
  bench::say(o, "each figure: total work over total wall-clock time of up to {} runs (first run a warm-up; {:.0f} s budget each)\n", o.repeats, o.budget_seconds);

  if (!o.ceilings_from.empty()) bench::say_ceilings_from(o, res);
  else if (wants(o, "ceilings") || wants(o, "attention") || wants(o, "step")) {
    progress.section.store("ceilings", std::memory_order_relaxed);
    bench::ceilings_section(o, res);
  }

  if (section("gemm")) bench::gemm_section(model, config.data.seq_len, o, res);

  if (section("attention")) {
    bench::say(o, "\nattention  H {}, KV {}, hd {}; dca: C {}, w {} (chunks of {}) | GFLOP/s, "
        "FlashAttention convention (fwd 4*H*hd*pairs, bwd 2.5x)\n",
        ap.num_heads, ap.num_kv_heads, ap.head_dim, dca_ap.dca.chunk_size, dca_ap.dca.local_size,
        dca_ap.dca.chunk_len());
    bench::say(o, "  xceil: fwd+bwd over the precision's GEMM ceiling (fp32 and bf16-fallback: the faster fp32 GEMM; bf16: bf16 GEMM)\n");
    bench::say(o, "  {:<8} {:<7} {:<13} {:>7} {:>5} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>5}\n", "layout", "kernel",
        "precision", "tokens", "docs", "fwd", "bwd", "fwd+bwd", "xceil", "f+b ms", "t/causal", "runs");
    bench::attention_section(config, o, res);
  }

  if (section("step")) bench::step_section(config, model, o, res);

  if (section("cp_balance")) bench::cp_balance_section(plan, o, res);

  if (section("profile")) bench::profile_section(config, model, o, res);

  if (section("cad_balance")) bench::cad_balance_section(plan, o, res);

  if (o.json) bench::print_bench_json(res);
  return 0;
}

Command add_bench_command(CLI::App& lct) {
  struct Options {
    ConfigOptions config;
    BenchOptions bench;
  };
  auto o = std::make_shared<Options>();
  // sequence lengths: token rows and positions are int32 inside the kernels, and 16M
  // tokens already need tens of GiB
  const CLI::Range length(int64_t(1), int64_t(1) << 24);
  CLI::App* bench = lct.add_subcommand(
      "bench", "throughput of attention and training steps against same-run GEMM and FMA ceilings");
  BenchOptions& b = o->bench;
  bench->add_option("--attention-precisions", b.attention_precisions,
                    "precisions of the attention kernel (bf16-fallback: bf16 as CPUs without bf16 instructions run it)")
      ->check(CLI::IsMember({"fp32", "bf16", "bf16-fallback"}))
      ->delimiter(',');
  bench->add_option("--attention-lengths", b.attention_lengths, "sequence lengths for the attention kernel")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(length)
      ->capture_default_str();
  bench->add_option("--step-lengths", b.step_lengths, "sequence lengths for full training steps")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(length)
      ->capture_default_str();
  bench->add_option("--step-precisions", b.step_precisions,
                    "precisions of the step section (default: the config's train.precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->delimiter(',');
  bench->add_option("--sections", b.sections, "what to measure")
      ->delimiter(',')
      ->check(CLI::IsMember({"ceilings", "gemm", "attention", "step", "cp_balance", "cad_balance", "profile"}))
      ->capture_default_str();
  bench->add_option("--cp-degrees", b.cp_degrees, "context-parallel degrees for the cp_balance section")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(1), int64_t(1024)))
      ->capture_default_str();
  bench->add_option("--cad-ranks", b.cad_ranks, "data-parallel rank counts for the cad_balance section")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  bench->add_option("--balance-sequences", b.balance_sequences,
                    "sequences of the stream for the cp_balance and cad_balance sections")
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(1), int64_t(100000)))
      ->capture_default_str();
  bench->add_option("--profile-out", b.profile_out,
                    "profile section: write the CAD cost model here (for attention.cad_profile)");
  bench->add_option("--repeats", b.repeats, "timed runs per figure, after a discarded warm-up run (the figure: their total work over total time)")
      ->check(whole_integer())
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench->add_option("--budget", b.budget_seconds, "seconds after which a figure stops repeating (at least one run)")
      ->check(positive())
      ->capture_default_str();
  bench->add_option("--ceilings-from", b.ceilings_from,
                    "take the ceilings from this earlier lct bench --json of this machine instead of measuring them");
  bench->add_flag("--json", b.json, "print one JSON document instead of tables");
  add_config_options(bench, o->config);
  return {bench, [o] {
            const Config config = resolve_config(o->config);
            // outputs are checked before the work, not after it (a folder, a device)
            NamedPaths inputs = config_inputs(config, o->config.file);
            inputs.emplace_back("--ceilings-from", o->bench.ceilings_from);
            check_outputs({{"--profile-out", o->bench.profile_out}}, inputs);
            if (!o->bench.ceilings_from.empty() && wants(o->bench, "ceilings"))
              throw std::invalid_argument("lct bench: --sections ceilings measures the ceilings and --ceilings-from " +
                                          o->bench.ceilings_from + " reads them: give one of the two");
            configure_threads(config.train.threads);
            return run_bench(config, o->bench);
          }};
}

}  // namespace lct
