#include "src/train/rank_agreement.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "data/files.h"
#include "parallel/collectives.h"
#include "src/util/machine.h"

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

// What a disagreement on `key` asks for: on a cluster, each host has its own copy of the
// binary and may have its own disk.
std::string remedy(const std::string& key) {
  if (key == "lct binary") return "every rank must run the same lct build: install it alike on every host";
  if (key.rfind("resume checkpoint", 0) == 0)
    return "every rank reads the checkpoint it resumes from: every host must see checkpoint.dir on a shared "
           "file system";
  if (key == "data file content") return "every rank reads the data: every host must see the same data.path";
  if (key == "init_from content")
    return "every rank reads the model it starts from: every host must see the same train.init_from";
  return "every rank must run the same config and inputs";
}

// Rank 0's verdict from every rank's (error, text): "" when all agree.
std::string verdict(const std::vector<std::string>& errors, const std::vector<std::string>& texts,
                    const RankHosts& hosts) {
  const int n = int(errors.size());
  for (int r = 0; r < n; ++r)
    if (!errors[size_t(r)].empty()) {
      if (r == 0) return errors[0];
      std::string who = "rank " + std::to_string(r) + " of " + std::to_string(n);
      if (hosts.count() > 1) who += " (" + hosts.names[size_t(r)] + ")";
      return who + ": " + errors[size_t(r)];
    }
  const auto mine = lines_of(texts[0]);
  for (int r = 1; r < n; ++r) {
    std::map<std::string, std::string> theirs;
    for (const auto& [k, v] : lines_of(texts[size_t(r)])) theirs[k] = v;
    for (const auto& [k, v] : mine) {
      const auto it = theirs.find(k);
      const std::string other = it == theirs.end() ? "(absent)" : it->second;
      if (other != v)
        return "ranks disagree: " + k + " = " + v + " on " + hosts.rank(0) + " but " + other + " on " +
               hosts.rank(r) + " (" + remedy(k) + ")";
    }
    if (theirs.size() != mine.size())
      return "ranks disagree: " + hosts.rank(r) + " has other settings than " + hosts.rank(0);
  }
  return "";
}

}  // namespace

int RankHosts::count() const {
  std::vector<std::string> distinct = names;
  std::sort(distinct.begin(), distinct.end());
  return int(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
}

std::string RankHosts::rank(int r) const {
  std::string s = "rank " + std::to_string(r);
  if (count() > 1 && r >= 0 && size_t(r) < names.size()) s += " (" + names[size_t(r)] + ")";
  return s;
}

std::string RankHosts::describe() const {
  // hosts in order of their first rank, each with its ranks as ranges
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks;
  for (size_t r = 0; r < names.size(); ++r) {
    if (ranks.find(names[r]) == ranks.end()) order.push_back(names[r]);
    ranks[names[r]].push_back(int(r));
  }
  std::string out;
  for (const std::string& host : order) {
    const std::vector<int>& rs = ranks[host];
    std::string list;
    for (size_t i = 0; i < rs.size();) {
      size_t j = i;
      while (j + 1 < rs.size() && rs[j + 1] == rs[j] + 1) ++j;
      if (!list.empty()) list += ",";
      list += std::to_string(rs[i]) + (j > i ? "-" + std::to_string(rs[j]) : "");
      i = j + 1;
    }
    if (!out.empty()) out += ", ";
    out += host + " (rank" + (rs.size() > 1 ? "s " : " ") + list + ")";
  }
  return out;
}

RankHosts gather_rank_hosts(int world) {
  return {world > 1 ? allgather_strings(host_name(), MPI_COMM_WORLD) : std::vector<std::string>{host_name()}};
}

std::string binary_identity_line() {
  static const std::string line = [] {
    std::string hash;
    try {
      hash = content_hash("/proc/self/exe", "the lct binary");
    } catch (const std::exception&) {
      hash = "unreadable";
    }
    return "lct binary = " + hash + "\n";
  }();
  return line;
}

void agree_across_ranks(const std::string& error, const std::string& text, int world) {
  if (world <= 1) {
    if (!error.empty()) throw ConfigError(error);
    return;
  }
  const std::vector<std::string> errors = gather_strings(error, MPI_COMM_WORLD);
  const std::vector<std::string> texts = gather_strings(text, MPI_COMM_WORLD);
  const RankHosts hosts{gather_strings(host_name(), MPI_COMM_WORLD)};
  std::vector<std::string> shared(1);
  if (!errors.empty()) shared[0] = verdict(errors, texts, hosts);
  broadcast_strings(shared, MPI_COMM_WORLD);
  if (!shared[0].empty()) throw ConfigError(shared[0]);
}

std::string training_inputs_text(const std::string& config_lines, const std::string& data_path,
                                 const std::string& resume_checkpoint, const std::string& init_from) {
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
  t += "init_from content = " + hash(init_from, "train.init_from") + "\n";
  return t;
}

}  // namespace lct
