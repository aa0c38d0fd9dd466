// The one floating-point parser of lct, for every number a user types (config keys and
// command-line values), beside src/util/integer_text.h's integers. The whole text is a
// decimal number, optionally with an exponent: "0.5", "-2", "1e-4", ".5". Not accepted:
// hexadecimal ("0x10", "0x1p3", which strtod and CLI11 read), a leading '+' or spaces,
// anything after the number, and "inf" or "nan" (a finite value is the only setting).
#pragma once

#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>

namespace lct {

// True, with `value` set, when `text` is wholly a finite decimal number.
inline bool parse_number_text(std::string_view text, double& value) {
  if (text.empty()) return false;
  // std::from_chars also takes "inf", "nan" and "infinity"; it refuses a leading '+', so
  // a '+' passes here only to stand in an exponent ("1e+38")
  for (char c : text)
    if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) return false;
  double v = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (err != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) return false;
  value = v;
  return true;
}

}  // namespace lct
