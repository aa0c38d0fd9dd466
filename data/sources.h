// Document sources: an endless, deterministic stream of documents. Document i is a pure
// function of (source, seed, i), so any position of the stream can be recomputed
// without replaying it (resume, disjoint draws per rank).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/enum_names.h"
#include "data/doc_lengths.h"

namespace lct {

// data.source and data.token_dtype
enum class DataSource { synthetic, text, tokens, passkey, copy };
inline constexpr EnumName<DataSource> kDataSourceNames[] = {
    {DataSource::synthetic, "synthetic"},
    {DataSource::text, "text", "a text file or folder, byte-level"},
    {DataSource::tokens, "tokens", "a binary token file"},
    {DataSource::passkey, "passkey", "pass-key retrieval documents, byte-level"},
    {DataSource::copy, "copy", "one random byte string repeated: the copy warm-up"},
};
inline DataSource parse_data_source(const std::string& name) { return parse_enum(kDataSourceNames, name, "data source"); }
inline const char* data_source_name(DataSource value) { return enum_name(kDataSourceNames, value); }
enum class TokenDtype { uint16, uint32 };
inline constexpr EnumName<TokenDtype> kTokenDtypeNames[] = {
    {TokenDtype::uint16, "uint16"},
    {TokenDtype::uint32, "uint32"},
};
inline TokenDtype parse_token_dtype(const std::string& name) { return parse_enum(kTokenDtypeNames, name, "token dtype"); }
inline const char* token_dtype_name(TokenDtype value) { return enum_name(kTokenDtypeNames, value); }

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  // Length (>= 1) of document i of the stream.
  virtual int64_t doc_length(int64_t i) const = 0;
  // Tokens [offset, offset + count) of document i. If answer_mask is non-null it is set
  // to 1 where the *next* token is a long-range retrieval answer (synthetic only).
  virtual void doc_tokens(int64_t i, int64_t offset, int64_t count, int32_t* out,
                          uint8_t* answer_mask) const = 0;
  // Token ids are in [0, vocab_required()).
  virtual int64_t vocab_required() const = 0;
  virtual std::string describe() const = 0;
  virtual bool has_answers() const { return false; }
  // Length of the stream's longest document: 1 means no document has a target.
  virtual int64_t longest_document() const = 0;
  // The segments document i's marks close, as their in-document (exclusive) ends,
  // ascending: t + 1 for a mark at position t (data.segment_end_id in a token file);
  // empty for sources without marks.
  virtual void segment_ends(int64_t i, std::vector<int32_t>& ends) const {
    (void)i;
    ends.clear();
  }
};

// Synthetic documents with long-range dependencies (key-value retrieval):
//   BOS  k1 v1 k2 v2 ... kn vn  SEP  filler ...  QRY k_a v_a  QRY k_b v_b ...
// The filler is an arithmetic progression modulo the filler range with a per-document
// stride, so local structure is learnable; each query repeats a key from the start of
// the document and the following value can only be predicted by attending back to the
// pair section, possibly thousands of tokens earlier.
struct SyntheticOptions {
  uint64_t seed = 0;
  int64_t vocab_size = 256;  // ids used: [0, vocab_size)
  DocLengthSampler lengths;
};
std::unique_ptr<DocumentSource> make_synthetic_source(const SyntheticOptions& options);

// Pass-key retrieval (the long-context papers' test, byte-level, vocabulary 256): an
// introduction, filler sentences repeated to the document's length with one key line
// ("The pass key is NNNNN. Remember it. NNNNN is the pass key.") at the start of a
// filler sentence, and at the end the question "What is the pass key? The pass key is "
// followed by the five digits. The answer mask marks the tokens before those digits.
// The key is uniform in [10000, 99999]; its depth (the key line's position within the
// filler, 0 = first, 1 = last) is uniform per document, or fixed by `depth` in [0, 1]
// (it lands on the last sentence start at or before depth x filler length).
struct PasskeyOptions {
  uint64_t seed = 0;
  double depth = -1;  // -1: uniform per document
  DocLengthSampler lengths;
};
std::unique_ptr<DocumentSource> make_passkey_source(const PasskeyOptions& options);
// The shortest document the layout fits in (no filler).
int64_t passkey_min_length();
// Document i as text, with where its parts are (tests, evaluation).
struct PasskeyDocument {
  std::string text, key;
  int64_t key_begin = 0;     // first byte of the key line
  int64_t answer_begin = 0;  // first answer digit
  double depth = 0;          // the key line's start within the filler, as a fraction
};
PasskeyDocument passkey_document(const PasskeyOptions& options, int64_t i);

// The induction warm-up: each document is one random string of bytes repeated to the
// document's length, so every byte after the first period is a copy of the byte one
// period earlier, found by content (the period differs per document). It teaches a small
// model to copy from context (an induction circuit) within about a minute, which the
// pass-key documents alone, where copy targets are rare, do not (docs/reproducing-papers.md,
// measured). The string's bytes are uniform over the 216 byte values 33-248, so
// one byte of context usually finds its earlier copy; its length is uniform in
// [kCopyShortestPeriod, kCopyLongestPeriod].
constexpr int64_t kCopyShortestPeriod = 10, kCopyLongestPeriod = 60, kCopyFirstByte = 33, kCopyLastByte = 248;
struct CopyOptions {
  uint64_t seed = 0;
  DocLengthSampler lengths;
};
std::unique_ptr<DocumentSource> make_copy_source(const CopyOptions& options);
// The string document i repeats.
std::string copy_period(const CopyOptions& options, int64_t i);

// Byte-level text: a UTF-8 file or a folder (all regular files, recursively, sorted by
// path). Each file is a document, or, if `separator` is non-empty, each piece between
// separators. Empty documents are dropped. The stream visits every document once per
// epoch in a seed-dependent order. Tokens are bytes (vocabulary 256).
std::unique_ptr<DocumentSource> make_text_source(const std::string& path,
                                                 const std::string& separator, uint64_t seed);

// Binary token ids (little-endian uint16 or uint32) with a document-separator id; the
// separator itself is not part of any document. Read whole at open. segment_end_id >= 0
// marks segments inside documents (segment_ends): each occurrence closes the segment
// it ends, and stays part of it (an end-of-prompt or end-of-turn token).
std::unique_ptr<DocumentSource> make_token_source(const std::string& path,
                                                  TokenDtype dtype,
                                                  int64_t separator_id, uint64_t seed,
                                                  int64_t segment_end_id = -1);

// Synthetic token ids, exposed for tests and the retrieval metric.
namespace synthetic_ids {
constexpr int32_t bos = 0, sep = 1, query = 2, first_key = 4, num_keys = 32, num_values = 32;
constexpr int32_t first_value = first_key + num_keys;
constexpr int32_t first_filler = first_value + num_values;
constexpr int64_t min_vocab = first_filler + 16;
}  // namespace synthetic_ids

}  // namespace lct
