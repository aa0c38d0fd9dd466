// Splitting a packed sequence over the ranks of a context-parallel group.
//
// A LocalBatch is what one rank trains of a packed sequence: some runs of tokens
// ("pieces") of its documents, with each token's target and in-document position taken
// from the whole sequence *before* it is split, so a piece at the end of a rank's rows
// still predicts the next token of its document. Without context parallelism the
// LocalBatch is the whole sequence, one piece per document.
//
// Splits (parallel.cp_split):
//   zigzag      every document of L >= 2 cp tokens is cut into 2 cp chunks
//               [c L / 2cp, (c + 1) L / 2cp); rank r keeps chunks r and 2cp - 1 - r
//               (Llama-3 / Megatron load balancing: each rank holds ~1/cp of the tokens
//               and ~1/cp of the causal attention work of every document). Shorter
//               documents go whole to the rank holding the fewest tokens so far (the
//               lowest such rank), in document order. No padding. If that leaves a
//               rank without tokens, it takes the last token of the fullest rank.
//   contiguous  rank r keeps rows [r T / cp, (r + 1) T / cp) of the sequence (the naive
//               split: the last rank gets the most attention work).
// Every rank can compute every rank's pieces from the same packed sequence, so the
// placements exchange no metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/packing.h"

namespace lct {

enum class CpSplit { zigzag, contiguous };
CpSplit parse_cp_split(const std::string& name);  // throws on unknown
const char* cp_split_name(CpSplit split);

// A run of one document's tokens held by one rank.
struct DocPiece {
  int32_t doc = 0;      // index of the document in the packed sequence
  int32_t doc_len = 0;  // tokens in the whole document
  int32_t pos = 0;      // in-document offset of the first token
  int32_t len = 0;      // tokens
  int32_t row = 0;      // first row in the holder's local arrays
  int32_t seq_row() const { return doc_start + pos; }  // first row in the whole sequence
  int32_t doc_start = 0;  // row of the document's first token in the whole sequence
};

struct LocalBatch {
  std::vector<int32_t> tokens;       // [T_local]
  std::vector<int32_t> targets;      // [T_local] next token of the document, or -1
  std::vector<int32_t> positions;    // [T_local] in-document offsets
  std::vector<uint8_t> answer_mask;  // [T_local] (may be empty)
  std::vector<DocPiece> pieces;      // this rank's pieces, in local row order
  // Every rank's pieces of the same sequence (cp entries; one without context
  // parallelism), and which of them this is: what context-parallel placements need.
  std::vector<std::vector<DocPiece>> group_pieces;
  int cp_rank = 0;
  int64_t sequence_tokens = 0;       // T of the whole sequence

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_targets() const;
  // Attention work of this rank's queries: every piece against its causal key prefix
  // (task_pairs of core_attention.h); summed over a group, the sequence's pairs.
  int64_t attention_pairs() const;
};

// The whole sequence as one rank's batch (reuses out's capacity).
void whole_sequence(const PackedBatch& batch, LocalBatch& out);
LocalBatch whole_sequence(const PackedBatch& batch);

// Every rank's pieces of the sequence (rows within each rank in document order).
std::vector<std::vector<DocPiece>> shard_pieces(const PackedBatch& batch, int cp, CpSplit split);
// Rank `rank`'s batch of a sequence split over cp ranks.
LocalBatch shard_sequence(const PackedBatch& batch, int cp, int rank, CpSplit split);

}  // namespace lct
