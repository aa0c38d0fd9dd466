#include "src/io/paths.h"

#include "src/io/output_files.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace fs = std::filesystem;

namespace lct {

namespace {

// Each input as the files a command reads: a folder also as every regular file under it
// (a Hugging Face folder's config.json, index and shards; a text corpus's files), so that
// an output inside an input folder is compared with the file it would replace.
NamedPaths expand_folders(const NamedPaths& inputs) {
  NamedPaths out;
  for (const auto& [what, path] : inputs) {
    if (path.empty()) continue;
    out.emplace_back(what, path);
    std::error_code ec;
    if (!fs::is_directory(path, ec)) continue;
    for (fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec)) out.emplace_back(what, it->path().string());
  }
  return out;
}

}  // namespace

void refuse_aliasing(const NamedPaths& outputs, const NamedPaths& folder_inputs) {
  const NamedPaths inputs = expand_folders(folder_inputs);
  const auto same_file = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
    return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);  // not written yet
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [what, path] = outputs[i];
    if (path.empty()) continue;
    for (const auto& [in_what, in_path] : inputs)
      if (!in_path.empty() && same_file(path, in_path))
        throw std::invalid_argument(what + " '" + path + "' is the same file as " + in_what + " '" +
                                    in_path + "': writing it would destroy an input");
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[j].second.empty() && same_file(path, outputs[j].second))
        throw std::invalid_argument(what + " and " + outputs[j].first + " are the same file '" + path + "'");
  }
}

void check_outputs(const NamedPaths& outputs, const NamedPaths& inputs, const std::vector<std::string>& make_folder) {
  refuse_aliasing(outputs, inputs);
  for (const auto& [what, path] : outputs)
    if (!path.empty())
      require_writable_output(path, what, std::find(make_folder.begin(), make_folder.end(), what) != make_folder.end());
}

void refuse_run_folder_file(const std::string& what, const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty()) return;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  const fs::path d = fs::weakly_canonical(fs::absolute(dir), ec);
  const bool same_dir = fs::exists(p.parent_path(), ec) && fs::exists(d, ec)
                            ? fs::equivalent(p.parent_path(), d, ec)
                            : p.parent_path() == d;
  if (!same_dir) return;
  const std::string name = p.filename().string();
  const std::string temp_of = temporary_target(name);  // an interrupted checkpoint write
  const std::string file = temp_of.empty() ? name : temp_of;
  const bool checkpoint = file.rfind("step_", 0) == 0 && file.ends_with(".h5");
  if (checkpoint || name == "metrics.jsonl" || name == "run.toml" || name == "run.lock")
    throw std::invalid_argument(what + " '" + path + "' is a file the run keeps in checkpoint.dir '" +
                                dir + "' (checkpoints, metrics.jsonl, run.toml, run.lock): choose another path");
}

}  // namespace lct
