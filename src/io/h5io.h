// Thin RAII helpers over the HDF5 C API: files, float/int datasets addressed by path
// (intermediate groups created on write), scalar and string attributes. Every failure
// throws std::runtime_error naming the file and the object; the HDF5 error stack
// printer is disabled so users see one line.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace lct {

class H5File {
 public:
  static H5File create(const std::string& path);     // truncates
  static H5File open_read(const std::string& path);  // read-only
  static H5File open_rw(const std::string& path);    // read-write (tests, repairs); unseals
  // A file that lives in memory only (see write_h5_atomically); `name` names it in errors.
  static H5File create_in_memory(const std::string& name);
  // Read-only view of a file image held in memory (e.g. bytes to validate before they
  // reach the disk; the fuzz tests); the image is copied.
  static H5File open_image(const std::vector<char>& image, const std::string& name);
  // The whole file as bytes (flushed first), e.g. of an in-memory file, behind lct's
  // 512-byte user block: a checksum of the rest that open_read and open_image verify
  // before HDF5 parses anything (HDF5 1.10 can overrun its buffers on corrupt metadata;
  // HDF5 and h5py read such files as any file with a user block).
  std::vector<char> image() const;
  // Closes and reports whether HDF5 closed the file cleanly (the destructor cannot).
  void close_checked();
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

// Durable, atomic write of an HDF5 file. The file is built in memory (HDF5's core
// driver: HDF5 itself never touches the disk, so a full disk cannot leave it in a state
// that crashes its shutdown), then written with checked POSIX calls to a new temporary
// file beside `path` (src/io/output_files.h), fsynced, reopened from disk and checked by
// `verify` (size, and whatever the caller checks: checksums of every tensor), renamed
// over `path`, and the folder fsynced. On any failure the temporary file is removed,
// `path` and every other file are left as they were, and one line says what failed
// (naming the free space when the disk is full). Refuses a `path` that exists and is not
// a regular file before writing anything.
void write_h5_atomically(const std::string& path, const std::function<void(H5File&)>& fill,
                         const std::function<void(const H5File&)>& verify = {});

}  // namespace lct
