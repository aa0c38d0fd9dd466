// Who owns checkpoint.dir. A run writes its identity (run id, config hash, seed, start
// time) to <dir>/run.toml before anything else and stamps every checkpoint with the run
// id (/trainer@run_id), so that
//   - a fresh run refuses a folder that holds another run's files (checkpoints,
//     metrics.jsonl, run.toml) unless checkpoint.overwrite = true, which removes them
//     first (resume continues the folder's own run instead);
//   - rotation (checkpoint.keep) only ever deletes this run's checkpoints, oldest first,
//     and never the one just written; files it cannot read are never touched.
// Checkpoints written before run ids existed have none: resuming from one adopts the
// folder's identity (or starts a new one).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lct {

struct RunIdentity {
  std::string run_id;       // 16 hex digits
  std::string config_hash;  // fnv1a64 of the run's resolved config
  int64_t seed = 0;
  std::string started;      // UTC, ISO 8601
};

// A fresh identity (random run id, the current time).
RunIdentity new_run_identity(const std::string& config_toml, int64_t seed);

// What a folder holds before a run writes to it.
struct RunFolderContents {
  std::vector<std::string> checkpoints;  // step_*.h5, oldest first
  bool has_metrics = false;
  std::optional<RunIdentity> owner;       // from run.toml (nullopt: none or unreadable)
  bool empty() const { return checkpoints.empty() && !has_metrics && !owner; }
};
RunFolderContents survey_run_folder(const std::string& dir);

// Throws ConfigError (one line naming the folder, its owner and the way out) when a run
// with `run_id` may not write to the folder: a fresh run (resumed = false) into a
// non-empty folder, or a resumed run into a folder that another run owns, unless
// `overwrite`. Read-only, so every rank reaches the same verdict.
void check_run_folder(const std::string& dir, const RunFolderContents& contents,
                      const std::string& run_id, bool resumed, bool overwrite);

// Takes the folder (one rank): with `overwrite` removes the other run's checkpoints,
// metrics.jsonl and run.toml first; then writes run.toml durably. Returns this run's
// checkpoints already in the folder (oldest first), for rotation, and how many files of
// another run it removed.
struct TakenRunFolder {
  std::vector<std::string> own_checkpoints;
  int64_t removed = 0;
};
TakenRunFolder take_run_folder(const std::string& dir, const RunFolderContents& contents,
                               const RunIdentity& identity, bool overwrite);

// `own`: this run's checkpoints, oldest first (from take_run_folder, kept up to date
// here). Adds `just_written` as the newest and deletes the oldest others until `keep`
// remain; never `just_written`, and never a file of another run or one that cannot be
// read (they are not in `own`).
void rotate_checkpoints(std::vector<std::string>& own, int64_t keep, const std::string& just_written);

// One writer per run folder: an advisory lock (flock) on <dir>/run.lock, held while the
// returned object lives (the folder is created if missing). A folder another live
// process holds is refused at once with ConfigError naming that process's pid and host.
// The lock file reads "<pid> <host> <token>": the token, random per lock, lets the
// other ranks of a job check that they see this very folder (lock_seen_in).
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::string& dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;
  const std::string& token() const { return token_; }

 private:
  int fd_ = -1;
  std::string token_;
};

// Whether <dir>/run.lock here holds `token`: false when this process sees another
// folder under that path (another host's disk) or none.
bool lock_seen_in(const std::string& dir, const std::string& token);

// Temporaries of interrupted checkpoint writes (step_*.h5.lct-XXXXXX, regular files, never
// symlinks; src/io/output_files.h) left in `dir` by a run that
// died mid-write: removed (call while holding the lock). Returns how many.
int remove_stale_temporaries(const std::string& dir);

}  // namespace lct
