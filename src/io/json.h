// The one JSON writer of lct's own outputs (inspect --json, bench --json): a string with
// every character JSON needs escaped, and a number (null when not finite).
#pragma once

#include <string>

namespace lct {

std::string json_string(const std::string& s);  // quoted and escaped
std::string json_number(double v);              // %.10g, or null

}  // namespace lct
