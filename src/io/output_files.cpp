#include "src/io/output_files.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

#include "data/files.h"
#include "src/util/machine.h"
#include "src/util/signals.h"

namespace lct {

namespace {
constexpr const char* kTempMark = ".lct-";
constexpr size_t kTempRandom = 6;  // mkstemp's XXXXXX

// The folder a file is (to be) written in.
std::filesystem::path folder_of(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// A rename is durable once the folder holding it is synced.
void sync_folder(const std::string& path) {
  const std::filesystem::path dir = folder_of(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(dir.string() + ": cannot open the folder to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error(dir.string() + ": fsync of the folder failed: " + std::strerror(err));
}

// Writes all of `data` to `fd` (retrying interrupted and short writes); 0, or the errno
// of the write that failed (ENOSPC for a write of nothing).
int write_fully(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    done += size_t(n);
  }
  return 0;
}

// "path: what: reason", with the free space when the disk is full.
std::runtime_error write_failure(const std::string& path, const char* what, int err) {
  std::string msg = path + ": " + what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) msg += " (" + free_space_text(path) + ")";
  return std::runtime_error(msg);
}
}  // namespace

std::string free_space_text(const std::string& path) {
  const std::filesystem::path dir = folder_of(path);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return "free space on " + dir.string() + " unknown";
  const double bytes = double(st.f_bavail) * double(st.f_frsize);
  // a full disk has less than a MiB left: say how much in KiB
  return (bytes < 1048576.0 ? fmt::format("{:.0f} KiB", bytes / 1024.0) : bytes_text(bytes)) + " free on " + dir.string();
}

TempFile::TempFile(const std::string& target) : target_(target) {
  std::vector<char> name(target.begin(), target.end());
  const std::string mark = std::string(kTempMark) + std::string(kTempRandom, 'X');
  name.insert(name.end(), mark.begin(), mark.end());
  name.push_back('\0');
  // a signal that would end the process removes the temporary first (src/util/signals.h)
  install_temporary_cleanup();
  int err = 0;
  {
    // the file and its registry entry appear together for a signal handler
    TemporaryRegistryLock lock;
    // mkstemp: O_CREAT | O_EXCL (an existing name, symlinks included, is never opened)
    fd_ = ::mkostemp(name.data(), O_CLOEXEC);
    err = errno;
    if (fd_ >= 0) entry_ = lock.add(name.data());
  }
  if (fd_ < 0)
    throw std::runtime_error(folder_of(target).string() + ": cannot create a file to write '" + target +
                             "' in: " + std::strerror(err));
  name_ = name.data();
  ::fchmod(fd_, 0644);  // mkstemp makes 0600; lct's outputs are readable like any file
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (committed_) return;
  TemporaryRegistryLock lock;
  ::unlink(name_.c_str());
  lock.remove(entry_);
}

void TempFile::write_all_and_close(const char* data, size_t size) {
  if (const int err = write_fully(fd_, data, size)) throw write_failure(target_, "writing failed", err);
  if (::fsync(fd_) != 0) throw write_failure(target_, "fsync failed", errno);
  const int rc = ::close(fd_), err = errno;
  fd_ = -1;
  if (rc != 0) throw write_failure(target_, "closing failed", err);
}

void TempFile::commit() { commit_all({this}); }

void TempFile::commit_all(std::initializer_list<TempFile*> files) {
  {
    // renamed and forgotten together: a signal never removes a name after its rename,
    // and never comes between two of these renames
    TemporaryRegistryLock lock;
    for (TempFile* f : files) {
      if (std::rename(f->name_.c_str(), f->target_.c_str()) != 0) {
        const int err = errno;
        throw std::runtime_error("cannot rename '" + f->name_ + "' to '" + f->target_ + "': " + std::strerror(err));
      }
      lock.remove(f->entry_);
      f->committed_ = true;
    }
  }
  for (TempFile* f : files) sync_folder(f->target_);
}

std::string temporary_target(const std::string& name) {
  const size_t mark = std::strlen(kTempMark);
  if (name.size() <= mark + kTempRandom) return "";
  const size_t at = name.size() - kTempRandom - mark;
  return name.compare(at, mark, kTempMark) == 0 ? name.substr(0, at) : "";
}

void write_text_atomically(const std::string& path, const std::string& text) {
  require_replaceable_output(path, "output");
  TempFile tmp(path);
  tmp.write_all_and_close(text.data(), text.size());
  tmp.commit();
}

AppendFile::AppendFile(const std::string& path, const std::string& first_contents) : path_(path) {
  write_text_atomically(path, first_contents);
  // the file just renamed into place; O_NOFOLLOW and the type check hold if it was swapped
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  const bool opened = fd_ >= 0, stated = opened && ::fstat(fd_, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    const int err = stated ? 0 : errno;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(path + ": cannot open for appending: " +
                             (err ? std::strerror(err) : "not a regular file"));
  }
  size_ = int64_t(st.st_size);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_), fd_ = other.fd_, size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

void AppendFile::append(const std::string& text) {
  if (fd_ < 0) throw std::logic_error("AppendFile: not open");
  if (const int err = write_fully(fd_, text.data(), text.size())) {
    const bool cut = ::ftruncate(fd_, off_t(size_)) == 0;  // no partial line stays
    std::runtime_error failure = write_failure(path_, "writing failed", err);
    if (cut) throw failure;
    throw std::runtime_error(std::string(failure.what()) + "; the partial line could not be removed");
  }
  size_ += int64_t(text.size());
}

void require_writable_output(const std::string& path, const std::string& what, bool make_folder) {
  try {
    require_replaceable_output(path, what);
    std::error_code ec;
    const std::filesystem::path dir = folder_of(path);
    if (make_folder) std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create the folder '" + dir.string() + "': " + ec.message());
    if (!std::filesystem::is_directory(dir, ec))
      throw std::runtime_error("the folder '" + dir.string() + "' does not exist");
    TempFile probe(path);  // created, then removed
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    throw std::runtime_error(msg.rfind(what, 0) == 0 ? msg : what + ": " + msg);
  }
}

}  // namespace lct
