// What lct needs of a configuration it holds only as text (a checkpoint's /config, the
// run plan's config_text), for code that sees no Config.
#pragma once

#include <string>
#include <vector>

namespace lct {

// The rule of resuming, from each key's scope (src/config/config.h, KeyScope): throws
// std::runtime_error ("<origin>: cannot resume: <key> is .. in the checkpoint but ..")
// when a model or function key differs; returns one warning per other changed setting
// (run-scope keys change silently). Both texts are TOML configurations; origin names
// the saved one.
std::vector<std::string> resume_warnings(const std::string& saved, const std::string& origin, const std::string& run);

}  // namespace lct
