#include "src/io/safetensors.h"
#include "src/util/printable.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "compute/gemm.h"
#include "src/util/json.h"

namespace lct {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; lct reads it in place");

const char* safetensors_dtype_name(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::f32: return "F32";
    case SafetensorsDtype::bf16: return "BF16";
    case SafetensorsDtype::f16: return "F16";
  }
  return "?";
}

int64_t safetensors_dtype_bytes(SafetensorsDtype d) { return d == SafetensorsDtype::f32 ? 4 : 2; }

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

namespace {

// An IEEE half's value as a float (exact: every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // zero or subnormal: mantissa x 2^-24
  const float magnitude = float(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

// The JSON parser's event hook: refuses a name given twice in the header object (a JSON
// parser keeps one of them silently), and nesting deeper than the format's.
struct DuplicateGuard {
  std::set<std::string> names;
  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > 4) throw std::runtime_error("the header nests deeper than the format's 3 levels");
    if (event == Json::parse_event_t::key && depth == 1) {
      const std::string name = parsed.get<std::string>();
      if (!names.insert(name).second) throw std::runtime_error("the name '" + printable(name) + "' is given twice");
    }
    return true;
  }
};

int64_t non_negative_integer(const Json& v, const std::string& what) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) throw std::runtime_error(what + " is too large");
    return int64_t(u);
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  throw std::runtime_error(what + " is not a non-negative integer");
}

}  // namespace

