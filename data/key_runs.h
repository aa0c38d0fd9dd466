// Which rows one rank holds that another rank's queries read: what a context-parallel
// exchange moves. Both sides compute it from the same pieces (every rank knows every
// rank's pieces, data/context_shards.h), so sender and receiver agree on every count
// without exchanging metadata, and `lct simulate` prices the same rows.
//
// A reader piece reads the keys DocPiece::keys gives (its mask's [0, sink_end) and
// [lo, hi)); a holder's rows are sent when some reader piece of the same document reads
// them, as runs of consecutive rows, never padded or rounded: under a 4,096-token
// window a rank reads only the last 4,096 keys before each of its pieces, and under
// causal only the keys before its last query (a zigzag split's tail chunk is read by no
// rank holding only earlier chunks).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "data/local_batch.h"

namespace lct {

// Rows [row, row + len) of the holder's local arrays: in-document positions
// [pos, pos + len) of document `doc` (sequence rows doc_start + pos ...).
struct KeyRun {
  int32_t doc = 0, doc_start = 0;  // as DocPiece: the document's first row in the sequence
  int32_t pos = 0, len = 0;
  int32_t row = 0;
  int32_t end() const { return pos + len; }
};

// Spans [a, b) of in-document key positions.
using KeySpans = std::vector<std::pair<int64_t, int64_t>>;
// Appends the keys k names, [0, sink_end) and [lo, hi), leaving out an empty one.
void add_key_spans(const MaskKeys& k, KeySpans& spans);
// Sorts spans and merges those that overlap or touch.
void merge_spans(KeySpans& spans);

// The runs of `holder`'s rows that some query of `reader`'s pieces reads under `mask`,
// in the holder's row order, consecutive pieces' rows merged into one run (replaces
// runs). Both lists are in document order (as every rank's pieces are).
void read_runs(std::span<const DocPiece> holder, std::span<const DocPiece> reader, const AttentionMask& mask,
               std::vector<KeyRun>& runs);
// Appends the rows of holder piece h that the in-document spans name (clipped to h,
// merged; replaces spans by them) as runs, continuing the last run when it ends where
// the first begins (consecutive pieces). read_runs's spans come from the mask; a
// block_sparse all-gather's and ring's from the selection (parallel/selected_keys.h).
void append_runs(const DocPiece& h, KeySpans& spans, std::vector<KeyRun>& runs);
int64_t rows_of(std::span<const KeyRun> runs);
// Does piece p read any key of run r (same document)?
bool reads(const DocPiece& p, const KeyRun& r, const AttentionMask& mask);

// What rank `me` of a context-parallel group sends and receives in one exchange of keys:
// to[r] its rows rank r reads, from[o] rank o's rows it reads (to[me], from[me]: empty).
struct KeyExchange {
  std::vector<std::vector<KeyRun>> to, from;
  void plan(const std::vector<std::vector<DocPiece>>& group, int me, const AttentionMask& mask);
  int64_t rows_to() const;    // summed over the other ranks
  int64_t rows_from() const;
};

}  // namespace lct
