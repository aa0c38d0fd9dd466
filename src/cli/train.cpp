// lct train: start-up (config, run plan, rank agreement, memory budget), --dry-run, and
// the training run itself (src/train/trainer.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "parallel/collectives.h"
#include "parallel/process_grid.h"
#include "src/cli/command.h"
#include "src/io/checkpoint.h"
#include "src/io/hf_model.h"
#include "src/io/paths.h"
#include "src/train/longest_fit.h"
#include "src/train/machine_choices.h"
#include "src/train/memory_budget.h"
#include "src/train/rank_agreement.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"
#include "src/train/trainer.h"
#include "src/util/log.h"
#include "src/util/number_text.h"
#include "src/util/printable.h"

namespace lct {
namespace {

// --memory-gib: a positive, finite number of GiB, at most 1 PiB (2^20 GiB: more than any
// machine a rank runs on), in the one-line convention of positive() (src/cli/command.h)
constexpr int64_t kMaxMemoryGib = int64_t(1) << 20;
const CLI::Validator& memory_gib_value() {
  static const CLI::Validator v(
      [](std::string& text) -> std::string {
        double gib = 0;
        // lct's one number parser (src/util/number_text.h): no hex, no '+', no inf or nan
        if (!parse_number_text(text, gib)) {
          if (!CLI::detail::lexical_cast(text, gib)) return "must be a number, got '" + printable(text) + "'";
          if (std::isfinite(gib)) return "must be a decimal number, got '" + printable(text) + "'";
          return "must be a finite number, got " + printable(text);
        }
        if (!(gib > 0)) return "must be > 0, got " + printable(text);
        if (gib > double(kMaxMemoryGib))
          return "must be at most " + std::to_string(kMaxMemoryGib) + " (GiB: 1 PiB), got " + printable(text);
        return {};
      },
      "GIB");
  return v;
}

struct TrainOptions {
  ConfigOptions config;
  bool dry_run = false;
  bool max_seq_len = false;  // print the longest data.seq_len that fits, train nothing
  double memory_gib = 0;     // > 0: the memory a rank may use, instead of this machine's
};

// Every rank's verdict, combined: true when it holds on every rank.
bool all_ranks_agree(bool ok, const ProcessGrid& grid) {
  if (grid.world_size() <= 1) return ok;
  double failed = ok ? 0 : 1;
  allreduce_sum(&failed, 1, grid.world(), nullptr);
  return failed == 0;
}

// The run rewrites its folder's files: none may be an output or an input.
void refuse_overlapping_files(const Config& config, const std::string& config_file) {
  try {
    refuse_run_folder_file("trace.path", config.trace.path, config.checkpoint.dir);
    refuse_run_folder_file("--config", config_file, config.checkpoint.dir);
    refuse_run_folder_file("data.path", config.data.path, config.checkpoint.dir);
    const NamedPaths inputs = config_inputs(config, config_file);  // every command's one list
    refuse_aliasing({{"trace.path", config.trace.path}}, inputs);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

// lct train --dry-run: the plan, the step and the memory estimate, nothing run.
void print_dry_run(const RunPlan& plan, const MemoryEstimate& e, const MemoryAvailable& a) {
  const LlamaConfig& mc = plan.model;
  print_out("lct train --dry-run: the data was opened and checked; nothing is trained or written\n");
  print_out("model: {} layers, hidden {}, heads {}/{}, mlp {}, vocab {}, {:.2f}M parameters, attention {}\n",
            mc.num_hidden_layers, mc.hidden_size, mc.num_attention_heads, mc.num_key_value_heads,
            mc.intermediate_size, mc.vocab_size, double(build_llama_table(mc).total()) / 1e6, describe_attention(mc));
  print_out("layout: {}\n", describe_run_plan(plan));
  print_out("activations: {}\n", describe_activations(plan));
  print_out("step: {} micro-batch(es) x {} tokens per data-parallel rank = {} tokens; {} steps, "
            "optimizer {}; checkpoints in {} every {} steps\n",
            plan.micro_batches, plan.data.seq_len, plan.tokens_per_step(), plan.run.steps,
            optimizer_name(plan.optimizer.kind), plan.run.checkpoint.dir, plan.run.checkpoint.every);
  print_out("{}\n", describe_estimate(e, a));
  const std::string verdict = check_memory_budget(e, a);
  print_out("{}\n", verdict.empty() ? "fits: yes" : "fits: NO (lct train would refuse it)");
}

int run_train(const TrainOptions& o, int rank, int world) {
  // Every rank resolves its config and plan, then all ranks agree on the verdict and on
  // the config itself (src/train/rank_agreement.h), before any work.
  Config config;
  RunPlan plan;
  std::string error, latest;
  try {
    if (o.memory_gib > 0 && !o.dry_run && !o.max_seq_len)
      throw ConfigError("--memory-gib sizes --dry-run's and --max-seq-len's estimate; a training run uses the "
                        "machine's memory");
    config = resolve_config(o.config);
    if (const std::string e = config.model.attention_mask.next_token_problem("lct train"); !e.empty()) throw ConfigError(e);
    refuse_overlapping_files(config, o.config.file);
    plan = make_run_plan(config, world);
    // what the process holds already, measured here, at the same point of every lct
    // train: the run's estimate, --dry-run's and every candidate of --max-seq-len count
    // this one figure, before --dry-run opens the data (src/train/memory_budget.h)
    process_resident_bytes();
    // the data as training opens it: --dry-run refuses what training would refuse
    // (with --max-seq-len, at the length it answers, below)
    if (o.dry_run && !o.max_seq_len) {
      const DocumentStream stream(plan);
    }
    if (plan.run.resume.from == Resume::From::latest) latest = latest_checkpoint(plan.run.checkpoint.dir);
  } catch (const ConfigError& e) {
    error = e.what();
  }
  // (a checkpoint given by path is read as it is: its content counts too)
  const std::string resume_from = plan.run.resume.from == Resume::From::latest ? latest : plan.run.resume.path;
  agree_across_ranks(error,
                     error.empty() && world > 1
                         ? training_inputs_text(config_key_lines(config), config.data.path, resume_from,
                                                config.train.init_from) +
                               "dry run = " + (o.dry_run ? "true" : "false") + "\n"
                         : "",
                     world);
  configure_threads(plan.run.threads);
  const ProcessGrid grid = mpi_active() ? ProcessGrid(plan.layout) : ProcessGrid();
  // the memory budget, before anything is allocated or written; every rank must agree
  // (a rank's MemAvailable moves), so one that does not fit stops them all
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  MemoryAvailable available = available_memory(local ? std::atoi(local) : world);
  if (o.memory_gib > 0) available = {o.memory_gib * double(int64_t(1) << 30), fmt::format("--memory-gib {}", o.memory_gib)};
  if (o.max_seq_len) {
    // The answer fits with the part of the process's own figure that moves between runs
    // to spare (process_headroom_bytes), so that --dry-run of it, another process, fits
    // too: each counts the process once, measured at the same point of its start-up.
    const double headroom = process_headroom_bytes();
    MemoryAvailable for_fit = available;
    for_fit.bytes = std::max(0.0, available.bytes - headroom);
    for_fit.limit += ", less " + bytes_text(headroom) + " of headroom for the process's pages that move between runs";
    const LongestFit fit = longest_fitting_seq_len(config, plan, for_fit);
    if (rank == 0) print_out("{}\n", describe_longest_fit(fit, for_fit));
    if (fit.seq_len == 0 || !o.dry_run) return fit.seq_len > 0 ? 0 : 1;
    // with --dry-run: the plan and the estimate of the length answered, as --dry-run
    // --data.seq_len <answer> prints them (the data opened at that length)
    config.data.seq_len = fit.seq_len;
    validate_config(config);
    plan = make_run_plan(config, world);
    const DocumentStream stream(plan);
  }
  const MemoryEstimate estimate = estimate_rank_memory(plan);
  const std::string memory_error = check_memory_budget(estimate, available);
  if (o.dry_run) {
    if (rank == 0) print_dry_run(plan, estimate, available);
    if (!memory_error.empty()) throw ConfigError(memory_error);
    return 0;
  }
  if (!all_ranks_agree(memory_error.empty(), grid)) {
    if (!memory_error.empty()) throw ConfigError(memory_error);
    throw ConfigError("not enough memory on another rank (see its estimate with lct train --dry-run)");
  }
  // the machine's choices (fp32 library, CAD cost model), on rank 0 for every rank
  resolve_machine_choices(plan, grid);
  Trainer trainer(plan, grid);
  if (!resume_from.empty())
    trainer.resume_from(resume_from);
  else if (plan.run.resume.from == Resume::From::latest)
    log_info("train.resume = auto: no checkpoint in {}, starting fresh", plan.run.checkpoint.dir);
  if (resume_from.empty() && !plan.run.init_from.empty()) trainer.init_from(plan.run.init_from);
  install_stop_signal_handlers();
  return trainer.run();
}

}  // namespace

Command add_train_command(CLI::App& lct, int rank, int world) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* train = lct.add_subcommand("train", "train a model (keys: section.key, see --help)");
  train->add_flag("--dry-run", o->dry_run,
                  "print the plan and the memory estimate per rank against the memory available, then exit");
  train->add_flag("--max-seq-len", o->max_seq_len,
                  "print the longest data.seq_len (a multiple of 1024) whose run fits the memory available by the "
                  "--dry-run estimate, with the process's own moving part to spare, every other key as configured, in "
                  "one line; trains nothing (with --dry-run: then the plan and estimate of that length)");
  train->add_option("--memory-gib", o->memory_gib,
                    "with --dry-run or --max-seq-len: the memory one rank may use, in GiB (up to 1048576), instead of "
                    "this machine's")
      ->check(memory_gib_value());
  add_config_options(train, o->config);
  return {train, [o, rank, world] { return run_train(*o, rank, world); }};
}

}  // namespace lct
