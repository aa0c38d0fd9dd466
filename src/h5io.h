// Thin RAII helpers over the HDF5 C API: files, float/int datasets addressed by path
// (intermediate groups created on write), scalar and string attributes. Every failure
// throws std::runtime_error naming the file and the object; the HDF5 error stack
// printer is disabled so users see one line.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lct {

class H5File {
 public:
  static H5File create(const std::string& path);     // truncates
  static H5File open_read(const std::string& path);  // read-only
  static H5File open_rw(const std::string& path);    // read-write (tests, repairs)
  void remove(const std::string& object);             // unlink a dataset or group
  H5File(H5File&& o) noexcept : id_(o.id_), path_(std::move(o.path_)) { o.id_ = -1; }
  H5File& operator=(H5File&&) = delete;
  ~H5File();
  void close();
  hid_t id() const { return id_; }
  const std::string& path() const { return path_; }

  bool exists(const std::string& object) const;
  std::vector<int64_t> shape(const std::string& dataset) const;

  void write_f32(const std::string& dataset, const std::vector<int64_t>& shape, const float* data);
  void write_f64(const std::string& dataset, const std::vector<int64_t>& shape, const double* data);
  void write_i32(const std::string& dataset, const std::vector<int64_t>& shape, const int32_t* data);
  void write_i64(const std::string& dataset, const std::vector<int64_t>& shape, const int64_t* data);
  // A scalar variable-length UTF-8 string dataset (for text too long for an attribute).
  void write_string(const std::string& dataset, const std::string& text);
  std::string read_string(const std::string& dataset) const;
  // "float32", "float64", "int32", "int64", ... of a dataset's stored type.
  std::string dtype(const std::string& dataset) const;
  // Reads a dataset converting to the requested type; checks the element count.
  std::vector<float> read_f32(const std::string& dataset) const;
  std::vector<int32_t> read_i32(const std::string& dataset) const;
  std::vector<double> read_f64(const std::string& dataset) const;
  std::vector<int64_t> read_i64(const std::string& dataset) const;

  // Attributes on an object ("/" for the root, "/model" for a group), created if needed.
  void set_attr(const std::string& object, const std::string& name, int64_t value);
  void set_attr(const std::string& object, const std::string& name, double value);
  void set_attr(const std::string& object, const std::string& name, const std::string& value);
  std::optional<int64_t> attr_int(const std::string& object, const std::string& name) const;
  std::optional<double> attr_double(const std::string& object, const std::string& name) const;
  std::optional<std::string> attr_string(const std::string& object, const std::string& name) const;

 private:
  H5File(hid_t id, std::string path) : id_(id), path_(std::move(path)) {}
  void ensure_group(const std::string& group);
  void ensure_parent(const std::string& object);  // groups above a dataset path
  void write_raw(const std::string& dataset, const std::vector<int64_t>& shape, hid_t mem_type,
                 hid_t file_type, const void* data);
  hid_t id_ = -1;
  std::string path_;
};

// 64-bit FNV-1a over raw bytes, printed as "fnv1a64:<16 hex digits>": the per-tensor
// checksum stored in checkpoints (attribute `checksum` on each tensor dataset).
std::string checksum_text(const void* data, size_t bytes);

// Write to `path + ".tmp"` via `fill`, flush and close, then rename over `path`, so a
// crash never leaves a partial file where a good one was.
template <typename Fill>
void write_h5_atomically(const std::string& path, Fill fill);

}  // namespace lct

#include <cstdio>
#include <filesystem>

namespace lct {
template <typename Fill>
void write_h5_atomically(const std::string& path, Fill fill) {
  const std::string tmp = path + ".tmp";
  try {
    H5File f = H5File::create(tmp);
    fill(f);
    H5Fflush(f.id(), H5F_SCOPE_GLOBAL);
    f.close();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}
}  // namespace lct
