#include "src/io/h5io.h"
#include "src/io/output_files.h"
#include "data/files.h"
#include "src/util/machine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace lct {
namespace {

struct H5ErrorsOff {
  H5ErrorsOff() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const H5ErrorsOff h5_errors_off;

// Closes an HDF5 handle of any kind at scope exit.
struct Handle {
  hid_t id;
  herr_t (*closer)(hid_t);
  ~Handle() {
    if (id >= 0) closer(id);
  }
};

std::runtime_error h5_error(const std::string& file, const std::string& what) {
  return std::runtime_error(file + ": " + what);
}

// Reads one variable-length string stored with type `stored`; `read(mem_type, &ptr)`
// is H5Dread or H5Aread. nullopt when the read fails.
template <typename Read>
std::optional<std::string> read_vlen_string(hid_t stored, Read read) {
  Handle mt{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(mt.id, H5T_VARIABLE);
  H5Tset_cset(mt.id, H5Tget_cset(stored));  // HDF5 will not convert ASCII <-> UTF-8
  char* p = nullptr;
  if (read(mt.id, &p) < 0) return std::nullopt;
  std::string out = p ? p : "";
  H5free_memory(p);
  return out;
}

}  // namespace

H5File H5File::create(const std::string& path) {
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw h5_error(path, "cannot create HDF5 file");
  return H5File(id, path);
}

namespace {
// lct's files carry a 512-byte HDF5 user block (which HDF5 skips and h5py reads through)
// holding a checksum of everything after it: a file that was truncated or had a bit
// flipped is refused before HDF5 parses it (HDF5 1.10 can overrun its buffers on
// corrupt metadata). Layout: "lct-hdf5-checksum 1\n<bytes after the block>\n<fnv1a64>\n".
constexpr size_t kUserBlock = 512;
constexpr const char kUserBlockMagic[] = "lct-hdf5-checksum 1\n";

constexpr size_t kMagicSize = sizeof(kUserBlockMagic) - 1;
bool is_sealed(const char* data, size_t size) {
  return size >= kMagicSize && std::memcmp(data, kUserBlockMagic, kMagicSize) == 0;
}

// Writes the block in front of an image that starts kUserBlock bytes into `file` (HDF5
// finds the superblock at offset 512 and reads every address relative to it).
void seal(std::vector<char>& file) {
  const size_t body = file.size() - kUserBlock;
  const std::string text = std::string(kUserBlockMagic) + std::to_string(body) + "\n" +
                           fnv_text(fnv1a64(file.data() + kUserBlock, body)) + "\n";
  std::fill(file.begin(), file.begin() + kUserBlock, '\0');
  std::copy(text.begin(), text.end(), file.begin());
}

// The length and checksum a sealed file's block records.
struct Seal {
  std::string length, sum;
};
Seal read_seal(const char* head, size_t size, const std::string& name) {
  const std::string text(head, std::min(size, kUserBlock));
  const size_t nl = text.find('\n', kMagicSize), nl2 = nl == std::string::npos ? nl : text.find('\n', nl + 1);
  if (nl2 == std::string::npos) throw h5_error(name, "corrupt lct file header");
  return {text.substr(kMagicSize, nl - kMagicSize), text.substr(nl + 1, nl2 - nl - 1)};
}

// Checks a file of `size` bytes whose body (after the block) hashes to `body_hash`
// against its seal.
// A seal describes the file it was written with. A file of another length is not that
// file: a tool such as h5repack rewrote it (and copied the user block), or it was cut
// short. Either way the seal says nothing about it, and the file is checked as any file
// without one: HDF5 refuses a truncated file from its own superblock before it reads
// anything else, and every dataset's checksum is verified after. A file of the sealed
// length must match the checksum: that is where a flipped byte hides.
void check_seal(const Seal& seal, size_t size, uint64_t body_hash, const std::string& name) {
  if (size < kUserBlock || seal.length != std::to_string(size - kUserBlock)) return;
  if (fnv_text(body_hash) != seal.sum) throw h5_error(name, "the file's checksum does not match (corrupt)");
}

// Checks a sealed image (a no-op for files without lct's user block, e.g. from h5py).
void check_user_block(const char* data, size_t size, const std::string& name) {
  if (!is_sealed(data, size)) return;
  const Seal s = read_seal(data, size, name);
  check_seal(s, size, size < kUserBlock ? 0 : fnv1a64(data + kUserBlock, size - kUserBlock), name);
}

// The same for a file on disk, read in 1 MiB pieces (never a second copy of the file).
void check_user_block_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[kUserBlock] = {};
  in.read(head, kUserBlock);
  const size_t got = size_t(in.gcount());
  if (!is_sealed(head, got)) return;
  const Seal s = read_seal(head, got, path);
  uint64_t h = kFnvOffset;
  size_t size = got;
  std::vector<char> piece(size_t(1) << 20);
  while (in) {
    in.read(piece.data(), std::streamsize(piece.size()));
    h = fnv1a64(piece.data(), size_t(in.gcount()), h);
    size += size_t(in.gcount());
  }
  check_seal(s, size, h, path);
}
}  // namespace

H5File H5File::create_in_memory(const std::string& name) {
  Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  // grow in 4 MiB steps, never write a backing file
  if (fapl.id < 0 || H5Pset_fapl_core(fapl.id, size_t(4) << 20, false) < 0)
    throw h5_error(name, "cannot set up an in-memory HDF5 file");
  const hid_t id = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id);
  if (id < 0) throw h5_error(name, "cannot create an in-memory HDF5 file");
  return H5File(id, name);
}

