// Input files are what they claim to be: a regular file, checked on the opened
// descriptor (a FIFO would block forever, /dev/zero never end, a socket never open), and
// read to its size at open time, so a file that shrinks underneath is an error message,
// never a SIGBUS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lct {

// The whole of `path`; `what` names it in errors (e.g. "data.path"). Throws
// std::runtime_error: "what 'path': not a regular file (a FIFO)", "... cannot open
// (reason)", "... changed while it was read".
std::string read_regular_file(const std::string& path, const std::string& what);
// The largest settings document lct reads (a TOML config, run.toml, a CAD profile, a
// calibration, a machine cache, a JSON config or bench report): none is near 64 MiB, and
// a crafted 3 GiB one would otherwise be read whole into memory.
constexpr int64_t kMaxDocumentBytes = int64_t(64) << 20;
// read_regular_file, refused before reading when the file is larger than
// kMaxDocumentBytes: "what 'path': 3221225472 bytes, more than a settings file can be (64 MiB)".
std::string read_document_file(const std::string& path, const std::string& what);
// Throws the same errors when `path` is not a regular file, without reading it (for
// files another library opens by name, e.g. HDF5).
void require_regular_file(const std::string& path, const std::string& what);

// FNV-1a 64 over raw bytes, continued from `h`: the hash of what lct writes and checks
// when it reads it back (checkpoint seals and tensor checksums, src/io/h5io.h), and its
// text "fnv1a64:<16 hex digits>".
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnvOffset);
std::string fnv_text(uint64_t h);

// XXH64 (seed 0) over a stream of bytes given in pieces of any size: the same value as
// over their concatenation at once. Four independent multiply-rotate lanes over 8-byte
// words, a fraction of a cycle a byte, where FNV-1a's chain of a multiply a byte takes
// about 4 cycles: every rank hashes its inputs and the lct binary (82 MB in the sanitizer
// build) at start. Never stored: only compared between the ranks of one run.
class Xxh64 {
 public:
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  uint64_t lanes_[4] = {0x60ea27eeadc0b5d6ULL, 0xc2b2ae3d27d4eb4fULL, 0, 0x61c8864e7a143579ULL};
  unsigned char tail_[32] = {};
  size_t tail_bytes_ = 0;
  uint64_t total_ = 0;
};

// "xxh64:<16 hex digits>" of what lct reads at `path`: a regular file's bytes, or a
// folder's regular files (sorted by name; names and bytes). Ranks compare it to know they
// read the same data, not only files of the same size. Throws like read_regular_file.
std::string content_hash(const std::string& path, const std::string& what);

// Outputs go to a new path or replace a regular file; never a symlink (the link would
// be replaced, not what it names), a folder, a device, a FIFO or a socket (as root,
// renaming over /dev/null would replace it). Throws std::runtime_error naming `what`.
void require_replaceable_output(const std::string& path, const std::string& what);

}  // namespace lct
