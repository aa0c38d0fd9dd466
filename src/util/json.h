// The one JSON library of lct: nlohmann/json (Debian's nlohmann-json3-dev), objects kept
// in insertion order. Every JSON text lct writes is built with it: inspect --json,
// bench --json, simulate --json, metrics.jsonl and the trace-event timeline. It escapes
// every string and writes a number that is not finite as null.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lct {

using Json = nlohmann::ordered_json;

// The text of `j` on one line. Bytes that are not UTF-8 (a crafted path or name) become
// U+FFFD rather than an exception.
inline std::string json_text(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace lct