H5File H5File::open_image(const std::vector<char>& image, const std::string& name) {
  check_user_block(image.data(), image.size(), name);
  Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  if (fapl.id < 0 || H5Pset_fapl_core(fapl.id, size_t(1) << 20, false) < 0 ||
      H5Pset_file_image(fapl.id, const_cast<char*>(image.data()), image.size()) < 0)
    throw h5_error(name, "cannot set up an in-memory HDF5 file");
  const hid_t id = H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl.id);
  if (id < 0) throw h5_error(name, "not a readable HDF5 file (truncated or corrupt?)");
  return H5File(id, name);
}

std::vector<char> H5File::image() const {
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) throw h5_error(path_, "cannot flush the HDF5 file");
  const ssize_t size = H5Fget_file_image(id_, nullptr, 0);
  if (size < 0) throw h5_error(path_, "cannot take the HDF5 file image");
  std::vector<char> file(kUserBlock + static_cast<size_t>(size));  // the image goes behind the block
  if (H5Fget_file_image(id_, file.data() + kUserBlock, size_t(size)) != size)
    throw h5_error(path_, "cannot take the HDF5 file image");
  seal(file);
  return file;
}

void H5File::close_checked() {
  const hid_t id = id_;
  id_ = -1;
  if (id >= 0 && H5Fclose(id) < 0) throw h5_error(path_, "closing the HDF5 file failed");
}

H5File H5File::open_read(const std::string& path) {
  if (!std::filesystem::exists(path)) throw h5_error(path, "no such file");
  require_regular_file(path, "HDF5 file");  // a FIFO or device would block or never end below
  check_user_block_of(path);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw h5_error(path, "not a readable HDF5 file (truncated or corrupt?)");
  return H5File(id, path);
}

H5File H5File::open_rw(const std::string& path) {
  // a file changed in place is no longer the file its checksum describes: drop the seal
  // (the file stays a valid HDF5 file with a user block, checked as any unsealed file)
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    char magic[kMagicSize] = {};
    if (io.read(magic, kMagicSize) && is_sealed(magic, kMagicSize)) {
      io.seekp(0);
      const std::string unsealed(kMagicSize, ' ');
      io.write(unsealed.data(), std::streamsize(unsealed.size()));
    }
  }
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0) throw h5_error(path, "cannot open HDF5 file for writing");
  return H5File(id, path);
}

void H5File::remove(const std::string& object) {
  if (H5Ldelete(id_, object.c_str(), H5P_DEFAULT) < 0) throw h5_error(path_, "cannot remove " + object);
}

H5File::~H5File() { close(); }

void H5File::close() {
  if (id_ >= 0) H5Fclose(id_);
  id_ = -1;
}

