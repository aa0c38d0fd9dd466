#include "src/train/machine_cache.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "data/files.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"
#include "src/util/machine.h"

namespace lct {
namespace fs = std::filesystem;

namespace {
std::string cache_path(const std::string& file) {
  const std::string dir = cache_folder();
  return dir.empty() ? "" : (fs::path(dir) / file).string();
}
}  // namespace

std::optional<std::string> cached_text(const std::string& file, const std::function<bool(const std::string&)>& usable) {
  const std::string path = cache_path(file);
  if (path.empty() || !fs::is_regular_file(path)) return std::nullopt;
  try {
    std::string text = read_regular_file(path, "the cache file");
    if (usable(text)) return text;
  } catch (const std::exception&) {
    // unreadable: as if absent (measured_once measures again and replaces it)
  }
  return std::nullopt;
}

CachedMeasurement measured_once(const std::string& file, const std::function<bool(const std::string&)>& usable,
                                const std::function<std::string()>& measure) {
  const std::string path = cache_path(file);
  if (std::optional<std::string> text = cached_text(file, usable)) return {std::move(*text), "cached " + path};
  const auto t0 = std::chrono::steady_clock::now();
  CachedMeasurement c{measure(), ""};
  char took[48];
  std::snprintf(took, sizeof took, "measured now, %.1f s; ",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  c.where = std::string(took) + "not cached: no cache folder ($LCT_CACHE_DIR, $XDG_CACHE_HOME or $HOME)";
  if (!path.empty()) {
    try {
      fs::create_directories(fs::path(path).parent_path());
      write_text_atomically(path, c.text);
      c.where = std::string(took) + "cached in " + path;
    } catch (const std::exception& e) {
      c.where = std::string(took) + "not cached: " + e.what();
    }
  }
  return c;
}

}  // namespace lct
