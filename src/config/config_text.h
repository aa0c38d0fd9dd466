// What lct needs of TOML texts for code that sees no Config: the reader's guard, and the
// rule of resuming on a configuration held as text (a checkpoint's /config, the run
// plan's config_text).
#pragma once

#include <string>
#include <vector>

#include "model/llama_config.h"

namespace lct {

// Every TOML text lct reads (config files, a checkpoint's /config, run.toml, the CAD cost model, the
// machine cache, a simulator calibration) is checked
// first: the parser recurses once per level of nested arrays and inline tables and per
// part of a dotted key, so a crafted text thousands of levels deep would overflow the
// stack. Throws ConfigError naming `origin` and the line when brackets nest deeper than
// kMaxTomlNesting or a line's keys have more parts than that (lct's own texts need 3).
constexpr int kMaxTomlNesting = 32;
void check_toml_nesting(const std::string& text, const std::string& origin);

// Sets one model key (model.* or the [attention] keys the model carries) on `model` from
// its text, through the key's own parser and checks; throws ConfigError (one line).
// For readers of model descriptions (a checkpoint's /model attributes).
void set_model_key(LlamaConfig& model, const std::string& key, const std::string& text);

// The rule of resuming, from each key's scope (src/config/config.h, KeyScope): throws
// std::runtime_error ("<origin>: cannot resume: <key> is .. in the checkpoint but ..")
// when a model or function key differs; returns one warning per other changed setting
// (run-scope keys change silently). Both texts are TOML configurations; origin names
// the saved one.
std::vector<std::string> resume_warnings(const std::string& saved, const std::string& origin, const std::string& run);

}  // namespace lct
