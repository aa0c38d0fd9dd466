// The one integer parser of lct, for every integer a user types or a file holds: config
// keys and command-line values, token ids, seeds. The whole text is decimal digits with
// an optional leading minus: no '+', no spaces, no NUL or anything after the digits (the
// C parsers stop at a NUL or skip leading spaces, and read "5 apples" as 5).
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>

namespace lct {

enum class IntegerText { ok, not_an_integer, out_of_range };

// Reads `text` whole into `value` (int64_t or uint64_t). out_of_range: the text is an
// integer that T cannot hold (2^63 for int64_t, -1 for uint64_t); `value` is then the
// nearest end of T's range, so that a caller can say which side.
template <typename T>
IntegerText parse_integer_text(std::string_view text, T& value) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty()) return IntegerText::not_an_integer;
  for (char c : digits)
    if (c < '0' || c > '9') return IntegerText::not_an_integer;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err == std::errc::result_out_of_range || (negative && err == std::errc::invalid_argument)) {
    value = negative ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max();
    return IntegerText::out_of_range;
  }
  if (err != std::errc() || end != text.data() + text.size()) return IntegerText::not_an_integer;
  return IntegerText::ok;
}

}  // namespace lct
