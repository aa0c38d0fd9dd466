// Reading a JSON file lct did not write itself in this process (a Hugging Face folder's
// config.json and index, a previous lct bench --json document).
#pragma once

#include <string>

#include "src/util/json.h"

namespace lct {

// The file parsed, refused in one line naming it when it is not a regular file, larger
// than 64 MiB, not JSON, holds a NUL byte or is nested deeper than 32 levels.
Json read_json_file(const std::string& path);

}  // namespace lct
