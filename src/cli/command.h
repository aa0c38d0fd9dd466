// lct's commands: each file of src/cli/ adds one subcommand to the CLI11 app (its
// options, stored with it) and returns how to run it; src/cli/dispatch.cpp only parses and
// dispatches. Shared here: the config options every config-taking command has, and the
// numeric validators with one-line messages.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "src/config/config.h"

namespace lct {

struct Command {
  CLI::App* app = nullptr;     // the subcommand
  std::function<int()> run;    // its exit code; throws ConfigError or another exception
};

// rank and world: this process's MPI rank and the world size (1 without mpirun).
Command add_train_command(CLI::App& lct, int rank, int world);
Command add_bench_command(CLI::App& lct);
Command add_simulate_command(CLI::App& lct);
Command add_eval_command(CLI::App& lct);
Command add_make_batch_command(CLI::App& lct);
Command add_inspect_command(CLI::App& lct);
Command add_export_command(CLI::App& lct);
Command add_generate_command(CLI::App& lct);

// --config FILE and every config key as --section.key, collected into `overrides`.
struct ConfigOptions {
  std::string file;
  std::map<std::string, std::string> overrides;
};
void add_config_options(CLI::App* command, ConfigOptions& options);
// Defaults, then the file, then the overrides; validated (throws ConfigError).
Config resolve_config(const ConfigOptions& options);
// Every file a command given this config reads, as check_outputs (src/io/paths.h)
// compares inputs: --config (`config_file`, "" for none), data.path, train.resume's path, attention.cad_profile's file
// and train.init_from's model files. Every config-taking command that writes passes
// these, so no output of any command can replace what its config reads.
std::vector<std::pair<std::string, std::string>> config_inputs(const Config& config, const std::string& config_file);

// The attention and RoPE-scaling overrides of a command that reads a model (eval,
// generate): every key of function scope (attention.*, model.rope_scaling*) as
// --section.key. Core attention and RoPE have no weights, so a checkpoint trained with
// one kernel or scaling can be run with another (causal-trained, run with DCA or YaRN).
struct ModelOverrides {
  std::map<std::string, std::string> values;
  // Applies them to a model config through lct train's parser and errors; empty when
  // none was given.
  std::function<void(LlamaConfig&)> adjuster() const;
};
void add_model_overrides(CLI::App* command, ModelOverrides& overrides);

// Lower bounds for numeric options, in place of CLI11's PositiveNumber/NonNegativeNumber
// (whose messages print the largest double, 309 digits): "--x: must be > 0, got 0".
const CLI::Validator& positive();
// Every integer option's text is read whole by lct's one integer parser
// (src/util/integer_text.h): "--threads: must be an integer, got ' 5'" (CLI11 alone would
// take spaces, a '+' and hex). Given first, before any range check.
const CLI::Validator& whole_integer();
const CLI::Validator& non_negative();

}  // namespace lct
