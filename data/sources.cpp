#include "data/sources.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>

#include "data/files.h"
#include "data/rng.h"

namespace lct {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kContentStream = 0x636f6e74;  // "cont"
constexpr uint64_t kEpochStream = 0x65706f63;    // "epoc"

// ---------------------------------------------------------------------------
// Synthetic key-value retrieval documents
// ---------------------------------------------------------------------------
class SyntheticSource final : public DocumentSource {
 public:
  explicit SyntheticSource(const SyntheticOptions& o) : o_(o) {
    if (o.vocab_size < synthetic_ids::min_vocab)
      throw std::invalid_argument("data.source = synthetic needs model.vocab_size >= " +
                                  std::to_string(synthetic_ids::min_vocab));
  }

  int64_t doc_length(int64_t i) const override { return o_.lengths.length(i); }
  int64_t vocab_required() const override { return o_.vocab_size; }
  bool has_answers() const override { return true; }
  int64_t longest_document() const override { return o_.lengths.max_doc_len; }
  std::string describe() const override {
    return "synthetic key-value retrieval, lengths " + o_.lengths.describe();
  }

  void doc_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out,
                  uint8_t* answer_mask) const override {
    using namespace synthetic_ids;
    const int64_t L = doc_length(i);
    Rng rng(o_.seed, kContentStream, uint64_t(i));
    // Layout: 1 BOS + 2n pair tokens + 1 SEP + filler + 3n query tokens.
    int64_t n = std::clamp<int64_t>(L / 32, 1, 8);
    while (n > 0 && 2 + 5 * n > L) --n;
    int32_t keys[num_keys], values[8], order[8];
    std::iota(keys, keys + num_keys, 0);
    for (int64_t a = 0; a < n; ++a) {  // partial Fisher-Yates: n distinct keys
      const int64_t b = rng.uniform_int(a, num_keys - 1);
      std::swap(keys[a], keys[b]);
      values[a] = int32_t(rng.uniform_int(0, num_values - 1));
      order[a] = int32_t(a);
    }
    for (int64_t a = n - 1; a > 0; --a) std::swap(order[a], order[rng.uniform_int(0, a)]);
    const int64_t filler_range = o_.vocab_size - first_filler;
    const int64_t filler_start = rng.uniform_int(0, filler_range - 1);
    const int64_t filler_stride = rng.uniform_int(1, 7);
    const int64_t pairs_end = n > 0 ? 2 + 2 * n : 1;  // BOS, pairs, SEP
    const int64_t queries_begin = L - 3 * n;

    for (int64_t c = 0; c < count; ++c) {
      const int64_t t = offset + c;
      int32_t tok;
      uint8_t answer = 0;
      if (t == 0) {
        tok = bos;
      } else if (n > 0 && t < pairs_end - 1) {
        const int64_t a = (t - 1) / 2;
        tok = (t - 1) % 2 == 0 ? first_key + keys[a] : first_value + values[a];
      } else if (n > 0 && t == pairs_end - 1) {
        tok = sep;
      } else if (t >= queries_begin) {
        const int64_t qi = (t - queries_begin) / 3, part = (t - queries_begin) % 3;
        const int32_t a = order[qi];
        tok = part == 0 ? query : part == 1 ? first_key + keys[a] : first_value + values[a];
        answer = part == 1;  // the next token is the retrieved value
      } else {
        const int64_t f = t - pairs_end;
        tok = int32_t(first_filler + (filler_start + f * filler_stride) % filler_range);
      }
      out[c] = tok;
      if (answer_mask) answer_mask[c] = answer;
    }
  }

 private:
  SyntheticOptions o_;
};

// A finite list of documents visited once per epoch in a seeded order.
class EpochOrder {
 public:
  EpochOrder(int64_t num_docs, uint64_t seed) : n_(num_docs), seed_(seed) {}
  int64_t doc_at(int64_t i) const {
    const int64_t epoch = i / n_, j = i % n_;
    if (epoch != cached_epoch_) {
      perm_.resize(size_t(n_));
      std::iota(perm_.begin(), perm_.end(), int64_t(0));
      Rng rng(seed_, kEpochStream, uint64_t(epoch));
      for (int64_t a = n_ - 1; a > 0; --a) std::swap(perm_[a], perm_[rng.uniform_int(0, a)]);
      cached_epoch_ = epoch;
    }
    return perm_[size_t(j)];
  }

