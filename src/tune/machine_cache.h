// What lct measured about this machine, kept between runs: train.fp32_gemm = auto's
// library choice and attention.cad_profile = auto's cost model are measured once per
// setup and cached as text in cache_folder() (src/util/machine.h).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace lct {

struct CachedMeasurement {
  std::string text;
  // for the log: "cached <path>", or "measured now, <s> s; cached in <path>", or
  // "measured now, <s> s; not cached: <why>"
  std::string where;
};

// The text in cache_folder()/file when there is one and usable(text) accepts it; nothing
// is measured.
std::optional<std::string> cached_text(const std::string& file, const std::function<bool(const std::string&)>& usable);

// The text in cache_folder()/file when usable(text) accepts it; else measure() now, its
// text written there atomically (a write that fails only says so in `where`).
CachedMeasurement measured_once(const std::string& file, const std::function<bool(const std::string&)>& usable,
                                const std::function<std::string()>& measure);

}  // namespace lct
