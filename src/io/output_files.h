// How lct writes its outputs. A file is written so that it is either wholly there or
// not changed at all: the bytes go to a temporary file beside the target, are fsynced,
// and the temporary is renamed over the target (then the folder is fsynced). A file that
// grows line by line (metrics.jsonl) is an AppendFile.
//
// A temporary is always a new file, created exclusively (O_CREAT | O_EXCL, never through
// a symlink) under a name made unique when it is created (mkstemp): "<target>.lct-XXXXXX"
// with six random characters. So no file a user owns, no symlink of any name and no
// input of the command is ever opened for writing, truncated or removed by it; only the
// target itself is replaced, by the rename. A signal that ends the process (SIGINT,
// SIGTERM, SIGHUP, ...: src/util/signals.h) removes the temporaries it has open, so an
// interrupted command leaves its targets as they were and no "<target>.lct-*" beside them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace lct {

// A new, empty temporary file beside `target`, removed when this is destroyed unless
// commit() renamed it into place, and by a signal that ends the process meanwhile (it is
// in the process's registry of temporaries from its creation to its rename or removal:
// src/util/signals.h). Throws one line naming the folder when it cannot be created.
class TempFile {
 public:
  explicit TempFile(const std::string& target);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& name() const { return name_; }
  // Writes all of `data`, fsyncs and closes the file (throws one line naming the cause
  // and, when the disk is full, the free space).
  void write_all_and_close(const char* data, size_t size);
  // Renames the temporary over the target and fsyncs the folder.
  void commit();
  // Renames each of `files` over its target in turn, then fsyncs their folders; a signal
  // that ends the process sees either none of the renames or all of them (lct export's
  // model.safetensors and config.json). Throws at the first rename that fails (those
  // before it are done).
  static void commit_all(std::initializer_list<TempFile*> files);

 private:
  std::string target_, name_;
  int fd_ = -1;
  int entry_ = -1;  // in the registry of temporaries (src/util/signals.h)
  bool committed_ = false;
};

// The target a temporary's file name was made for ("<target>.lct-XXXXXX" -> "<target>"),
// or "" when `name` is no such name (for finding a run's interrupted checkpoint writes).
std::string temporary_target(const std::string& name);

// Writes `text` to `path` atomically as above. Refuses a `path` that exists and is not a
// regular file (a symlink, device, FIFO, socket or folder) before writing anything.
void write_text_atomically(const std::string& path, const std::string& text);

// Throws one line, before any work, when no file can be created beside `path` (its
// folder is missing, or with `make_folder` cannot be made, or is not writable) or when
// `path` exists and is not a regular file. `what` names the key or option. Creates and
// removes one temporary (and, with `make_folder`, the missing folders: trace.path).
void require_writable_output(const std::string& path, const std::string& what, bool make_folder = false);

// A regular file lct owns that grows by whole lines (metrics.jsonl): created with its
// first contents atomically (as write_text_atomically, so a symlink, FIFO or device of
// that name is refused, never written through or waited on), then appended to with
// checked writes. A line that cannot be written whole (a full disk) is cut off again, so
// the file never holds a partial line, and append throws one line naming the file and
// the free space.
class AppendFile {
 public:
  AppendFile() = default;
  AppendFile(const std::string& path, const std::string& first_contents);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;

  void append(const std::string& text);

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// "12.3 MiB free on /dir" for error messages about a failed write.
std::string free_space_text(const std::string& path);

}  // namespace lct
