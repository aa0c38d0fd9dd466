#include "src/tune/machine_cache.h"

#include <fmt/format.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "data/files.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"
#include "src/util/log.h"
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
  if (path.empty()) return std::nullopt;
  // no filesystem call that throws: a symlink loop, a folder or a FIFO in the cache folder
  // is an entry to ignore (with one warning) and measure again, not the run's end
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return std::nullopt;
  if (ec || st.type() != fs::file_type::regular) {
    log_warn("the cache entry " + path + " is not a regular file (" +
             (ec ? ec.message() : std::string("a folder, link or device")) + "): ignored, measured again");
    return std::nullopt;
  }
  try {
    std::string text = read_document_file(path, "the cache file");
    if (usable(text)) return text;
    log_warn("the cache entry " + path + " holds no usable measurement (unknown keys, or rates that are not finite "
             "and positive): ignored, measured again");
  } catch (const std::exception& e) {
    log_warn(std::string("the cache entry ") + e.what() + ": ignored, measured again");
  }
  return std::nullopt;
}

CachedMeasurement measured_once(const std::string& file, const std::function<bool(const std::string&)>& usable,
                                const std::function<std::string()>& measure) {
  const std::string path = cache_path(file);
  if (std::optional<std::string> text = cached_text(file, usable)) return {std::move(*text), "cached " + path};
  const auto t0 = std::chrono::steady_clock::now();
  CachedMeasurement c{measure(), ""};
  const std::string took =
      fmt::format("measured now, {:.1f} s; ", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  c.where = took + "not cached: no cache folder ($LCT_CACHE_DIR, $XDG_CACHE_HOME or $HOME)";
  if (!path.empty()) {
    try {
      fs::create_directories(fs::path(path).parent_path());
      write_text_atomically(path, c.text);
      c.where = took + "cached in " + path;
    } catch (const std::exception& e) {
      c.where = took + "not cached: " + e.what();
    }
  }
  return c;
}

}  // namespace lct
