// What one rank trains of a packed sequence, under every layout: a LocalBatch holds some
// runs of tokens ("pieces", DocPiece) of the sequence's documents, with each token's
// target and in-document position taken from the whole sequence *before* it is split, so
// a piece at the end of a rank's rows still predicts the next token of its document.
// Without context parallelism it is the whole sequence, one piece per document
// (whole_sequence); with it, the rank's share (data/context_shards.h); with
// parallel.dp_balance = packing, documents re-packed by work (data/balance.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attention/attention_mask.h"
#include "attention/core_attention.h"
#include "compute/enum_names.h"

namespace lct {

// A run of one document's tokens held by one rank.
struct DocPiece {
  int32_t doc = 0;      // index of the document in the packed sequence
  int32_t doc_len = 0;  // tokens in the whole document
  int32_t pos = 0;      // in-document offset of the first token
  int32_t len = 0;      // tokens
  int32_t row = 0;      // first row in the holder's local arrays
  int32_t seq_row() const { return doc_start + pos; }  // first row in the whole sequence
  int32_t doc_start = 0;  // row of the document's first token in the whole sequence
  // Per-document mask data (attention_mask.h), as AttentionTask carries it: prefix_lm's
  // prefix P (PackedBatch::prefix_lens), or shared_question's question length; and under
  // shared_question the first position of the segment (0: the question) its tokens lie
  // in: a piece never spans two segments (cut_at_segments).
  int32_t prefix_len = 0;
  int32_t segment_pos = 0;

  int32_t end() const { return pos + len; }
  // The keys its queries read, in-document positions: [0, sink_end) and [lo, hi)
  // (mask_run_keys). The one place that says which keys a piece needs: the exchanges of
  // context parallelism (data/key_runs.h) and the simulator use it.
  MaskKeys keys(const AttentionMask& mask) const {
    if (len <= 0) return {0, pos, pos};
    MaskKeys k = mask_run_keys(mask, prefix_len, segment_pos, pos, len);
    k.hi = std::min<int64_t>(k.hi, std::max(doc_len, end()));  // masks that read ahead stop at the end
    return k;
  }
  // Its queries read keys of [0, key_end) only: their causal prefix, and under prefix_lm
  // the whole prefix (bidirectional, so the prefix's first queries read ahead).
  int32_t key_end(const AttentionMask& mask) const { return int32_t(keys(mask).hi); }
  // The task of its queries (at its row) against the keys [kv_pos, kv_pos + kv_len) of
  // its document, held from row kv_row: the one place a piece becomes a task.
  AttentionTask task(int64_t kv_row, int32_t kv_pos, int32_t kv_len) const;
  // `next` continues this piece: the same document and segment, the next position.
  bool continued_by(const DocPiece& next) const {
    return next.doc == doc && next.pos == end() && next.segment_pos == segment_pos;
  }
};

// Gives pieces their shared_question structure from the segment ids of the sequence
// their doc_start rows refer to (empty: nothing to do): prefix_len becomes the
// document's question length, and a piece spanning segments is cut into one piece per
// segment (consecutive rows), each with its segment_pos.
void cut_at_segments(std::vector<DocPiece>& pieces, std::span<const int32_t> segment_ids);

struct LocalBatch {
  std::vector<int32_t> tokens;       // [T_local]
  std::vector<int32_t> targets;      // [T_local] next token of the document, or -1
  std::vector<int32_t> positions;    // [T_local] in-document offsets
  std::vector<uint8_t> answer_mask;  // [T_local] (may be empty)
  std::vector<int32_t> segment_ids;  // [T_local] shared_question's segments (else empty)
  std::vector<DocPiece> pieces;      // this rank's pieces, in local row order
  // Every rank's pieces of the same sequence (cp entries; one without context
  // parallelism), and which of them this is: what context-parallel placements need.
  std::vector<std::vector<DocPiece>> group_pieces;
  int cp_rank = 0;
  int64_t sequence_tokens = 0;       // T of the whole sequence

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_targets() const;
  // Attention work of this rank's queries: every piece against the keys it reads (its
  // document's [0, key_end), attention_pairs of core_attention.h); summed over a group,
  // the sequence's pairs.
  int64_t attention_pairs(const AttentionMask& mask = {}) const;
  // What colocated attention runs: each piece against the keys it reads (DocPiece::
  // key_end) among the rows this batch holds of its document, the run of consecutive
  // pieces it lies in (a whole document without context parallelism, one piece per
  // shared_question segment).
  void local_tasks(std::vector<AttentionTask>& tasks, const AttentionMask& mask) const;
};

// train.loss_on: whose next-token losses train the model: every token's, or only the
// answers' (the tokens answer_mask marks, in sources that mark them: synthetic key-value
// retrieval, passkey). The loss and its gradient are then the mean over answer tokens.
enum class LossOn { all, answers };
inline constexpr EnumName<LossOn> kLossOnNames[] = {{LossOn::all, "all"}, {LossOn::answers, "answers", "the answer tokens only: synthetic and passkey sources"}};
inline LossOn parse_loss_on(const std::string& name) { return parse_enum(kLossOnNames, name, "loss target"); }
inline const char* loss_on_name(LossOn value) { return enum_name(kLossOnNames, value); }
// train.loss_on = answers: every target that is not an answer becomes -1 (no loss).
void keep_answer_targets(LocalBatch& batch);

}  // namespace lct
