// Names of lct's choice enums (precision, mask, kernel, schedule, exchange, source, ...):
// each enum has one table of {value, name}, and parsing, printing and the choices listed
// in --help and in error messages all read it, so a new value needs one line and can
// never print another's name. (This header sits in attention/ because every other
// folder may include attention/, the bottom of data -> model -> attention.)
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace lct {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// "a, b, c" (or with another separator, e.g. " | " for --help)
template <typename E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N], const char* separator = ", ") {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += (i ? separator : "") + std::string(table[i].name);
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
    if (text == e.name) return e.value;
  throw std::invalid_argument("unknown " + std::string(what) + " '" + text + "' (expected: " + enum_choices(table) +
                              ")");
}

}  // namespace lct
