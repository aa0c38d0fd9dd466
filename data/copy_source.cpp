// data.source = "copy": the induction warm-up (sources.h describes the layout).
#include <cstring>
#include <string>

#include "data/rng.h"
#include "data/sources.h"

namespace lct {
namespace {

constexpr uint64_t kCopyStream = 0x636f7079;  // "copy"

class CopySource final : public DocumentSource {
 public:
  explicit CopySource(const CopyOptions& o) : o_(o) {}

  int64_t doc_length(int64_t i) const override { return o_.lengths.length(i); }
  int64_t vocab_required() const override { return 256; }
  int64_t longest_document() const override { return o_.lengths.max_doc_len; }
  std::string describe() const override {
    return "copy (one random string repeated), lengths " + o_.lengths.describe();
  }
  void doc_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out, uint8_t* answer_mask) const override {
    const std::string period = copy_period(o_, i);
    const int64_t p = int64_t(period.size());
    for (int64_t c = 0; c < count; ++c) out[c] = int32_t(static_cast<unsigned char>(period[size_t((offset + c) % p)]));
    if (answer_mask) std::memset(answer_mask, 0, size_t(count));
  }

 private:
  CopyOptions o_;
};

}  // namespace

std::string copy_period(const CopyOptions& o, int64_t i) {
  Rng rng(o.seed, kCopyStream, uint64_t(i));
  std::string s(size_t(rng.uniform_int(kCopyShortestPeriod, kCopyLongestPeriod)), ' ');
  for (char& ch : s) ch = char(rng.uniform_int(kCopyFirstByte, kCopyLastByte));
  return s;
}

std::unique_ptr<DocumentSource> make_copy_source(const CopyOptions& options) {
  return std::make_unique<CopySource>(options);
}

}  // namespace lct
