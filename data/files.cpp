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

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

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

namespace {

std::string read_open_file(int fd, const struct stat& st, const std::string& path, const std::string& what);

}  // namespace

std::string read_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  const int fd = open_checked(path, what, st);
  return read_open_file(fd, st, path, what);
}

std::string read_document_file(const std::string& path, const std::string& what) {
  struct stat st {};
  const int fd = open_checked(path, what, st);
  if (int64_t(st.st_size) > kMaxDocumentBytes) {
    ::close(fd);
    throw std::runtime_error(what + " '" + path + "': " + std::to_string(st.st_size) +
                             " bytes, more than a settings file can be (" + std::to_string(kMaxDocumentBytes >> 20) +
                             " MiB)");
  }
  return read_open_file(fd, st, path, what);
}

namespace {

// The whole of an opened regular file, to its size at open time (closes `fd`).
std::string read_open_file(int fd, const struct stat& st, const std::string& path, const std::string& what) {
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

}  // namespace

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string fnv_text(uint64_t h) {
  return fmt::format("fnv1a64:{:016x}", h);
}

namespace {
constexpr uint64_t kP1 = 0x9e3779b185ebca87ULL, kP2 = 0xc2b2ae3d27d4eb4fULL, kP3 = 0x165667b19e3779f9ULL,
                   kP4 = 0x85ebca77c2b2ae63ULL, kP5 = 0x27d4eb2f165667c5ULL;
uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian machines only (x86-64, as lct's kernels)
  return v;
}
uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t xxh_round(uint64_t acc, uint64_t lane) { return rotl(acc + lane * kP2, 31) * kP1; }
void xxh_stripe(uint64_t* lanes, const unsigned char* p) {
  for (int i = 0; i < 4; ++i) lanes[i] = xxh_round(lanes[i], load64(p + 8 * i));
}

// The whole 32-byte stripes of [p, p + bytes). Under AddressSanitizer the range is checked
// once, before the loop, instead of at each 8-byte load: every rank hashes the lct binary
// (65 MB in the sanitizer build) at start: hashing was 6.7 % of a tiny 4-rank run's CPU
// samples with every load checked, 2.8 % with the range checked once. The loop reads
// exactly that range, so a bad range is still reported: by an instrumented read of its
// first unaddressable byte.
#ifdef __SANITIZE_ADDRESS__
__attribute__((no_sanitize("address")))
#endif
void xxh_stripes_unchecked(uint64_t* lanes, const unsigned char* p, size_t bytes) {
  // xxh_stripe written out: GCC does not inline a function into one with other
  // sanitizer attributes, and called, its loads would be checked again
  uint64_t a[4] = {lanes[0], lanes[1], lanes[2], lanes[3]};
  for (; bytes >= 32; p += 32, bytes -= 32)
    for (int i = 0; i < 4; ++i) {
      uint64_t lane;
      __builtin_memcpy(&lane, p + 8 * i, 8);
      const uint64_t x = a[i] + lane * kP2;
      a[i] = ((x << 31) | (x >> 33)) * kP1;
    }
  for (int i = 0; i < 4; ++i) lanes[i] = a[i];
}
size_t xxh_stripes(uint64_t* lanes, const unsigned char* p, size_t bytes) {
  const size_t whole = bytes / 32 * 32;
#ifdef __SANITIZE_ADDRESS__
  if (const void* bad = __asan_region_is_poisoned(const_cast<unsigned char*>(p), whole))
    (void)*static_cast<const volatile unsigned char*>(bad);
#endif
  xxh_stripes_unchecked(lanes, p, whole);
  return whole;
}

void hash_file(const std::string& path, const std::string& what, Xxh64& h) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(what + " '" + path + "': cannot open");
  std::vector<char> piece(size_t(1) << 20);
  while (in) {
    in.read(piece.data(), std::streamsize(piece.size()));
    h.update(piece.data(), size_t(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error(what + " '" + path + "': reading failed");
}
}  // namespace

void Xxh64::update(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (tail_bytes_ > 0) {  // complete the stripe begun by an earlier piece
    const size_t take = std::min(bytes, 32 - tail_bytes_);
    std::memcpy(tail_ + tail_bytes_, p, take);
    tail_bytes_ += take, p += take, bytes -= take;
    if (tail_bytes_ < 32) return;
    xxh_stripe(lanes_, tail_);
    tail_bytes_ = 0;
  }
  const size_t whole = xxh_stripes(lanes_, p, bytes);
  p += whole, bytes -= whole;
  std::memcpy(tail_, p, bytes);
  tail_bytes_ = bytes;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
    for (uint64_t lane : lanes_) h = (h ^ xxh_round(0, lane)) * kP1 + kP4;
  } else {
    h = lanes_[2] + kP5;  // the seed (0): no stripe was taken
  }
  h += total_;
  const unsigned char* p = tail_;
  size_t n = tail_bytes_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ xxh_round(0, load64(p)), 27) * kP1 + kP4;
  if (n >= 4) h = rotl(h ^ (uint64_t(load32(p)) * kP1), 23) * kP2 + kP3, p += 4, n -= 4;
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33, h *= kP2, h ^= h >> 29, h *= kP3, h ^= h >> 32;
  return h;
}

std::string content_hash(const std::string& path, const std::string& what) {
  Xxh64 h;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string name = f.filename().string() + '\0';
      h.update(name.data(), name.size());
      hash_file(f.string(), what, h);
    }
  } else {
    hash_file(path, what, h);
  }
  return fmt::format("xxh64:{:016x}", h.digest());
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
