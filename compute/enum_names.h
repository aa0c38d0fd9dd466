// Names of lct's choice enums (precision, mask, kernel, schedule, exchange, source, ...):
// each enum has one table of {value, name}, and parsing, printing and the choices listed
// in --help and in error messages all read it, so a new value needs one line and can
// never print another's name. (It sits in compute/, the ground floor every other folder
// may include.)
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace lct {

template <typename E>
struct EnumName {
  E value;
  const char* name;
  const char* help = "";  // what the value means, for --help ("" when the name says it)
  bool settable = true;   // false: derived, never a setting (not parsed, not offered)
};

// "a, b, c": the values a setting may take
template <typename E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string out;
  for (const EnumName<E>& e : table)
    if (e.settable) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

// "a | b (what b means) | c": the choices as --help lists them
template <typename E, size_t N>
std::string enum_help(const EnumName<E> (&table)[N]) {
  std::string out;
  for (const EnumName<E>& e : table) {
    if (!e.settable) continue;
    out += (out.empty() ? "" : " | ") + std::string(e.name);
    if (*e.help) out += " (" + std::string(e.help) + ")";
  }
  return out;
}

// The value's name; a value missing from its table is a bug (std::logic_error).
template <typename E, size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  throw std::logic_error("an enum value has no name in its table");
}

// The value named `text`, else std::invalid_argument "unknown <what> 'text' (expected: ...)".
template <typename E, size_t N>
E parse_enum(const EnumName<E> (&table)[N], const std::string& text, const char* what) {
  for (const EnumName<E>& e : table)
    if (text == e.name && e.settable) return e.value;
  throw std::invalid_argument("unknown " + std::string(what) + " '" + text + "' (expected: " + enum_choices(table) +
                              ")");
}

}  // namespace lct
