#include "data/files.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace lct {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a folder";
  return "not a regular file";
}

// Opened without blocking (a FIFO with no writer would block in open itself), checked
// with fstat on that descriptor, then switched back to blocking reads.
int open_checked(const std::string& path, const std::string& what, struct stat& st) {
  const auto fail = [&](const std::string& why) {
    return std::runtime_error(what + " '" + path + "': " + why);
  };
  // named first (a socket cannot be opened, and opening a tty or tape has effects),
  // then checked again on the descriptor (the name may change in between)
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw fail(std::string("not a regular file (") + kind_of(st.st_mode) + ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw fail(std::string("cannot open (") + std::strerror(errno) + ")");
  const bool stat_failed = ::fstat(fd, &st) != 0;
  if (stat_failed || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw fail(stat_failed ? std::string("cannot stat")
                           : std::string("not a regular file (") + kind_of(st.st_mode) + ")");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  ::close(open_checked(path, what, st));
}

std::string read_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  const int fd = open_checked(path, what, st);
  std::string data(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  char extra = 0;
  const bool grew = got == data.size() && ::read(fd, &extra, 1) > 0;
  ::close(fd);
  if (got != data.size() || grew)
    throw std::runtime_error(what + " '" + path + "': changed while it was read (" +
                             std::to_string(data.size()) + " bytes at open, " +
                             std::to_string(got + (grew ? 1 : 0)) + (grew ? "+" : "") + " read)");
  return data;
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string fnv_text(uint64_t h) {
  return fmt::format("fnv1a64:{:016x}", h);
}

namespace {
uint64_t hash_file(const std::string& path, const std::string& what, uint64_t h) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(what + " '" + path + "': cannot open");
  std::vector<char> piece(size_t(1) << 20);
  while (in) {
    in.read(piece.data(), std::streamsize(piece.size()));
    h = fnv1a64(piece.data(), size_t(in.gcount()), h);
  }
  if (in.bad()) throw std::runtime_error(what + " '" + path + "': reading failed");
  return h;
}
}  // namespace

std::string content_hash(const std::string& path, const std::string& what) {
  uint64_t h = kFnvOffset;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string name = f.filename().string() + '\0';
      h = hash_file(f.string(), what, fnv1a64(name.data(), name.size(), h));
    }
  } else {
    h = hash_file(path, what, h);
  }
  return fnv_text(h);
}

void require_replaceable_output(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // a new path
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISLNK(st.st_mode) ? "a symbolic link" : kind_of(st.st_mode);
  throw std::runtime_error(what + " '" + path + "' is " + kind +
                           ", not a regular file: lct writes only regular files (give a new path "
                           "or a regular file)");
}

}  // namespace lct
