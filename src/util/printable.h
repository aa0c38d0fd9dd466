// Text from a file or a user, as a one-line message may show it: printable ASCII kept,
// every other byte (a NUL, a line break, a control or non-ASCII byte) as \xNN, so that a
// message neither ends early at a NUL nor spans lines.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace lct {

inline std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += ch;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace lct
