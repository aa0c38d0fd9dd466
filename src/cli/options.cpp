#include <cmath>
#include <cstdio>

#include "src/cli/command.h"

namespace lct {
namespace {
constexpr double kSmallest = 1e-30, kLargest = 1e30;

CLI::Validator at_least(double bound, bool strict) {
  return CLI::Validator(
      [bound, strict](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "must be a number, got '" + text + "'";
        // inf, nan, denormals and magnitudes past 1e30 would only come back as inf or nan
        // (in printed JSON too): a finite, normal value of a sane size or exactly 0
        if (!std::isfinite(v) || std::fabs(v) > kLargest || (v != 0 && std::fabs(v) < kSmallest))
          return "must be 0 or a finite number of magnitude 1e-30 to 1e30, got " + text;
        if (strict ? v > bound : v >= bound) return {};
        char b[32];
        std::snprintf(b, sizeof b, "%g", bound);
        return std::string("must be ") + (strict ? "> " : ">= ") + b + ", got " + text;
      },
      strict ? "> 0" : ">= 0");
}
}  // namespace

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

Config resolve_config(const ConfigOptions& options) {
  Config config;
  if (!options.file.empty()) apply_toml_file(config, options.file);
  apply_overrides(config, options.overrides);
  validate_config(config);
  return config;
}

}  // namespace lct
