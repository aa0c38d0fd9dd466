// lct's command line: every command's options (src/cli/command.h), the parse, the ranks'
// agreement under MPI and the command's run, with one-line errors (src/main.cpp starts
// the process: BLAS kernels, MPI, the final flush of standard output).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/process_grid.h"
#include "src/cli/command.h"
#include "src/cli/dispatch.h"
#include "src/config/config.h"
#include "src/train/rank_agreement.h"
#include "src/util/log.h"
#include "src/util/machine.h"
#include "src/util/printable.h"

namespace lct {
namespace {

// An option given an empty value (`--grads-out ""`, `--continuation-tokens ""`) is refused
// in one line, never read as the option not given: an empty path, list or text is a
// mistake the user should hear of. A config key's empty value (the [section] groups) is
// its parser's to judge, as in a TOML file.
std::string empty_value_error(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands())
    for (const CLI::Option* option : command->get_options()) {
      if (option->count() == 0 || option->get_expected_min() == 0 || option->get_group().starts_with("[")) continue;
      for (const std::string& value : option->results())
        if (value.empty()) return option->get_name() + ": empty value: give one, or leave the option out";
    }
  return {};
}

}  // namespace

int run_command(int argc, char** argv, int rank, int world) {
  CLI::App app{"lct: long-context transformer training on CPUs"};
  app.require_subcommand(1);
  // one-line parse errors, like every other lct error
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("lct: error: ") + e.what() + " (see --help)\n";
  });
  app.set_help_all_flag("--help-all", "help for every subcommand");
  // Only the command being run gets its options: every command's config keys are a few
  // hundred CLI11 options, and CLI11 checks each new option against all before it: a tiny
  // `lct train` under the sanitizers started in 0.42 s, 0.32 s with one command's options
  // (the test suite starts thousands of processes). `lct --help`, `--help-all` and a
  // first argument that names no command build them all, as before (`lct --help train`:
  // every command is built, and CLI11 shows train's help).
  const std::pair<const char*, std::function<Command()>> all[] = {
      {"train", [&] { return add_train_command(app, rank, world); }},
      {"bench", [&] { return add_bench_command(app); }},
      {"simulate", [&] { return add_simulate_command(app); }},
      {"eval", [&] { return add_eval_command(app); }},
      {"make-batch", [&] { return add_make_batch_command(app); }},
      {"inspect", [&] { return add_inspect_command(app); }},
      {"export", [&] { return add_export_command(app); }},
      {"generate", [&] { return add_generate_command(app); }}};
  bool help_all = false;
  for (int i = 1; i < argc; ++i) help_all = help_all || std::strcmp(argv[i], "--help-all") == 0;
  const bool named = !help_all && argc > 1 &&
                     std::any_of(std::begin(all), std::end(all), [&](const auto& c) { return std::strcmp(argv[1], c.first) == 0; });
  std::vector<Command> commands;
  for (const auto& [name, add] : all)
    if (!named || std::strcmp(argv[1], name) == 0) commands.push_back(add());

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
  if (!help && parse_error.empty()) {
    parse_error = empty_value_error(app);
    if (!parse_error.empty() && world <= 1) {
      if (rank == 0) print_err("lct: error: {}\n", one_line(parse_error));
      return 1;
    }
  }
  if (world > 1) {
    try {
      std::string command = help ? "--help" : "(none)";
      if (!help && !app.get_subcommands().empty()) command = app.get_subcommands().front()->get_name();
      // the same build on every rank (each host of a cluster loads its own copy)
      agree_across_ranks(parse_error, "command = " + command + "\n" + binary_identity_line(), world);
    } catch (const ConfigError& e) {
      if (rank == 0) print_err("lct: error: {}\n", one_line(e.what()));
      return 1;
    }
    if (help) return 0;
  }

  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const ConfigError& e) {
    // configuration and layout errors are reached by every rank alike: rank 0 reports,
    // all ranks exit cleanly
    if (rank == 0) print_err("lct: error: {}\n", one_line(e.what()));
    return 1;
  } catch (const std::exception& e) {
    // anything else may be this rank's alone: report it with the rank and end the
    // whole job, so no other rank waits forever in a collective
    if (world > 1) {
      print_err("lct: error (rank {} of {}, host {}): {}\n", rank, world, host_name(), one_line(e.what()));
      mpi_abort_job(1);
    }
    print_err("lct: error: {}\n", one_line(e.what()));
    return 1;
  }
  return 0;
}

}  // namespace lct