 private:
  int64_t n_;
  uint64_t seed_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

// ---------------------------------------------------------------------------
// Byte-level text
// ---------------------------------------------------------------------------
class TextSource final : public DocumentSource {
 public:
  TextSource(const std::string& path, const std::string& separator, uint64_t seed)
      : path_(path), order_(1, seed) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw std::runtime_error("data.path '" + path + "': no such file or folder");
    std::vector<fs::path> files;
    if (fs::is_directory(path, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(path, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(path);
    }
    for (const fs::path& f : files) {
      const std::string content = read_regular_file(f.string(), "data.path");
      if (separator.empty()) {
        add_document(content);
      } else {
        size_t start = 0;
        while (true) {
          const size_t pos = content.find(separator, start);
          add_document(content.substr(start, pos == std::string::npos ? pos : pos - start));
          if (pos == std::string::npos) break;
          start = pos + separator.size();
        }
      }
    }
    if (doc_begin_.empty())
      throw std::runtime_error("data.path '" + path + "': no non-empty documents (" +
                               std::to_string(files.size()) + " files read)");
    doc_begin_.push_back(int64_t(bytes_.size()));
    order_ = EpochOrder(num_docs(), seed);
  }

  int64_t num_docs() const { return int64_t(doc_begin_.size()) - 1; }
  int64_t longest_document() const override {
    int64_t longest = 0;
    for (size_t d = 0; d + 1 < doc_begin_.size(); ++d) longest = std::max(longest, doc_begin_[d + 1] - doc_begin_[d]);
    return longest;
  }
  int64_t doc_length(int64_t i) const override {
    const int64_t d = order_.doc_at(i);
    return doc_begin_[d + 1] - doc_begin_[d];
  }
  void doc_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out,
                  uint8_t* answer_mask) const override {
    const int64_t d = order_.doc_at(i);
    const unsigned char* p =
        reinterpret_cast<const unsigned char*>(bytes_.data()) + doc_begin_[d] + offset;
    for (int64_t c = 0; c < count; ++c) out[c] = p[c];
    if (answer_mask) std::memset(answer_mask, 0, size_t(count));
  }
  int64_t vocab_required() const override { return 256; }
  std::string describe() const override {
    return "text '" + path_ + "', " + std::to_string(num_docs()) + " documents, " +
           std::to_string(bytes_.size()) + " bytes";
  }

 private:
  void add_document(const std::string& s) {
    if (s.empty()) return;
    doc_begin_.push_back(int64_t(bytes_.size()));
    bytes_ += s;
  }
  std::string path_;
  std::string bytes_;
  std::vector<int64_t> doc_begin_;
  EpochOrder order_;
};

// ---------------------------------------------------------------------------
// Binary token ids
// ---------------------------------------------------------------------------
class TokenSource final : public DocumentSource {
 public:
  TokenSource(const std::string& path, TokenDtype dtype, int64_t separator_id,
              uint64_t seed, int64_t segment_end_id)
      : path_(path), segment_end_id_(segment_end_id), order_(1, seed) {
    width_ = dtype == TokenDtype::uint16 ? 2 : 4;
    // read whole (no mmap: a file truncated while mapped would kill the run with SIGBUS)
    data_ = read_regular_file(path, "data.path");
    size_ = data_.size();
    if (size_ % width_ != 0)
      throw std::runtime_error("data.path '" + path + "': size " + std::to_string(size_) +
                               " is not a multiple of " + std::to_string(width_) + " (" + token_dtype_name(dtype) + ")");
    const int64_t n = int64_t(size_ / width_);
    int64_t start = 0;
    for (int64_t t = 0; t <= n; ++t) {
      if (t == n || token(t) == separator_id) {
        if (t > start) ranges_.push_back({start, t});
        start = t + 1;
      } else {
        max_token_ = std::max<int64_t>(max_token_, token(t));
      }
    }
    if (ranges_.empty())
      throw std::runtime_error("data.path '" + path + "': no non-empty documents (" +
                               std::to_string(n) + " tokens)");
    order_ = EpochOrder(int64_t(ranges_.size()), seed);
  }

  int64_t longest_document() const override {
    int64_t longest = 0;
    for (const auto& r : ranges_) longest = std::max(longest, r.second - r.first);
    return longest;
  }
  int64_t doc_length(int64_t i) const override {
    const auto& r = ranges_[size_t(order_.doc_at(i))];
    return r.second - r.first;
  }
  void doc_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out,
                  uint8_t* answer_mask) const override {
    const int64_t begin = ranges_[size_t(order_.doc_at(i))].first + offset;
    for (int64_t c = 0; c < count; ++c) out[c] = int32_t(token(begin + c));
    if (answer_mask) std::memset(answer_mask, 0, size_t(count));
  }
  int64_t vocab_required() const override { return max_token_ + 1; }
  std::string describe() const override {
    return "tokens '" + path_ + "', " + std::to_string(ranges_.size()) + " documents, " +
           std::to_string(size_ / width_) + " ids" +
           (segment_end_id_ >= 0 ? ", segments closed by id " + std::to_string(segment_end_id_) : "");
  }
  void segment_ends(int64_t i, std::vector<int32_t>& ends) const override {
    ends.clear();
    if (segment_end_id_ < 0) return;
    const auto& r = ranges_[size_t(order_.doc_at(i))];
    for (int64_t t = r.first; t < r.second; ++t)
      if (token(t) == segment_end_id_) ends.push_back(int32_t(t - r.first + 1));
  }

 private:
  uint32_t token(int64_t t) const {
    if (width_ == 2) {
      uint16_t x;
      std::memcpy(&x, data_.data() + t * 2, 2);
      return x;
    }
    uint32_t x;
    std::memcpy(&x, data_.data() + t * 4, 4);
    return x;
  }
  std::string path_;
  int64_t segment_end_id_ = -1;
  size_t width_ = 2, size_ = 0;
  std::string data_;  // the file's bytes
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  int64_t max_token_ = 0;
  EpochOrder order_;
};

}  // namespace

std::unique_ptr<DocumentSource> make_synthetic_source(const SyntheticOptions& options) {
  return std::make_unique<SyntheticSource>(options);
}
std::unique_ptr<DocumentSource> make_text_source(const std::string& path,
                                                 const std::string& separator, uint64_t seed) {
  return std::make_unique<TextSource>(path, separator, seed);
}
std::unique_ptr<DocumentSource> make_token_source(const std::string& path,
                                                  TokenDtype dtype, int64_t separator_id,
                                                  uint64_t seed, int64_t segment_end_id) {
  return std::make_unique<TokenSource>(path, dtype, separator_id, seed, segment_end_id);
}

}  // namespace lct
