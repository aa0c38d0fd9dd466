#include "src/io/run_folder.h"

#include <fmt/format.h>
#include <fmt/chrono.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "data/files.h"
#include "src/io/checkpoint.h"
#include "src/config/config_text.h"
#include "src/config/sections.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"
#include "src/util/log.h"
#include "src/util/machine.h"

namespace fs = std::filesystem;

namespace lct {
namespace {
constexpr const char* kRunFile = "run.toml";

std::string run_file(const std::string& dir) { return (fs::path(dir) / kRunFile).string(); }

std::optional<RunIdentity> read_run_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  try {
    // a regular file, not a link (a FIFO would block, a link read a file lct does not own)
    if (fs::is_symlink(fs::symlink_status(path, ec))) return std::nullopt;
    const std::string text = read_document_file(path, "run.toml");
    check_toml_nesting(text, path);
    const toml::table t = toml::parse(text, path);
    RunIdentity id;
    id.run_id = t["run_id"].value_or(std::string());
    id.config_hash = t["config_hash"].value_or(std::string());
    id.seed = t["seed"].value_or(int64_t(0));
    id.started = t["started"].value_or(std::string());
    if (id.run_id.empty()) return std::nullopt;
    return id;
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable: the folder still counts as taken (see empty())
  }
}

std::string describe(const RunFolderContents& c) {
  std::string s;
  if (c.owner) s = "run " + c.owner->run_id + " started " + c.owner->started;
  if (!c.checkpoints.empty())
    s += (s.empty() ? "" : ", ") + std::to_string(c.checkpoints.size()) + " checkpoint(s), newest " +
         fs::path(c.checkpoints.back()).filename().string();
  else if (c.has_metrics)
    s += (s.empty() ? "" : ", ") + std::string("a metrics.jsonl");
  return s;
}

// The run id stamped in a checkpoint ("" when it has none or cannot be read).
std::string checkpoint_run_id(const std::string& path) {
  try {
    const H5File f = H5File::open_read(path);
    return f.attr_string("/trainer", "run_id").value_or(std::string());
  } catch (const std::exception&) {
    return "";
  }
}
}  // namespace

RunIdentity new_run_identity(const std::string& config_toml, int64_t seed) {
  RunIdentity id;
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^
                     uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  id.run_id = fmt::format("{:016x}", r);
  id.config_hash = checksum_text(config_toml.data(), config_toml.size());
  id.seed = seed;
  const std::time_t now = std::time(nullptr);
  id.started = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(now));
  return id;
}

RunFolderContents survey_run_folder(const std::string& dir) {
  RunFolderContents c;
  c.checkpoints = list_checkpoints(dir);
  std::error_code ec;
  c.has_metrics = fs::exists(fs::symlink_status(fs::path(dir) / "metrics.jsonl", ec));
  c.owner = read_run_file(run_file(dir));
  if (!c.owner && fs::exists(fs::symlink_status(run_file(dir), ec))) c.owner = RunIdentity{"(unreadable run.toml)", "", 0, "?"};
  return c;
}

void check_run_folder(const std::string& dir, const RunFolderContents& contents,
                      const std::string& run_id, bool resumed, bool overwrite) {
  if (overwrite || contents.empty()) return;
  if (!resumed)
    throw ConfigError("checkpoint.dir '" + dir + "' already holds a run (" + describe(contents) +
                      "): continue it with --train.resume auto, or replace it with "
                      "--checkpoint.overwrite true");
  if (contents.owner && contents.owner->run_id != run_id)
    throw ConfigError("checkpoint.dir '" + dir + "' belongs to another run (" + describe(contents) +
                      ") than the resumed checkpoint's (run " + run_id +
                      "): resume into another folder, or replace it with --checkpoint.overwrite true");
}

