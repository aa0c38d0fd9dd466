// lct: command line entry point (every command's flags: lct COMMAND --help).
//   lct train [--config FILE] [--section.key VALUE ...] [--dry-run]
//   lct simulate [--config FILE] [--section.key VALUE ...] --ranks N [--tflops T ...]
//   lct eval --checkpoint FILE --batch-file B.h5 [--grads-out G.h5] [--per-position-out P.csv]
//            [--attention.kernel dca --attention.dca_chunk_size C ...]
//   lct make-batch [--config FILE] [--section.key VALUE ...] --out B.h5 [--sequences N]
//   lct inspect FILE [--json] | lct inspect --compare A.h5 B.h5 [--json]
//   lct bench [--config FILE] [--section.key VALUE ...] [--json] [--attention-lengths ...]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "src/bench.h"
#include "src/cad_profile.h"
#include "src/simulate.h"
#include "src/config.h"
#include "src/eval.h"
#include "src/inspect.h"
#include "src/checkpoint.h"
#include "src/log.h"
#include "src/memory_budget.h"
#include "src/paths.h"
#include "src/trainer.h"
#include "src/train/run_plan.h"
#include "src/rank_agreement.h"
#include "src/run_objects.h"
#include "parallel/collectives.h"
#include "parallel/process_grid.h"

using namespace lct;

int run_command(int argc, char** argv, int rank, int world);

namespace {
// Lower bounds for numeric options, in place of CLI11's PositiveNumber/NonNegativeNumber
// (whose messages print the largest double, 309 digits): "--x: must be > 0, got 0".
CLI::Validator at_least(double bound, bool strict) {
  return CLI::Validator(
      [bound, strict](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "must be a number, got '" + text + "'";
        if (strict ? v > bound : v >= bound) return {};
        char b[32];
        std::snprintf(b, sizeof b, "%g", bound);
        return std::string("must be ") + (strict ? "> " : ">= ") + b + ", got " + text;
      },
      strict ? "> 0" : ">= 0");
}
const CLI::Validator kPositive = at_least(0, true);
const CLI::Validator kNonNegative = at_least(0, false);

// Every rank's verdict, combined: true when it holds on every rank.
bool all_ranks_agree(bool ok, const ProcessGrid& grid) {
  if (grid.world_size() <= 1) return ok;
  double failed = ok ? 0 : 1;
  allreduce_sum(&failed, 1, grid.world(), nullptr);
  return failed == 0;
}

// lct train --dry-run: the layout, the step and the memory estimate, nothing run.
void print_dry_run(const Config& c, const RunPlan& plan, const MemoryEstimate& e, const MemoryAvailable& a) {
  const LlamaConfig& mc = plan.model;
  std::printf("lct train --dry-run: nothing is allocated, run or written\n");
  std::printf("model: %d layers, hidden %lld, heads %d/%d, mlp %lld, vocab %lld, %.2fM parameters, attention %s\n",
              mc.num_hidden_layers, (long long)mc.hidden_size, mc.num_attention_heads, mc.num_key_value_heads,
              (long long)mc.intermediate_size, (long long)mc.vocab_size,
              double(build_llama_table(mc).total()) / 1e6, attention_kernel_name(mc.attention_kernel));
  std::printf("layout: %s\n", describe_run_plan(plan).c_str());
  std::printf("step: %lld micro-batch(es) x %lld tokens per data-parallel rank = %lld tokens; %lld steps, "
              "optimizer %s; checkpoints in %s every %lld steps\n",
              (long long)plan.micro_batches, (long long)plan.seq_len, (long long)plan.tokens_per_step(),
              (long long)c.train.steps, optimizer_name(plan.optimizer.kind), c.checkpoint.dir.c_str(),
              (long long)c.checkpoint.every);
  std::printf("%s\n", describe_estimate(e, a).c_str());
  const std::string verdict = check_memory_budget(e, a);
  std::printf("%s\n", verdict.empty() ? "fits: yes" : "fits: NO (lct train would refuse it)");
}

// Every config key as --section.key on a subcommand, collected into overrides.
void add_config_options(CLI::App* app, std::string& config_file,
                        std::map<std::string, std::string>& overrides) {
  app->add_option("--config", config_file, "TOML config file (e.g. configs/default.toml)")
      ->check(CLI::ExistingFile);
  const Config defaults;
  for (const ConfigKey& k : config_keys()) {
    const std::string section = k.name.substr(0, k.name.find('.'));
    app->add_option_function<std::string>(
           "--" + k.name, [&overrides, name = k.name](const std::string& v) { overrides[name] = v; },
           k.help)
        ->default_str(k.get(defaults))
        ->group("[" + section + "]")
        ->type_name(k.type == KeyType::integer   ? "INT"
                    : k.type == KeyType::number  ? "FLOAT"
                    : k.type == KeyType::boolean ? "BOOL"
                    : k.type == KeyType::integer_list ? "LIST"
                                                 : "TEXT");
  }
  app->get_formatter()->column_width(36);
}

Config resolve_config(const std::string& config_file,
                      const std::map<std::string, std::string>& overrides) {
  Config config;
  if (!config_file.empty()) apply_toml_file(config, config_file);
  apply_overrides(config, overrides);
  validate_config(config);
  return config;
}
}  // namespace

