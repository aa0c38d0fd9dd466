#include <fmt/format.h>
#include <cmath>
#include <cstdio>

#include "src/cli/command.h"
#include "src/io/hf_model.h"
#include "src/tune/cad_profile.h"
#include "src/util/integer_text.h"
#include "src/util/number_text.h"
#include "src/util/log.h"
#include "src/util/printable.h"

namespace lct {
namespace {
constexpr double kSmallest = 1e-30, kLargest = 1e30;

CLI::Validator at_least(double bound, bool strict) {
  return CLI::Validator(
      [bound, strict](std::string& text) -> std::string {
        double v = 0;
        // lct's one number parser: CLI11 alone takes hex ("0x10" as 16) and "inf"
        if (!parse_number_text(text, v)) {
          if (!CLI::detail::lexical_cast(text, v)) return "must be a number, got '" + printable(text) + "'";
          if (std::isfinite(v)) return "must be a decimal number, got '" + printable(text) + "'";
        }
        // inf, nan, denormals and magnitudes past 1e30 would only come back as inf or nan
        // (in printed JSON too): a finite, normal value of a sane size or exactly 0
        if (!std::isfinite(v) || std::fabs(v) > kLargest || (v != 0 && std::fabs(v) < kSmallest))
          return "must be 0 or a finite number of magnitude 1e-30 to 1e30, got " + text;
        if (strict ? v > bound : v >= bound) return {};
        return fmt::format("must be {} {:g}, got {}", strict ? ">" : ">=", bound, text);
      },
      strict ? "> 0" : ">= 0");
}
}  // namespace

const CLI::Validator& whole_integer() {
  // CLI11 alone takes " 5", "+5" and "0x10" (hex) for an integer option
  static const CLI::Validator v(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        switch (parse_integer_text(text, value)) {
          case IntegerText::ok: return {};
          case IntegerText::out_of_range:
            return std::string("must be ") + (value < 0 ? ">= " : "<= ") + std::to_string(value) + ", got " + text;
          case IntegerText::not_an_integer: break;
        }
        return "must be an integer, got '" + printable(text) + "'";
      },
      "INTEGER");
  return v;
}

const CLI::Validator& positive() {
  static const CLI::Validator v = at_least(0, true);
  return v;
}

const CLI::Validator& non_negative() {
  static const CLI::Validator v = at_least(0, false);
  return v;
}

void add_config_options(CLI::App* command, ConfigOptions& options) {
  command->add_option("--config", options.file, "TOML config file (e.g. configs/default.toml)")
      ->check(CLI::ExistingFile);
  const Config defaults;
  for (const ConfigKey& k : config_keys()) {
    const std::string section = k.name.substr(0, k.name.find('.'));
    command
        ->add_option_function<std::string>(
            "--" + k.name, [&options, name = k.name](const std::string& v) { options.overrides[name] = v; },
            k.help)
        ->default_str(k.get(defaults))
        ->group("[" + section + "]")
        ->type_name(k.type == KeyType::integer        ? "INT"
                    : k.type == KeyType::number       ? "FLOAT"
                    : k.type == KeyType::boolean      ? "BOOL"
                    : k.type == KeyType::boolean_or_auto ? "BOOL|auto"
                    : k.type == KeyType::integer_list ? "LIST"
                                                      : "TEXT");
  }
  command->get_formatter()->column_width(36);
}

void add_model_overrides(CLI::App* command, ModelOverrides& overrides) {
  for (const ConfigKey& k : config_keys()) {
    if (k.scope != KeyScope::function) continue;
    command
        ->add_option_function<std::string>(
            "--" + k.name, [&overrides, name = k.name](const std::string& v) { overrides.values[name] = v; },
            k.help + " (overrides the checkpoint)")
        ->group("[attention] and RoPE-scaling overrides");
  }
}

std::function<void(LlamaConfig&)> ModelOverrides::adjuster() const {
  if (values.empty()) return {};
  // the checkpoint's model as a config, with the keys applied through the same parser
  // and errors as lct train
  return [values = values](LlamaConfig& m) {
    Config c;
    c.model = m;
    apply_overrides(c, values);
    // an override the model's attention cannot use is said, as lct train says it
    std::set<std::string> given;
    for (const auto& [key, text] : values) given.insert(key);
    for (const std::string& w : inert_keys(c, &given)) log_warn(w);
    m = c.model;
  };
}

namespace {

// train.init_from: the model keys become the Hugging Face config.json's. A weight-shape
// key (model scope) given otherwise must agree with it; what attention and RoPE compute
// (function scope: attention.kernel, the mask, DCA, model.rope_scaling*) may be given to
// differ (a causal Llama fine-tuned with DCA or YaRN) and is otherwise taken from the
// folder (its "lct" object, or causal without RoPE scaling).
// `given`: the keys the file or the command line set, and where ("in FILE", "on the
// command line").
void apply_init_from(Config& config, const std::map<std::string, std::string>& given) {
  const std::string& path = config.train.init_from;
  LlamaConfig hf;
  try {
    const HfModelFiles files = find_hf_model_files(path);
    hf = read_hf_config(files.config);
    check_hf_params(files, hf, build_llama_table(hf));  // every header, name and shape, before the run starts
  } catch (const std::runtime_error& e) {
    throw ConfigError(std::string("train.init_from: ") + e.what());
  }
  Config from;
  from.model = hf;
  from.model.init_std = config.model.init_std;  // not a Hugging Face key: the run's
  for (const ConfigKey& k : config_keys()) {
    if (k.scope != KeyScope::model && k.scope != KeyScope::function) continue;
    const std::string theirs = k.get(from), ours = k.get(config);
    if (const auto g = given.find(k.name); g != given.end()) {
      if (k.scope == KeyScope::model && theirs != ours)
        throw ConfigError(k.name + " = " + ours + " " + g->second + ", but train.init_from " + path +
                          " has " + theirs + " (leave it out: the model keys come from its config.json)");
      continue;
    }
    k.set(config, theirs);
  }
}

}  // namespace

Config resolve_config(const ConfigOptions& options) {
  Config config;
  std::map<std::string, std::string> given;  // key -> where it was set
  if (!options.file.empty())
    for (const std::string& key : apply_toml_file(config, options.file)) given[key] = "in " + options.file;
  apply_overrides(config, options.overrides);
  for (const auto& [key, text] : options.overrides) given[key] = "on the command line";
  if (!config.train.init_from.empty()) apply_init_from(config, given);
  validate_config(config);
  for (const std::string& w : inert_keys(config)) log_warn(w);
  return config;
}

std::vector<std::pair<std::string, std::string>> config_inputs(const Config& config, const std::string& config_file) {
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"--config", config_file},
      {"data.path", config.data.path},
      {"train.resume", config.train.resume.from == Resume::From::path ? config.train.resume.path : ""},
      {"attention.cad_profile", cad_profile_file(config.attention.cad.profile)}};
  if (!config.train.init_from.empty())
    for (auto& in : model_inputs("train.init_from", config.train.init_from)) inputs.push_back(std::move(in));
  return inputs;
}

}  // namespace lct
