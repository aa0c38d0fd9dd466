// The run configuration: the sections of src/config/sections.h, one registry of keys.
// Precedence: command line (--section.key VALUE) > config file > built-in defaults.
// The built-in defaults equal configs/default.toml (a test checks this).
//
// Typed: every choice is parsed into its type here, where the key is read, so nothing
// below compares a configuration string; only names stay text (paths, the separator).
// Only the command layer (src/cli/) and make_run_plan see a Config: the run plan
// (src/train/run_plan.h) turns it into what a run does and carries the rest.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include "src/config/config_text.h"
#include "src/config/sections.h"

namespace lct {

struct Config {
  LlamaConfig model;
  AttentionConfig attention;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  TraceConfig trace;
};

// boolean_or_auto: true, false or "auto" (the run plan decides; src/train/run_plan.h).
enum class KeyType { integer, number, boolean, boolean_or_auto, string, integer_list };

// What a key's value means for a checkpoint: one place decides what a resumed run must
// keep and what `lct eval` may change.
//   model      the weights' shape and init (model.*): a resumed run must keep it
//   function   what attention and RoPE compute, without weights (attention.kernel, the
//              mask keys, attention.dca_*, model.rope_scaling*): a resumed run must keep
//              it; `lct eval` may override it (a causal-trained model evaluated with DCA)
//   placement  where attention runs (attention.placement, attention.cad_*): may change
//   run        how long and how loudly this run goes (train.steps, train.resume,
//              train.log_every, checkpoint.overwrite): changes silently on resume
//   setting    everything else: changes on resume with a warning
enum class KeyScope { model, function, placement, run, setting };

struct ConfigKey {
  std::string name;  // section.key
  KeyType type;
  std::string help;
  std::function<std::string(const Config&)> get;           // value as text
  std::function<void(Config&, const std::string&)> set;     // parses, throws ConfigError
  KeyScope scope = KeyScope::setting;
};


const std::vector<ConfigKey>& config_keys();
const ConfigKey* find_config_key(const std::string& name);

// Applies a TOML file onto config and returns the names ("section.key") of the keys it
// set. Unknown sections/keys and wrong types are errors naming the file and the key.
std::vector<std::string> apply_toml_file(Config& config, const std::string& path);
// Same, from TOML text (origin names it in errors, e.g. a checkpoint's /config).
std::vector<std::string> apply_toml_text(Config& config, const std::string& text, const std::string& origin);
// Applies "section.key" -> text overrides (from the command line).
void apply_overrides(Config& config, const std::map<std::string, std::string>& overrides);
// Cross-field validation; throws ConfigError naming the key.
void validate_config(const Config& config);
// The longest data.seq_len validate_config accepts
constexpr int64_t kMaxSeqLen = int64_t(1) << 30;
// The keys set away from their defaults that cannot act under the resolved run (a bf16
// kernel under fp32, a window without a windowed mask, DCA keys under causal attention,
// ...), each as "key = value does nothing under <what>": a warning line each.
// With `given` (the keys a command line gave, as eval's and generate's overrides), the
// keys of `given` that cannot act, whatever their value.
std::vector<std::string> inert_keys(const Config& config, const std::set<std::string>* given = nullptr);
struct ConfigDifference {
  std::string key, a, b;
  KeyScope scope;
};
// Keys whose values differ between two configs, in registry order.
std::vector<ConfigDifference> config_differences(const Config& a, const Config& b);
// The same for two configs as TOML text (a checkpoint's /config and a run's); origin_a
// names the first in errors.
std::vector<ConfigDifference> config_text_differences(const std::string& a, const std::string& origin_a,
                                                      const std::string& b);
// The resolved configuration as TOML text (what checkpoints and logs record).
std::string config_to_toml(const Config& config);
// Every key as a "section.key = value" line, in registry order (what ranks agree on).
std::string config_key_lines(const Config& config);

}  // namespace lct