int main(int argc, char** argv) {
  // Under mpirun every rank runs this; without a launcher there is no MPI at all.
  mpi_init_if_launched(&argc, &argv);
  const int rank = mpi_world_rank(), world = mpi_world_size();
  set_log_rank(rank);
  const int code = run_command(argc, argv, rank, world);
  mpi_finalize_if_active();
  return code;
}

int run_command(int argc, char** argv, int rank, int world) {
  CLI::App app{"lct: long-context transformer training on CPUs"};
  app.require_subcommand(1);
  // one-line parse errors, like every other lct error
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("lct: error: ") + e.what() + " (see --help)\n";
  });
  app.set_help_all_flag("--help-all", "help for every subcommand");

  // ---- train ----------------------------------------------------------------
  CLI::App* train = app.add_subcommand("train", "train a model (keys: section.key, see --help)");
  std::string config_file;
  std::map<std::string, std::string> overrides;
  bool dry_run = false;
  train->add_flag("--dry-run", dry_run,
                  "print the plan and the memory estimate per rank against the memory available, then exit");
  add_config_options(train, config_file, overrides);

  // ---- bench ----------------------------------------------------------------
  // sequence lengths: token rows and positions are int32 inside the kernels, and 16M
  // tokens already need tens of GiB
  const CLI::Range kLength(int64_t(1), int64_t(1) << 24);
  CLI::App* bench = app.add_subcommand(
      "bench", "throughput of attention and training steps against same-run SGEMM/FMA ceilings");
  std::string bench_config_file;
  std::map<std::string, std::string> bench_overrides;
  BenchOptions bench_options;
  bench->add_option("--attention-lengths", bench_options.attention_lengths,
                    "sequence lengths for the attention kernel")
      ->delimiter(',')
      ->check(kLength)
      ->capture_default_str();
  bench->add_option("--step-lengths", bench_options.step_lengths,
                    "sequence lengths for full training steps")
      ->delimiter(',')
      ->check(kLength)
      ->capture_default_str();
  bench->add_option("--sections", bench_options.sections, "what to measure")
      ->delimiter(',')
      ->check(CLI::IsMember({"ceilings", "attention", "step", "cp_balance", "cad_balance", "profile"}))
      ->capture_default_str();
  bench->add_option("--cp-degrees", bench_options.cp_degrees,
                    "context-parallel degrees for the cp_balance section")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1024)))
      ->capture_default_str();
  bench->add_option("--cad-ranks", bench_options.cad_ranks,
                    "data-parallel rank counts for the cad_balance section")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  bench->add_option("--balance-sequences", bench_options.balance_sequences,
                    "sequences of the stream for the cp_balance and cad_balance sections")
      ->check(CLI::Range(int64_t(1), int64_t(100000)))
      ->capture_default_str();
  bench->add_option("--profile-out", bench_options.profile_out,
                    "profile section: write the CAD cost model here (for attention.cad_profile)");
  bench->add_option("--repeats", bench_options.repeats, "timed runs per figure (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench->add_option("--budget", bench_options.budget_seconds,
                    "seconds after which a figure stops repeating (at least one run)")
      ->check(kPositive)
      ->capture_default_str();
  bench->add_flag("--json", bench_options.json, "print one JSON document instead of tables");
  add_config_options(bench, bench_config_file, bench_overrides);

  // ---- simulate -------------------------------------------------------------
  CLI::App* simulate = app.add_subcommand(
      "simulate", "predict training steps on N ranks (dp, pp, cp; CAD with dp) from costs calibrated here");
  std::string simulate_config_file;
  std::map<std::string, std::string> simulate_overrides;
  SimulateOptions simulate_options;
  simulate->add_option("--ranks", simulate_options.ranks, "ranks (dp x pp x cp)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  simulate->add_option("--steps", simulate_options.steps, "steps simulated (mean reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  simulate->add_option("--calibration-steps", simulate_options.calibration_steps,
                       "single-process steps timed for the costs")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  simulate->add_option("--profile", simulate_options.profile,
                       "attention time per task from a CAD profile (lct bench --sections profile)");
  simulate->add_option("--bandwidth", simulate_options.bandwidth_gbps, "point-to-point GB/s")
      ->check(kPositive)
      ->capture_default_str();
  simulate->add_option("--latency", simulate_options.latency_us, "point-to-point latency, us")
      ->check(kNonNegative)
      ->capture_default_str();
  simulate->add_option("--tflops", simulate_options.tflops,
                       "analytic costs at this TFLOP/s per rank instead of timing here (e.g. 990 for H200)")
      ->check(kPositive);
  simulate->add_option("--attention-tflops", simulate_options.attention_tflops,
                       "with --tflops: core attention's TFLOP/s (default: the same)")
      ->check(kPositive);
  simulate->add_option("--linear-scale", simulate_options.linear_scale,
                       "multiply the calibrated token-linear costs (another machine)")
      ->check(kPositive)
      ->capture_default_str();
  simulate->add_option("--attention-scale", simulate_options.attention_scale,
                       "multiply the calibrated attention costs")
      ->check(kPositive)
      ->capture_default_str();
  simulate->add_option("--calibration", simulate_options.calibration,
                       "reuse the costs written by an earlier --calibration-out");
  simulate->add_option("--calibration-out", simulate_options.calibration_out,
                       "write this run's calibrated costs to a file");
  simulate->add_flag("--json", simulate_options.json, "print one JSON object");
  add_config_options(simulate, simulate_config_file, simulate_overrides);

  // ---- eval -----------------------------------------------------------------
  CLI::App* eval = app.add_subcommand("eval", "loss and gradients of a checkpoint on a packed batch");
  std::string checkpoint, batch_file, grads_out;
  int64_t eval_threads = 0;
  eval->add_option("--checkpoint", checkpoint, "parameter or checkpoint file (.h5)")->required();
  eval->add_option("--batch-file", batch_file, "HDF5 with tokens int32 [T], cu_seqlens int32 [n+1]")
      ->required();
  eval->add_option("--grads-out", grads_out, "write /grads/... and @loss to this HDF5 file");
  eval->add_option("--threads", eval_threads, "threads (0 = all cores)")->check(kNonNegative);
  EvalOptions eval_options;
  eval->add_option("--per-position-out", eval_options.per_position_out,
                   "write mean loss per in-document position bin (CSV)");
  eval->add_option("--position-bin", eval_options.position_bin, "bin width for --per-position-out")
      ->check(kPositive)
      ->capture_default_str();
  // Attention overrides: core attention has no weights, so a checkpoint trained with one
  // kernel can be evaluated with another (e.g. causal-trained, evaluated with DCA).
  std::map<std::string, std::string> eval_attention;
  for (const ConfigKey& k : config_keys()) {
    if (k.name.rfind("attention.", 0) != 0) continue;
    eval->add_option_function<std::string>(
            "--" + k.name,
            [&eval_attention, name = k.name](const std::string& v) { eval_attention[name] = v; },
            k.help + " (overrides the checkpoint)")
        ->group("[attention] overrides");
  }

  // ---- make-batch -----------------------------------------------------------
  CLI::App* make_batch = app.add_subcommand(
      "make-batch", "write packed sequences of the configured data stream to a batch file");
  std::string batch_config_file, batch_out;
  std::map<std::string, std::string> batch_overrides;
  int64_t batch_sequences = 1, batch_first = 0;
  make_batch->add_option("--out", batch_out, "batch file to write (tokens, cu_seqlens)")->required();
  make_batch->add_option("--sequences", batch_sequences, "number of sequences of data.seq_len tokens")
      ->check(kPositive)
      ->capture_default_str();
  make_batch->add_option("--first", batch_first, "index of the first sequence in the stream")
      ->check(kNonNegative)
      ->capture_default_str();
  add_config_options(make_batch, batch_config_file, batch_overrides);

  // ---- inspect --------------------------------------------------------------
  CLI::App* inspect = app.add_subcommand("inspect", "show a checkpoint, or compare two runs");
  std::vector<std::string> inspect_files;
  bool inspect_json = false, inspect_compare = false;
  inspect->add_option("files", inspect_files, "checkpoint file (two with --compare)")->required();
  inspect->add_flag("--compare", inspect_compare, "compare two runs side by side (A.h5 B.h5)");
  inspect->add_flag("--json", inspect_json, "machine-readable output");

  std::string parse_error;
  bool help = false;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every parse error is one line and exit code 1, like every other bad
    // input. Under MPI the ranks first agree (one may have been started with other
    // arguments): the first error is printed once, by rank 0, and every rank exits 1.
    if (world <= 1) {
      const int code = rank == 0 ? app.exit(e) : e.get_exit_code();
      return code == 0 ? 0 : 1;
    }
    help = e.get_exit_code() == 0;
    if (help && rank == 0) app.exit(e);
    if (!help) parse_error = std::string(e.what()) + " (see --help)";
  }
  if (world > 1) {
    try {
      std::string command = help ? "--help" : "(none)";
      if (!help && !app.get_subcommands().empty()) command = app.get_subcommands().front()->get_name();
      agree_across_ranks(parse_error, "command = " + command + "\n", world);
    } catch (const ConfigError& e) {
      if (rank == 0) std::fprintf(stderr, "lct: error: %s\n", e.what());
      return 1;
    }
    if (help) return 0;
  }

  try {
    if (*train) {
      // Every rank resolves its config and checks it and the layout, then all ranks agree
      // on the verdict and on the config itself (src/rank_agreement.h), before any work.
      Config config;
      RunPlan plan;
      std::string error, latest;
      try {
        config = resolve_config(config_file, overrides);
        try {
          // the run rewrites its folder's files: none may be an output or an input
          refuse_run_folder_file("trace.path", config.trace.path, config.checkpoint.dir);
          refuse_run_folder_file("--config", config_file, config.checkpoint.dir);
          refuse_run_folder_file("data.path", config.data.path, config.checkpoint.dir);
          refuse_aliasing({{"trace.path", config.trace.path}},
                          {{"--config", config_file}, {"data.path", config.data.path},
                           {"train.resume", config.train.resume == "auto" ? "" : config.train.resume},
                           {"attention.cad_profile", cad_profile_file(config.cad_profile)}});
        } catch (const std::invalid_argument& e) {
          throw ConfigError(e.what());
        }
        plan = make_run_plan(config, world);
        if (config.train.resume == "auto") latest = latest_checkpoint(config.checkpoint.dir);
      } catch (const ConfigError& e) {
        error = e.what();
      }
      agree_across_ranks(error,
                         error.empty() ? training_inputs_text(config, latest) +
                                             "dry run = " + (dry_run ? "true" : "false") + "\n"
                                       : "",
                         world);
      configure_threads(config.train.threads);
      const ProcessGrid grid = mpi_active() ? ProcessGrid(plan.layout) : ProcessGrid();
      // the memory budget, before anything is allocated or written; every rank must
      // agree (a rank's MemAvailable moves), so one that does not fit stops them all
      const MemoryEstimate estimate = estimate_rank_memory(config, plan);
      const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      const MemoryAvailable available = available_memory(local ? std::atoi(local) : world);
      const std::string memory_error = check_memory_budget(estimate, available);
      if (dry_run) {
        if (rank == 0) print_dry_run(config, plan, estimate, available);
        if (!memory_error.empty()) throw ConfigError(memory_error);
        return 0;
      }
      if (!all_ranks_agree(memory_error.empty(), grid)) {
        if (!memory_error.empty()) throw ConfigError(memory_error);
        throw ConfigError("not enough memory on another rank (see its estimate with lct train --dry-run)");
      }
      Trainer trainer(config, plan, grid);
      if (config.train.resume == "auto") {
        if (latest.empty())
          log_info("train.resume = auto: no checkpoint in %s, starting fresh",
                   config.checkpoint.dir.c_str());
        else
          trainer.resume_from(latest);
      } else if (!config.train.resume.empty()) {
        trainer.resume_from(config.train.resume);
      }
      install_stop_signal_handlers();
      return trainer.run();
    } else if (*bench) {
      const Config config = resolve_config(bench_config_file, bench_overrides);
      configure_threads(config.train.threads);
      return run_bench(config, bench_options);
    } else if (*simulate) {
      const Config config = resolve_config(simulate_config_file, simulate_overrides);
      refuse_aliasing({{"--calibration-out", simulate_options.calibration_out}, {"trace.path", config.trace.path}},
                      {{"--config", simulate_config_file}, {"--calibration", simulate_options.calibration},
                       {"--profile", simulate_options.profile}, {"attention.cad_profile", cad_profile_file(config.cad_profile)},
                       {"data.path", config.data.path}});
      return run_simulate(config, simulate_options);
    } else if (*inspect) {
      if (inspect_compare != (inspect_files.size() == 2) || inspect_files.size() > 2)
        throw std::invalid_argument(inspect_compare ? "inspect --compare needs exactly two files"
                                                    : "inspect takes one file (use --compare A B for two)");
      return inspect_compare ? compare_files(inspect_files[0], inspect_files[1], inspect_json)
                             : inspect_file(inspect_files[0], inspect_json);
    } else if (*eval) {
      refuse_aliasing({{"--grads-out", grads_out}, {"--per-position-out", eval_options.per_position_out}},
                      {{"--checkpoint", checkpoint}, {"--batch-file", batch_file}});
      configure_threads(eval_threads);
      eval_options.grads_out = grads_out;
      if (!eval_attention.empty()) {
        // the checkpoint's model as a config, with the [attention] keys applied through
        // the same parser and errors as `lct train`
        eval_options.adjust_model = [&](LlamaConfig& m) {
          Config c;
          c.model = m;
          c.attention_kernel = attention_kernel_name(m.attention_kernel);
          apply_overrides(c, eval_attention);
          m = model_config(c);
        };
      }
      const EvalResult r = run_eval(checkpoint, batch_file, eval_options);
      char recall[96] = "";
      if (r.answers > 0)
        std::snprintf(recall, sizeof recall, " | recall %.4f (%lld of %lld answers)",
                      double(r.answers_correct) / double(r.answers), (long long)r.answers_correct,
                      (long long)r.answers);
      std::printf("loss %.9g | targets %lld | tokens %lld | documents %lld%s | attention %s%s%s\n",
                  r.loss, (long long)r.targets, (long long)r.tokens, (long long)r.documents, recall,
                  r.attention.c_str(), grads_out.empty() ? "" : (" | grads -> " + grads_out).c_str(),
                  eval_options.per_position_out.empty()
                      ? ""
                      : (" | per-position loss -> " + eval_options.per_position_out).c_str());
    } else if (*make_batch) {
      const Config config = resolve_config(batch_config_file, batch_overrides);
      refuse_aliasing({{"--out", batch_out}}, {{"--config", batch_config_file}, {"data.path", config.data.path}});
      write_batch_from_config(config, batch_first, batch_sequences, batch_out);
      std::printf("wrote %s: %lld sequences of %lld tokens from sequence %lld\n", batch_out.c_str(),
                  (long long)batch_sequences, (long long)config.data.seq_len, (long long)batch_first);
    }
  } catch (const ConfigError& e) {
    // configuration and layout errors are reached by every rank alike: rank 0 reports,
    // all ranks exit cleanly
    if (rank == 0) std::fprintf(stderr, "lct: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // anything else may be this rank's alone: report it with the rank and end the
    // whole job, so no other rank waits forever in a collective
    if (world > 1) {
      std::fprintf(stderr, "lct: error (rank %d of %d): %s\n", rank, world, e.what());
      mpi_abort_job(1);
    }
    std::fprintf(stderr, "lct: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
