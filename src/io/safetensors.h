// The safetensors format (Hugging Face's tensor files), read and written from its
// specification (https://github.com/huggingface/safetensors, "Format"):
//
//   8 bytes     N, the header's length, an unsigned little-endian 64-bit integer
//   N bytes     the header: a UTF-8 JSON object; each tensor's name maps to
//               {"dtype": "F32" | "BF16" | "F16" | ..., "shape": [d0, d1, ...],
//                "data_offsets": [begin, end]}, offsets in bytes relative to the data
//               that follows the header; the optional "__metadata__" maps strings to
//               strings. Writers may pad it with spaces.
//   the data    every tensor's bytes, little-endian, row-major, contiguous; the tensors
//               cover the data exactly, without holes or overlaps.
//
// Reading checks all of it before any tensor is read, and refuses in one line naming the
// file: a header length beyond the file or above 100 MB (the reference reader's limit),
// a header that is not a JSON object of such entries, a name given twice, a dtype lct
// does not read (it reads F32, BF16 and F16 as float32), a shape whose byte count is not
// its offsets', offsets past the data, overlapping, or leaving holes. Tensors are read
// with pread, one at a time, so a file larger than memory can be loaded tensor by tensor,
// and a file that shrinks while it is read is an error, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lct {

enum class SafetensorsDtype { f32, bf16, f16 };
const char* safetensors_dtype_name(SafetensorsDtype d);  // "F32", "BF16", "F16"
int64_t safetensors_dtype_bytes(SafetensorsDtype d);

struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets into the data
  int64_t numel() const;
};

constexpr int64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsFile {
 public:
  // Opens and validates `path` (see above); throws std::runtime_error "<path>: ...".
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // in the header's order
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's values as float32 (BF16 and F16 widened exactly) into out[numel].
  void read_f32(const SafetensorsEntry& e, float* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0, file_size_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Validates a header's JSON text against a data section of `data_bytes` bytes: the
// entries in the header's order and the metadata. Throws std::runtime_error (without a
// file name) on the first problem. The reader's checks, apart from the file's framing.
std::vector<SafetensorsEntry> parse_safetensors_header(const std::string& json, int64_t data_bytes,
                                                       std::map<std::string, std::string>& metadata);

// A tensor to write: float32 values stored as `dtype` (bf16 rounded to nearest even).
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;
};

// The bytes of a safetensors file holding `tensors` in this order, all in `dtype`, with
// `metadata` as "__metadata__" (omitted when empty); the header is padded with spaces to
// a multiple of 8 bytes, so every tensor starts 8-byte aligned.
std::string safetensors_bytes(const std::vector<SafetensorsTensor>& tensors, SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata);

}  // namespace lct
