#include "src/train/rank_agreement.h"

#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "data/files.h"
#include "parallel/collectives.h"

namespace lct {
namespace {

std::vector<std::pair<std::string, std::string>> lines_of(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 3));
  }
  return out;
}

// Rank 0's verdict from every rank's (error, text): "" when all agree.
std::string verdict(const std::vector<std::string>& errors, const std::vector<std::string>& texts) {
  const int n = int(errors.size());
  for (int r = 0; r < n; ++r)
    if (!errors[size_t(r)].empty())
      return r == 0 ? errors[0] : "rank " + std::to_string(r) + " of " + std::to_string(n) + ": " + errors[size_t(r)];
  const auto mine = lines_of(texts[0]);
  for (int r = 1; r < n; ++r) {
    std::map<std::string, std::string> theirs;
    for (const auto& [k, v] : lines_of(texts[size_t(r)])) theirs[k] = v;
    for (const auto& [k, v] : mine) {
      const auto it = theirs.find(k);
      const std::string other = it == theirs.end() ? "(absent)" : it->second;
      if (other != v)
        return "ranks disagree: " + k + " = " + v + " on rank 0 but " + other + " on rank " +
               std::to_string(r) + " (every rank must run the same config and inputs)";
    }
    if (theirs.size() != mine.size())
      return "ranks disagree: rank " + std::to_string(r) + " has other settings than rank 0";
  }
  return "";
}

}  // namespace

void agree_across_ranks(const std::string& error, const std::string& text, int world) {
  if (world <= 1) {
    if (!error.empty()) throw ConfigError(error);
    return;
  }
  const std::vector<std::string> errors = gather_strings(error, MPI_COMM_WORLD);
  const std::vector<std::string> texts = gather_strings(text, MPI_COMM_WORLD);
  std::vector<std::string> shared(1);
  if (!errors.empty()) shared[0] = verdict(errors, texts);
  broadcast_strings(shared, MPI_COMM_WORLD);
  if (!shared[0].empty()) throw ConfigError(shared[0]);
}

std::string training_inputs_text(const std::string& config_lines, const std::string& data_path,
                                 const std::string& resume_checkpoint) {
  std::string t = config_lines;
  // what each rank reads, by content: files of one size may still differ
  const auto hash = [](const std::string& path, const char* what) {
    if (path.empty()) return std::string("none");
    try {
      return content_hash(path, what);
    } catch (const std::exception&) {
      return std::string("unreadable");
    }
  };
  t += "data file content = " + hash(data_path, "data.path") + "\n";
  t += "resume checkpoint = " + resume_checkpoint + "\n";
  t += "resume checkpoint content = " + hash(resume_checkpoint, "train.resume") + "\n";
  return t;
}

}  // namespace lct