std::vector<SafetensorsEntry> parse_safetensors_header(const std::string& text, int64_t data_bytes,
                                                       std::map<std::string, std::string>& metadata) {
  Json header;
  DuplicateGuard guard;
  refuse_json_nul(text, "the header");
  try {
    header = Json::parse(
        text, [&guard](int depth, Json::parse_event_t e, Json& j) { return guard(depth, e, j); });
  } catch (const Json::exception& e) {
    throw std::runtime_error(std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw std::runtime_error("the header is not a JSON object");
  std::vector<SafetensorsEntry> entries;
  metadata.clear();
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw std::runtime_error("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw std::runtime_error("__metadata__." + printable(m.key()) + " is not a string");
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + printable(name) + "'";
    if (!v.is_object()) throw std::runtime_error(where + " is not an object");
    for (auto k = v.begin(); k != v.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        throw std::runtime_error(where + " has an unknown field '" + printable(k.key()) + "'");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw std::runtime_error(where + " has no dtype string");
    SafetensorsEntry e;
    e.name = name;
    const std::string dtype = v["dtype"].get<std::string>();
    if (dtype == "F32") e.dtype = SafetensorsDtype::f32;
    else if (dtype == "BF16") e.dtype = SafetensorsDtype::bf16;
    else if (dtype == "F16") e.dtype = SafetensorsDtype::f16;
    else throw std::runtime_error(where + " has dtype " + dtype + " (lct reads F32, BF16 and F16)");
    if (!v.contains("shape") || !v["shape"].is_array()) throw std::runtime_error(where + " has no shape list");
    if (v["shape"].size() > 8) throw std::runtime_error(where + " has more than 8 dimensions");
    int64_t numel = 1;
    for (const Json& d : v["shape"]) {
      const int64_t n = non_negative_integer(d, where + "'s shape");
      if (n != 0 && numel > std::numeric_limits<int64_t>::max() / 8 / n)
        throw std::runtime_error(where + "'s shape is too large");
      numel *= n;
      e.shape.push_back(n);
    }
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw std::runtime_error(where + " has no data_offsets [begin, end]");
    e.begin = non_negative_integer(v["data_offsets"][0], where + "'s data_offsets");
    e.end = non_negative_integer(v["data_offsets"][1], where + "'s data_offsets");
    if (e.end < e.begin) throw std::runtime_error(where + "'s data_offsets end before they begin");
    if (e.end > data_bytes)
      throw std::runtime_error(where + "'s data_offsets end at byte " + std::to_string(e.end) + ", past the data's " +
                               std::to_string(data_bytes));
    const int64_t bytes = numel * safetensors_dtype_bytes(e.dtype);
    if (e.end - e.begin != bytes)
      throw std::runtime_error(where + ": " + dtype + " of its shape takes " + std::to_string(bytes) +
                               " bytes, its data_offsets " + std::to_string(e.end - e.begin));
    entries.push_back(std::move(e));
  }
  // the tensors cover the data exactly: sorted by offset, each begins where the last ended
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  int64_t at = 0;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < at) throw std::runtime_error("tensor '" + printable(e->name) + "' overlaps the tensor before it in the data");
    if (e->begin > at)
      throw std::runtime_error("the data has a hole at bytes " + std::to_string(at) + "-" + std::to_string(e->begin) +
                               " (before tensor '" + printable(e->name) + "')");
    at = e->end;
  }
  if (at != data_bytes)
    throw std::runtime_error("the data has " + std::to_string(data_bytes - at) + " bytes after its last tensor");
  return entries;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const auto fail = [&](const std::string& why) { return std::runtime_error(path + ": " + why); };
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw fail(std::string("cannot open (") + std::strerror(errno) + ")");
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) throw fail("not a regular file");
    file_size_ = int64_t(st.st_size);
    unsigned char length[8];
    if (file_size_ < 8 || ::pread(fd_, length, 8, 0) != 8)
      throw fail("shorter than the 8-byte header length of a safetensors file");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
    if (n > uint64_t(kSafetensorsMaxHeader))
      throw fail("the header length " + std::to_string(n) + " is above the 100 MB limit of safetensors headers");
    if (int64_t(n) > file_size_ - 8)
      throw fail("the header length " + std::to_string(n) + " is beyond the file's " + std::to_string(file_size_) +
                 " bytes");
    if (n < 2) throw fail("the header is too short to be a JSON object");
    std::string text(size_t(n), '\0');
    if (::pread(fd_, text.data(), size_t(n), 8) != ssize_t(n)) throw fail("changed while it was read");
    if (text[0] != '{') throw fail("the header does not start with '{'");
    data_start_ = 8 + int64_t(n);
    try {
      entries_ = parse_safetensors_header(text, file_size_ - data_start_, metadata_);
    } catch (const std::runtime_error& e) {
      throw fail(e.what());
    }
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsFile::read_f32(const SafetensorsEntry& e, float* out) const {
  const int64_t n = e.numel(), bytes = e.end - e.begin;
  char* dst = e.dtype == SafetensorsDtype::f32 ? reinterpret_cast<char*>(out) : nullptr;
  std::vector<uint16_t> half;
  if (!dst) {
    half.resize(size_t(n));
    dst = reinterpret_cast<char*>(half.data());
  }
  for (int64_t done = 0; done < bytes;) {
    const ssize_t got = ::pread(fd_, dst + done, size_t(std::min<int64_t>(bytes - done, int64_t(1) << 30)),
                                off_t(data_start_ + e.begin + done));
    if (got <= 0) throw std::runtime_error(path_ + ": changed while it was read (tensor '" + printable(e.name) + "')");
    done += got;
  }
  if (e.dtype == SafetensorsDtype::bf16)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_value(half[size_t(i)]);
  else if (e.dtype == SafetensorsDtype::f16)
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(half[size_t(i)]);
}

std::string safetensors_bytes(const std::vector<SafetensorsTensor>& tensors, SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata) {
  if (dtype == SafetensorsDtype::f16) throw std::logic_error("safetensors_bytes: lct writes F32 or BF16");
  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  const int64_t width = safetensors_dtype_bytes(dtype);
  int64_t at = 0;
  for (const SafetensorsTensor& t : tensors) {
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    header[t.name] = {{"dtype", safetensors_dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + n * width}}};
    at += n * width;
  }
  std::string text = json_text(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + size_t(at));
  for (const SafetensorsTensor& t : tensors) {
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    if (dtype == SafetensorsDtype::f32) {
      out.append(reinterpret_cast<const char*>(t.values), size_t(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = bf16_bits(t.values[i]);
        out.push_back(char(b & 0xff));
        out.push_back(char(b >> 8));
      }
    }
  }
  return out;
}

}  // namespace lct
