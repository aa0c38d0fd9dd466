#include "src/io/json_file.h"

#include <sys/stat.h>

#include <cstdint>
#include <stdexcept>

#include "data/files.h"

namespace lct {

namespace {
constexpr int64_t kMaxJsonBytes = 64 << 20;  // a config.json, an index or a bench report of that size is not one
}  // namespace

Json read_json_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > kMaxJsonBytes)
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes, more than a JSON config can be (" +
                             std::to_string(kMaxJsonBytes >> 20) + " MiB)");
  const std::string text = read_regular_file(path, "the JSON file");
  refuse_json_nul(text, path);
  try {
    return Json::parse(text, [](int depth, Json::parse_event_t, Json&) {
      if (depth > 32) throw std::runtime_error("nested deeper than 32 levels");
      return true;
    });
  } catch (const Json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace lct