TakenRunFolder take_run_folder(const std::string& dir, const RunFolderContents& contents,
                               const RunIdentity& identity, bool overwrite) {
  fs::create_directories(dir);
  TakenRunFolder taken;
  // each checkpoint's run id, read once (the file is checksummed to read it)
  std::vector<std::string> previous;  // the folder's previous run's, as run.toml records it
  for (const std::string& p : contents.checkpoints) {
    const std::string id = checkpoint_run_id(p);
    if (id == identity.run_id) {
      taken.own_checkpoints.push_back(p);
    } else if (overwrite) {
      // an overwrite deletes only what the folder's record says the previous run wrote
      if (!id.empty() && contents.owner && id == contents.owner->run_id)
        previous.push_back(p);
      else
        throw ConfigError("checkpoint.dir '" + dir + "': --checkpoint.overwrite would delete " + p +
                          ", which no run recorded in this folder's run.toml wrote (" +
                          (id.empty() ? std::string("not an lct checkpoint, or one without a run id")
                                      : "run " + id) +
                          "): move it away first");
    }
  }
  for (const std::string& p : previous) taken.removed += fs::remove(p) ? 1 : 0;
  if (overwrite && (!contents.owner || contents.owner->run_id != identity.run_id)) {
    std::error_code ec;
    fs::remove(fs::path(dir) / "metrics.jsonl", ec);
  }
  write_text_atomically(run_file(dir), "# lct: the run that owns this folder (see checkpoint.overwrite)\n"
                                       "run_id = \"" + identity.run_id + "\"\nconfig_hash = \"" +
                                       identity.config_hash + "\"\nseed = " + std::to_string(identity.seed) +
                                       "\nstarted = \"" + identity.started + "\"\n");
  return taken;
}

void rotate_checkpoints(std::vector<std::string>& own, int64_t keep, const std::string& just_written) {
  own.erase(std::remove(own.begin(), own.end(), just_written), own.end());  // rewritten: now the newest
  // the one just written counts as the newest kept
  const size_t older = size_t(std::max<int64_t>(keep - 1, 0));
  while (own.size() > older) {
    std::error_code ec;
    fs::remove(own.front(), ec);
    if (ec) log_warn("checkpoint.keep: cannot remove " + own.front() + ": " + ec.message());
    own.erase(own.begin());
  }
  own.push_back(just_written);
}

namespace {

// run.lock's text, "<pid> <host> <token>\n" (lct before hosts wrote the pid alone); read
// by a second run (who holds the folder) and by a job's other ranks (do they see it)
struct LockText {
  std::string pid = "unknown", host, token;
};
LockText parse_lock_text(const std::string& text) {
  LockText t;
  std::istringstream fields(text);
  fields >> t.pid >> t.host >> t.token;
  return t;
}

}  // namespace

RunFolderLock::RunFolderLock(const std::string& dir) {
  fs::create_directories(dir);
  const std::string path = (fs::path(dir) / "run.lock").string();
  // never through a symlink, never waiting on a FIFO: the lock is a regular file lct owns
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw ConfigError("checkpoint.dir: cannot open the lock file '" + path + "': " +
                      (err == ELOOP ? std::string("it is a symbolic link (remove it)") : std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw ConfigError("checkpoint.dir: the lock file '" + path + "' is not a regular file (remove it)");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string text(512, '\0');
    const ssize_t n = ::pread(fd_, text.data(), text.size(), 0);
    text.resize(n > 0 ? size_t(n) : 0);
    const LockText holder = parse_lock_text(text);
    ::close(fd_);
    fd_ = -1;
    throw ConfigError("checkpoint.dir '" + dir + "' is in use by another lct run (pid " + holder.pid +
                      (holder.host.empty() ? "" : " on " + holder.host) +
                      "): two runs writing one folder would overwrite each other's checkpoints");
  }
  std::random_device random;
  for (int i = 0; i < 4; ++i) token_ += fmt::format("{:08x}", random());
  const std::string me = std::to_string(::getpid()) + " " + host_name() + " " + token_ + "\n";
  // (the lock itself holds whatever is written; the text names this run to a second one,
  // and its token is what the job's other ranks look for)
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw ConfigError("checkpoint.dir: cannot write the lock file '" + path + "': " + std::strerror(err));
  }
}

bool lock_seen_in(const std::string& dir, const std::string& token) {
  // read as every settings file is: a regular file of a bounded size (a FIFO put in its
  // place would block an ifstream, a huge file fill the memory), else not seen
  std::string text;
  try {
    text = read_document_file((fs::path(dir) / "run.lock").string(), "run.lock");
  } catch (const std::runtime_error&) {
    return false;
  }
  return !token.empty() && parse_lock_text(text).token == token;
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

int remove_stale_temporaries(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string target = temporary_target(name);
    if (target.rfind("step_", 0) == 0 && target.ends_with(".h5") && !e.is_symlink(ec) &&
        e.is_regular_file(ec))
      removed += fs::remove(e.path(), ec) ? 1 : 0;
  }
  return removed;
}

}  // namespace lct
