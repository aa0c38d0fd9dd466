#include "src/io/json_file.h"


#include <cstdint>
#include <stdexcept>

#include "data/files.h"

namespace lct {

Json read_json_file(const std::string& path) {
  const std::string text = read_document_file(path, "the JSON file");
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
