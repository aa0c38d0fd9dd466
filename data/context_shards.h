// Splitting a packed sequence over the ranks of a context-parallel group into each
// rank's LocalBatch (data/local_batch.h).
//
// Splits (parallel.cp_split):
//   zigzag      every document of L >= 2 cp tokens is cut into 2 cp chunks
//               [c L / 2cp, (c + 1) L / 2cp); rank r keeps chunks r and 2cp - 1 - r
//               (Llama-3 / Megatron load balancing: each rank holds ~1/cp of the tokens
//               and ~1/cp of the causal attention work of every document). Under an
//               attention mask other than causal the chunks hold equal shares of the
//               work instead: the pairs the mask lets through (attention_pairs, with
//               the document's prefix or segments under a per-document mask) plus
//               each token's token-linear work in pair units (SplitWork). Shorter
//               documents go whole to the rank holding the fewest tokens so far (the
//               lowest such rank), in document order. No padding. If that leaves a
//               rank without tokens, it takes the last token of the fullest rank.
//   contiguous  rank r keeps rows [r T / cp, (r + 1) T / cp) of the sequence (the naive
//               split: the last rank gets the most attention work).
// Pieces carry the per-document mask data (DocPiece::prefix_len, and under
// shared_question one piece per segment, cut_at_segments).
// Every rank can compute every rank's pieces from the same packed sequence, so the
// placements exchange no metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/enum_names.h"
#include "data/local_batch.h"
#include "data/packing.h"

namespace lct {

enum class CpSplit { zigzag, contiguous };
inline constexpr EnumName<CpSplit> kCpSplitNames[] = {
    {CpSplit::zigzag, "zigzag", "per-document head/tail chunks"},
    {CpSplit::contiguous, "contiguous"},
};
inline CpSplit parse_cp_split(const std::string& name) { return parse_enum(kCpSplitNames, name, "context-parallel split"); }
inline const char* cp_split_name(CpSplit value) { return enum_name(kCpSplitNames, value); }

// The whole sequence as one rank's batch (reuses out's capacity).
void whole_sequence(const PackedBatch& batch, LocalBatch& out);
LocalBatch whole_sequence(const PackedBatch& batch);

// What a zigzag split balances when the mask is not causal: the pairs it lets through
// plus pairs_per_token for each token (its token-linear work over one pair's attention
// work; src/train/flops.h linear_pairs_per_token). Under the causal mask equal tokens
// balance both, and the cuts are the equal-token ones.
struct SplitWork {
  AttentionMask mask;
  double pairs_per_token = 0;
};

// Every rank's pieces of the sequence (rows within each rank in document order).
std::vector<std::vector<DocPiece>> shard_pieces(const PackedBatch& batch, int cp, CpSplit split,
                                                const SplitWork& work = {});
// Rank `rank`'s batch of a sequence split over cp ranks.
LocalBatch shard_sequence(const PackedBatch& batch, int cp, int rank, CpSplit split, const SplitWork& work = {});

}  // namespace lct
