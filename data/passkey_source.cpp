// data.source = "passkey": the pass-key retrieval documents of the long-context papers
// (ChunkLlama, LongLoRA), byte-level, in lct's own words (sources.h describes the layout).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "data/rng.h"
#include "data/sources.h"

namespace lct {
namespace {

constexpr uint64_t kPasskeyStream = 0x7061736b;  // "pask"

const std::string& intro() {
  static const std::string s = "Somewhere in this long text hides a pass key. Find it and keep it in mind.\n";
  return s;
}
// The filler: one to three sentences made up per document, repeated in the same order
// to the document's length. Each sentence has two made-up names (random syllables), a
// number and a place from a short list, so after its first cycle the filler can be
// predicted only by copying from the document's own earlier text (induction), the skill
// the pass key needs, where one fixed filler text is memorized instead (measured: a
// 4-layer model trained on a fixed filler never copied a digit of the key). Copying is
// learned first on `copy` documents (copy_source.cpp); docs/reproducing-papers.md.
// The key line goes in at the start of one of the sentences.
std::string made_up_name(Rng& rng) {
  static const char kConsonants[] = "bdfgklmnprstvz", kVowels[] = "aeiou";
  std::string name;
  const int64_t syllables = rng.uniform_int(2, 3);
  for (int64_t k = 0; k < syllables; ++k) {
    name += kConsonants[rng.uniform_int(0, 13)];
    name += kVowels[rng.uniform_int(0, 4)];
  }
  name[0] = char(name[0] - 'a' + 'A');
  return name;
}
std::string filler_cycle(Rng& rng) {
  static const char* const kDoes[] = {"meets", "visits", "helps", "calls", "follows", "thanks", "waits for", "writes to"};
  static const char* const kWhere[] = {"by the river", "at the market", "near the mill", "in the garden",
                                       "on the bridge", "at the harbour", "in the square", "under the old tree"};
  const int64_t sentences = rng.uniform_int(1, 3);
  std::string cycle;
  for (int64_t k = 0; k < sentences; ++k) {
    cycle += made_up_name(rng) + " " + kDoes[rng.uniform_int(0, 7)] + " ";
    cycle += made_up_name(rng) + " at number " + std::to_string(rng.uniform_int(10, 9999)) + " ";
    cycle += std::string(kWhere[rng.uniform_int(0, 7)]) + ". ";
  }
  return cycle;
}
std::string key_line(const std::string& key) { return "\nThe pass key is " + key + ". Remember it. " + key + " is the pass key.\n"; }
const std::string& question() {
  static const std::string s = "\nWhat is the pass key? The pass key is ";
  return s;
}

class PasskeySource final : public DocumentSource {
 public:
  explicit PasskeySource(const PasskeyOptions& o) : o_(o) {
    // (fixed lengths are all max_doc_len)
    const bool fixed = o.lengths.dist == DocLengthDist::fixed;
    const int64_t shortest = fixed ? o.lengths.max_doc_len : o.lengths.min_doc_len;
    if (shortest < passkey_min_length())
      throw std::invalid_argument(std::string("data.source = passkey needs ") +
                                  (fixed ? "data.max_doc_len" : "data.min_doc_len") + " >= " +
                                  std::to_string(passkey_min_length()) +
                                  " (the introduction, the key line, the question and the answer), got " +
                                  std::to_string(shortest));
    if (!(o.depth == -1.0 || (o.depth >= 0.0 && o.depth <= 1.0)))
      throw std::invalid_argument("data.passkey_depth must be -1 (uniform) or in [0, 1]");
  }

  int64_t doc_length(int64_t i) const override { return o_.lengths.length(i); }
  int64_t vocab_required() const override { return 256; }
  bool has_answers() const override { return true; }
  int64_t longest_document() const override { return o_.lengths.max_doc_len; }
  std::string describe() const override {
    return "pass-key retrieval, lengths " + o_.lengths.describe() + ", key at " + (o_.depth < 0 ? std::string("a uniform depth") : "depth " + std::to_string(o_.depth));
  }

  void doc_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out, uint8_t* answer_mask) const override {
    const PasskeyDocument d = passkey_document(o_, i);
    for (int64_t c = 0; c < count; ++c) {
      const int64_t t = offset + c;
      out[c] = int32_t(static_cast<unsigned char>(d.text[size_t(t)]));
      if (answer_mask) answer_mask[c] = t >= d.answer_begin - 1 && t < int64_t(d.text.size()) - 1 ? 1 : 0;
    }
  }

 private:
  PasskeyOptions o_;
};

}  // namespace

int64_t passkey_min_length() {
  return int64_t(intro().size() + key_line("00000").size() + question().size() + 5);
}

PasskeyDocument passkey_document(const PasskeyOptions& o, int64_t i) {
  const int64_t L = o.lengths.length(i);
  Rng rng(o.seed, kPasskeyStream, uint64_t(i));
  PasskeyDocument d;
  d.key = std::to_string(rng.uniform_int(10000, 99999));
  const double depth = o.depth < 0 ? rng.uniform() : o.depth;
  const std::string line = key_line(d.key);
  const int64_t fill = L - passkey_min_length();  // filler bytes
  // the key line starts a filler sentence: the last sentence start at or before depth x fill
  const std::string f = filler_cycle(rng);
  const int64_t target = int64_t(std::floor(depth * double(fill)));
  int64_t at = 0;
  for (int64_t p = 0; p <= target; ++p)
    if (p == 0 || (f[size_t((p - 1) % int64_t(f.size()))] == ' ' &&
                   f[size_t((p - 2 + int64_t(f.size())) % int64_t(f.size()))] == '.'))
      at = p;
  d.text.reserve(size_t(L));
  d.text += intro();
  for (int64_t p = 0; p < at; ++p) d.text += f[size_t(p % int64_t(f.size()))];
  d.key_begin = int64_t(d.text.size());
  d.text += line;
  for (int64_t p = at; p < fill; ++p) d.text += f[size_t(p % int64_t(f.size()))];
  d.text += question();
  d.answer_begin = int64_t(d.text.size());
  d.text += d.key;
  d.depth = fill > 0 ? double(at) / double(fill) : 0.0;
  if (int64_t(d.text.size()) != L) throw std::logic_error("passkey document of the wrong length");
  return d;
}

std::unique_ptr<DocumentSource> make_passkey_source(const PasskeyOptions& options) {
  return std::make_unique<PasskeySource>(options);
}

}  // namespace lct
