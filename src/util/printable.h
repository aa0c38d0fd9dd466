// Text from a file or a user, as a one-line message may show it: printable ASCII kept,
// every other byte (a NUL, a line break, a control or non-ASCII byte) as \xNN, so that a
// message neither ends early at a NUL nor spans lines.
#pragma once

#include <fmt/format.h>
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
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// A message as one line: its control bytes (a line break, a tab, DEL) as \xNN, every
// other byte kept, so text escaped by printable() before is not escaped twice. What every
// "lct: error:" line passes through (src/cli/dispatch.cpp), whatever built the message.
inline std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += ch;
  }
  return out;
}

}  // namespace lct
