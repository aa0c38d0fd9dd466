// Packing documents into fixed-length sequences.
//
// The stream of documents is concatenated; sequence k is stream tokens
// [k * seq_len, (k + 1) * seq_len). A document that crosses a sequence boundary is cut:
// each piece is its own document in its sequence (positions restart at 0, and the last
// token of each piece has no target). Sequence k is therefore a pure function of k.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/sources.h"

namespace lct {

// A packed batch: T tokens in n documents.
struct PackedBatch {
  std::vector<int32_t> tokens;      // [T]
  std::vector<int32_t> targets;     // [T] next token of the same document, or -1
  std::vector<int32_t> positions;   // [T] offset of the token inside its document
  std::vector<int32_t> cu_seqlens;  // [n + 1] document boundaries, 0 ... T
  std::vector<uint8_t> answer_mask; // [T] 1 where the target is a retrieval answer (may be empty)
  // Per-document mask data (attention/attention_mask.h), empty unless the run's mask needs
  // it: prefix_lm's prefix lengths [n] (in [0, document length]); shared_question's
  // segment ids [T] (per document: a run of 0s, the question, then runs of positive,
  // strictly increasing ids, the answers; check_mask_data says so).
  std::vector<int32_t> prefix_lens;
  std::vector<int32_t> segment_ids;

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_docs() const { return int64_t(cu_seqlens.size()) - 1; }
  int64_t num_targets() const;
};

// Fill targets and positions from tokens and cu_seqlens.
void derive_targets_and_positions(PackedBatch& batch);

// How a packer gives its documents the structure prefix_lm and shared_question read
// (data.prefix_fraction, data.answers_per_question). Document d of L tokens has a prefix
// of floor(prefix_fraction * L) tokens: prefix_lm's bidirectional prefix, or
// shared_question's question; under shared_question (answers > 0) the rest is cut into
// `answers` answers of near-equal length (answer k, 1-based, holds positions
// [Q + (k-1) R / answers, Q + k R / answers) with R = L - Q; an answer may be empty when
// R < answers). Where a document is cut at a sequence boundary each piece keeps its
// share: a piece from offset o has prefix max(0, P - o) and the segment ids of its
// positions.
struct DocStructure {
  double prefix_fraction = 0;  // in [0, 1)
  int32_t answers = 0;         // shared_question: answers per question (0: prefix_lm / none)
  // Or the source marks each document's structure (DocumentSource::segment_ends, a token
  // file's data.segment_end_id): the first marked segment is the prefix (prefix_lm; none
  // without a mark), or every mark closes a segment: the question, then each answer, the
  // last answer running to the document's end (shared_question; one question without).
  enum class Marks { none, prefix, segments };
  Marks marks = Marks::none;
  bool segmented() const { return answers > 0 || marks == Marks::segments; }
  // The prefix (or question) of a document of len tokens, and the segment id of its
  // position p (answers > 0), by the rule.
  int64_t prefix(int64_t len) const;
  int32_t segment(int64_t len, int64_t p) const;
  // Appends to `batch` the mask data of the piece [offset, offset + take) of a document
  // of len tokens: its prefix_lens entry, or its take segment ids (nothing without a rule
  // or marks); `ends` are the document's segment ends under marks.
  void append_piece(PackedBatch& batch, int64_t len, int64_t offset, int64_t take,
                    std::span<const int32_t> ends = {}) const;
};

// Empty when the batch's mask data has the shape its mask needs (prefix lengths of
// every document within it; segment ids per token, a run of 0s then runs of positive,
// strictly increasing ids within each document), else one line naming the first fault.
std::string check_mask_data(const PackedBatch& batch);

// The targets a per-document mask trains: under prefix_lm (prefix_lens) a target inside
// its document's prefix (position + 1 < P: the bidirectional prefix sees it) becomes -1;
// under shared_question (segment_ids) a target in another segment than its token (the
// question's last token before an answer, an answer's last token before the next) does.
void drop_masked_targets(PackedBatch& batch);

// Validate cu_seqlens against a token count: starts at 0, strictly increasing, ends at T.
// Returns an empty string when valid, otherwise a one-line description of the problem.
std::string check_cu_seqlens(std::span<const int32_t> cu_seqlens, int64_t num_tokens);

// Where a sequence starts in the document stream.
struct StreamCursor {
  int64_t doc = 0;     // index of the document in the stream
  int64_t offset = 0;  // tokens of that document already consumed
};

struct SeekInterrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct SeekTooFar : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class SequencePacker {
 public:
  SequencePacker(const DocumentSource& source, int64_t seq_len, const DocStructure& structure = {});

  PackedBatch sequence(int64_t index);
  StreamCursor cursor_for(int64_t index);
  int64_t seq_len() const { return seq_len_; }
  // Reaching sequence i walks the stream's document lengths from the nearest cursor seen
  // (a resumed run's first step, make-batch --first, simulate --first-step). The walk asks
  // `stop` every kCheckEvery sequences and throws SeekInterrupted when it says so (a
  // SIGTERM during a long seek ends it, never waits for it). One call walks at most
  // kMaxSeekDocuments documents (2^28, about 8 s at 30 ns a document on the machine of
  // docs/performance.md) and throws SeekTooFar past that: a run of lct reads that many
  // documents only with documents of a few tokens for days, so in practice only a
  // crafted or mistyped index gets there (the limit is lct's, and said so).
  void set_interrupt(std::function<bool()> stop) { stop_ = std::move(stop); }
  static constexpr int64_t kMaxSeekDocuments = int64_t(1) << 28;

 private:
  const DocumentSource& source_;
  int64_t seq_len_;
  DocStructure structure_;
  std::vector<int32_t> ends_;  // the current document's segment ends (marked sources)
  std::function<bool()> stop_;
  static constexpr int64_t kCheckEvery = 256;
  // Cursors of sequences seen so far, every kCacheEvery sequences plus the latest, so
  // sequential access is O(seq_len) and random access walks at most kCacheEvery
  // sequences' worth of document lengths.
  std::map<int64_t, StreamCursor> cache_;
  static constexpr int64_t kCacheEvery = 1024;
};

}  // namespace lct
