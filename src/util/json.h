// The one JSON library of lct: nlohmann/json (Debian's nlohmann-json3-dev), objects kept
// in insertion order. Every JSON text lct writes is built with it: inspect --json,
// bench --json, simulate --json, metrics.jsonl and the trace-event timeline. It escapes
// every string and writes a number that is not finite as null.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace lct {

using Json = nlohmann::ordered_json;

// The text of `j` on one line. Bytes that are not UTF-8 (a crafted path or name) become
// U+FFFD rather than an exception.
inline std::string json_text(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// nlohmann's lexer takes a NUL byte as the end of its input, so `{...}\0garbage` would
// read as `{...}`; a JSON text holds no raw NUL (inside a string it is \u0000). Throws
// std::runtime_error "<where>: byte N is a NUL ..." when `text` has one.
inline void refuse_json_nul(const std::string& text, const std::string& where) {
  if (const size_t at = text.find('\0'); at != std::string::npos)
    throw std::runtime_error(where + ": byte " + std::to_string(at) + " of " + std::to_string(text.size()) +
                             " is a NUL (a JSON text is one value and nothing after it)");
}

// The JSON types a config field may have (transformers builds the model from the value
// as it is: a string "64" is not the number 64, nor "false" the boolean false).
enum class JsonKind { integer, number, boolean, string };

// nullptr when `v` is of `kind` (an integer is also a number), else what it should be.
inline const char* json_kind_mismatch(const Json& v, JsonKind kind) {
  switch (kind) {
    case JsonKind::integer: return v.is_number_integer() ? nullptr : "an integer";
    case JsonKind::number: return v.is_number() ? nullptr : "a number";
    case JsonKind::boolean: return v.is_boolean() ? nullptr : "true or false";
    case JsonKind::string: return v.is_string() ? nullptr : "a string";
  }
  return "a known JSON type";
}

}  // namespace lct