bool H5File::exists(const std::string& object) const {
  if (object == "/") return true;
  // every prefix must exist for H5Lexists to be meaningful
  size_t pos = 1;
  while (true) {
    pos = object.find('/', pos);
    const std::string prefix = object.substr(0, pos);
    if (H5Lexists(id_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    // a soft link can point anywhere in the file, an external link into another file
    // (which HDF5 would open, FIFOs and devices included): lct reads only hard links
    H5L_info_t info{};
    if (H5Lget_info(id_, prefix.c_str(), &info, H5P_DEFAULT) < 0)
      throw h5_error(path_, "cannot read the link " + prefix + " (corrupt?)");
    if (info.type != H5L_TYPE_HARD)
      throw h5_error(path_, prefix + " is " + (info.type == H5L_TYPE_SOFT ? "a soft" : info.type == H5L_TYPE_EXTERNAL ? "an external" : "a user-defined") +
                                " link: lct reads only objects stored in the file itself");
    if (pos == std::string::npos) return true;
    ++pos;
  }
}

void H5File::ensure_group(const std::string& group) {
  if (group.empty() || group == "/" || exists(group)) return;
  const size_t slash = group.rfind('/');
  if (slash != std::string::npos && slash > 0) ensure_group(group.substr(0, slash));
  Handle g{H5Gcreate2(id_, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  if (g.id < 0) throw h5_error(path_, "cannot create group " + group);
}

std::vector<int64_t> H5File::shape(const std::string& dataset) const {
  if (!exists(dataset)) throw h5_error(path_, "missing dataset " + dataset);
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) throw h5_error(path_, dataset + " is not a dataset");
  Handle s{H5Dget_space(d.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(s.id);
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)));
  H5Sget_simple_extent_dims(s.id, dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

void H5File::ensure_parent(const std::string& object) {
  const size_t slash = object.rfind('/');
  if (slash != std::string::npos && slash > 0) ensure_group(object.substr(0, slash));
}

void H5File::write_raw(const std::string& dataset, const std::vector<int64_t>& shape,
                       hid_t mem_type, hid_t file_type, const void* data) {
  ensure_parent(dataset);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle s{H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose};
  Handle d{H5Dcreate2(id_, dataset.c_str(), file_type, s.id, H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           H5Dclose};
  if (d.id < 0) throw h5_error(path_, "cannot create dataset " + dataset);
  if (H5Dwrite(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw h5_error(path_, "cannot write dataset " + dataset);
}

void H5File::write_i64(const std::string& ds, const std::vector<int64_t>& shape, const int64_t* data) {
  write_raw(ds, shape, H5T_NATIVE_INT64, H5T_STD_I64LE, data);
}

void H5File::write_string(const std::string& ds, const std::string& text) {
  ensure_parent(ds);
  Handle t{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(t.id, H5T_VARIABLE);
  H5Tset_cset(t.id, H5T_CSET_UTF8);
  Handle s{H5Screate(H5S_SCALAR), H5Sclose};
  Handle d{H5Dcreate2(id_, ds.c_str(), t.id, s.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  const char* p = text.c_str();
  if (d.id < 0 || H5Dwrite(d.id, t.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) < 0)
    throw h5_error(path_, "cannot write dataset " + ds);
}

std::string H5File::read_string(const std::string& ds) const {
  if (!exists(ds)) throw h5_error(path_, "missing dataset " + ds);
  Handle d{H5Dopen2(id_, ds.c_str(), H5P_DEFAULT), H5Dclose};
  Handle t{H5Dget_type(d.id), H5Tclose};
  if (d.id < 0 || H5Tget_class(t.id) != H5T_STRING || H5Tis_variable_str(t.id) <= 0)
    throw h5_error(path_, ds + " is not a string dataset");
  Handle space{H5Dget_space(d.id), H5Sclose};
  const hssize_t values = space.id < 0 ? -1 : H5Sget_simple_extent_npoints(space.id);
  if (values != 1)
    throw h5_error(path_, ds + " holds " + std::to_string(values) + " strings, not one");
  const auto text = read_vlen_string(t.id, [&](hid_t mt, char** p) {
    return H5Dread(d.id, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, p);
  });
  if (!text) throw h5_error(path_, "cannot read dataset " + ds + " (corrupt?)");
  return *text;
}

std::string H5File::dtype(const std::string& ds) const {
  if (!exists(ds)) throw h5_error(path_, "missing dataset " + ds);
  Handle d{H5Dopen2(id_, ds.c_str(), H5P_DEFAULT), H5Dclose};
  Handle t{H5Dget_type(d.id), H5Tclose};
  const size_t bits = H5Tget_size(t.id) * 8;
  switch (H5Tget_class(t.id)) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER:
      return (H5Tget_sign(t.id) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING: return "string";
    default: return "other";
  }
}

std::string checksum_text(const void* data, size_t bytes) { return fnv_text(fnv1a64(data, bytes)); }

void H5File::write_f32(const std::string& ds, const std::vector<int64_t>& shape, const float* data) {
  write_raw(ds, shape, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, data);
}
void H5File::write_f64(const std::string& ds, const std::vector<int64_t>& shape, const double* data) {
  write_raw(ds, shape, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, data);
}
void H5File::write_i32(const std::string& ds, const std::vector<int64_t>& shape, const int32_t* data) {
  write_raw(ds, shape, H5T_NATIVE_INT32, H5T_STD_I32LE, data);
}

namespace {
template <typename T>
std::vector<T> read_as(const H5File& f, const std::string& dataset, hid_t mem_type) {
  const std::vector<int64_t> shp = f.shape(dataset);
  double n_checked = 1;
  for (int64_t d : shp) n_checked *= double(d);
  // a crafted shape must end in one line, not in bad_alloc
  if (n_checked * sizeof(T) > available_memory(1).bytes)
    throw h5_error(f.path(), dataset + " claims " + std::to_string(int64_t(n_checked)) + " elements (" +
                                 bytes_text(n_checked * sizeof(T)) + "), more than the memory available");
  const int64_t n = int64_t(n_checked);
  std::vector<T> out(static_cast<size_t>(n));
  Handle d{H5Dopen2(f.id(), dataset.c_str(), H5P_DEFAULT), H5Dclose};
  Handle t{H5Dget_type(d.id), H5Tclose};
  const H5T_class_t cls = H5Tget_class(t.id);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER)
    throw h5_error(f.path(), dataset + " is not numeric");
  if (n > 0 && H5Dread(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw h5_error(f.path(), "cannot read dataset " + dataset + " (corrupt?)");
  return out;
}
}  // namespace

std::vector<float> H5File::read_f32(const std::string& ds) const {
  return read_as<float>(*this, ds, H5T_NATIVE_FLOAT);
}
std::vector<int32_t> H5File::read_i32(const std::string& ds) const {
  return read_as<int32_t>(*this, ds, H5T_NATIVE_INT32);
}
std::vector<double> H5File::read_f64(const std::string& ds) const {
  return read_as<double>(*this, ds, H5T_NATIVE_DOUBLE);
}

namespace {
hid_t open_object(const H5File& f, const std::string& object) {
  const hid_t o = H5Oopen(f.id(), object.c_str(), H5P_DEFAULT);
  if (o < 0) throw h5_error(f.path(), "missing object " + object);
  return o;
}
void write_attr(H5File& f, const std::string& object, const std::string& name, hid_t type,
                const void* value) {
  Handle o{open_object(f, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) > 0) H5Adelete(o.id, name.c_str());
  Handle s{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(o.id, name.c_str(), type, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0 || H5Awrite(a.id, type, value) < 0)
    throw h5_error(f.path(), "cannot write attribute " + object + "@" + name);
}
}  // namespace

void H5File::set_attr(const std::string& object, const std::string& name, int64_t value) {
  ensure_group(object);
  write_attr(*this, object, name, H5T_NATIVE_INT64, &value);
}
void H5File::set_attr(const std::string& object, const std::string& name, double value) {
  ensure_group(object);
  write_attr(*this, object, name, H5T_NATIVE_DOUBLE, &value);
}
void H5File::set_attr(const std::string& object, const std::string& name,
                      const std::string& value) {
  ensure_group(object);
  Handle t{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(t.id, H5T_VARIABLE);
  H5Tset_cset(t.id, H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_attr(*this, object, name, t.id, &p);
}

namespace {
// An attribute lct reads as one value must hold exactly one (a crafted array would be
// read past the one value's memory).
void require_one_value(const H5File& f, hid_t attr, const std::string& what) {
  Handle s{H5Aget_space(attr), H5Sclose};
  const hssize_t n = s.id < 0 ? -1 : H5Sget_simple_extent_npoints(s.id);
  if (n != 1)
    throw h5_error(f.path(), "attribute " + what + " holds " + (n < 0 ? std::string("an unreadable number of") : std::to_string(n)) +
                                 " values, not one");
}

// A fixed-length string of more than this is not one lct wrote (it would only be
// allocated to be refused later).
constexpr size_t kMaxStringBytes = size_t(64) << 20;

// Opens attribute `name` on `object`, or returns -1 when either is absent.
hid_t open_attr(const H5File& f, const std::string& object, const std::string& name) {
  if (!f.exists(object)) return -1;
  Handle o{open_object(f, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) <= 0) return -1;
  return H5Aopen(o.id, name.c_str(), H5P_DEFAULT);
}
}  // namespace

std::optional<int64_t> H5File::attr_int(const std::string& object, const std::string& name) const {
  Handle a{open_attr(*this, object, name), H5Aclose};
  if (a.id < 0) return std::nullopt;
  Handle t{H5Aget_type(a.id), H5Tclose};
  const H5T_class_t cls = H5Tget_class(t.id);
  if (cls != H5T_INTEGER && cls != H5T_ENUM)  // h5py stores bools as an enum
    throw h5_error(path_, "attribute " + object + "@" + name + " is not an integer");
  require_one_value(*this, a.id, object + "@" + name);
  int64_t v = 0;
  if (cls == H5T_ENUM) {
    int8_t b = 0;
    if (H5Aread(a.id, H5T_NATIVE_INT8, &b) < 0) throw h5_error(path_, "cannot read " + object + "@" + name);
    return int64_t(b);
  }
  if (H5Aread(a.id, H5T_NATIVE_INT64, &v) < 0) throw h5_error(path_, "cannot read " + object + "@" + name);
  return v;
}

std::optional<double> H5File::attr_double(const std::string& object, const std::string& name) const {
  Handle a{open_attr(*this, object, name), H5Aclose};
  if (a.id < 0) return std::nullopt;
  Handle t{H5Aget_type(a.id), H5Tclose};
  const H5T_class_t cls = H5Tget_class(t.id);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER)
    throw h5_error(path_, "attribute " + object + "@" + name + " is not a number");
  require_one_value(*this, a.id, object + "@" + name);
  double v = 0;
  if (H5Aread(a.id, H5T_NATIVE_DOUBLE, &v) < 0) throw h5_error(path_, "cannot read " + object + "@" + name);
  return v;
}

std::optional<std::string> H5File::attr_string(const std::string& object,
                                               const std::string& name) const {
  Handle a{open_attr(*this, object, name), H5Aclose};
  if (a.id < 0) return std::nullopt;
  Handle t{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(t.id) != H5T_STRING)
    throw h5_error(path_, "attribute " + object + "@" + name + " is not a string");
  require_one_value(*this, a.id, object + "@" + name);
  if (H5Tis_variable_str(t.id) > 0) {
    const auto text =
        read_vlen_string(t.id, [&](hid_t mt, char** p) { return H5Aread(a.id, mt, p); });
    if (!text) throw h5_error(path_, "cannot read " + object + "@" + name);
    return *text;
  }
  const size_t n = H5Tget_size(t.id);
  if (n == 0 || n > kMaxStringBytes)
    throw h5_error(path_, "attribute " + object + "@" + name + " is a string of " + std::to_string(n) + " bytes");
  std::string s(n, '\0');
  Handle mt{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(mt.id, n);
  H5Tset_cset(mt.id, H5Tget_cset(t.id));
  if (H5Aread(a.id, mt.id, s.data()) < 0) throw h5_error(path_, "cannot read " + object + "@" + name);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

void write_h5_atomically(const std::string& path, const std::function<void(H5File&)>& fill,
                         const std::function<void(const H5File&)>& verify) {
  require_replaceable_output(path, "output");
  std::vector<char> bytes;
  {
    H5File f = H5File::create_in_memory(path);
    fill(f);
    bytes = f.image();
    f.close_checked();
  }
  TempFile tmp(path);
  tmp.write_all_and_close(bytes.data(), bytes.size());
  {
    // open_read checks the size and checksum the seal records, then HDF5 reads it
    H5File check = H5File::open_read(tmp.name());
    if (verify) verify(check);
    check.close_checked();
  }
  tmp.commit();
}

}  // namespace lct
