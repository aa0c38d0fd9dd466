// Attention masks (attention.mask): which keys of its document a query may read.
//
// Every mask lives inside one packed document and is causal (key j <= query i, by
// in-document position) with one exception, prefix_lm's bidirectional prefix:
//
//   causal           every j <= i
//   sliding_window   j > i - W                     (W = window keys, the query's own included)
//   sink_window      j > i - W, or j < S           (S = sink_tokens: StreamingLLM's sinks)
//   chunked          floor(i / B) == floor(j / B)  (B = block_size: Llama 4's chunked attention)
//   prefix_lm        j <= i, or j < P              (P = the document's prefix length)
//   shared_question  segment(j) = 0 or segment(j) = segment(i); segment 0 is the document's
//                    question, 1, 2, ... its answers (contiguous runs of positions)
//   block_sparse     MoBA (arXiv 2502.13189), per KV head group g: j in i's own block of B
//                    positions (causally), or j in one of the k = top_blocks earlier blocks
//                    that i selects for g: the blocks m < floor(i / B) of highest score
//                    qbar_i,g . kbar_m,g (qbar: the mean of query i's rows over g's query
//                    heads, kbar: the mean of block m's keys of g, both after RoPE, kbar
//                    summed exactly: block_sparse.h; all of them if fewer than k; ties to
//                    the later block). Content-dependent, so
//                    its kernel is attention/block_sparse.h; the range form below is the
//                    causal superset (every key a query may select)
//
// and three that read ahead (LongCA-bench's, arXiv 2510.17896, for lct bench and the
// masks experiment: a query that reads the token it predicts cannot be trained on the
// next-token loss, so lct train, eval and generate refuse them,
// AttentionMask::next_token_problem):
//
//   full_document         every j of the document (bidirectional)
//   bidirectional_window  |i - j| < W (W - 1 keys on each side and its own)
//   causal_blockwise      floor(j / B) <= floor(i / B) (blocks of B read each other
//                         causally, and the whole of their own block)
//
// The last two need per-document data, carried by the attention task (core_attention.h:
// AttentionTask::prefix_len, and segment_pos, the first position of the segment its
// queries lie in; a shared_question task never spans two segments).
//
// Every rule is the same shape, which the kernel, the pair counts and the placements
// share: query p reads the keys [0, sink_end) and [lo, hi) (in-document positions,
// sink_end <= lo < hi; hi may pass the document's end, which bounds it), and key k is
// read by the queries [first, last]; lo, hi and sink_end never decrease from one query
// to the next.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "compute/enum_names.h"

namespace lct {

enum class MaskKind {
  causal,
  sliding_window,
  sink_window,
  chunked,
  prefix_lm,
  shared_question,
  full_document,
  bidirectional_window,
  causal_blockwise,
  block_sparse
};

inline constexpr EnumName<MaskKind> kMaskKindNames[] = {
    {MaskKind::causal, "causal", "its own key and every earlier one"},
    {MaskKind::sliding_window, "sliding_window", "the last attention.window keys"},
    {MaskKind::sink_window, "sink_window", "the window and the first attention.sink_tokens"},
    {MaskKind::chunked, "chunked", "causal within its attention.block_size block"},
    {MaskKind::prefix_lm, "prefix_lm", "the whole bidirectional prefix, then causal"},
    {MaskKind::shared_question, "shared_question", "the question and its own answer"},
    {MaskKind::full_document, "full_document", "its whole document (bidirectional; lct bench only)"},
    {MaskKind::bidirectional_window, "bidirectional_window",
     "attention.window - 1 keys on each side (lct bench only)"},
    {MaskKind::causal_blockwise, "causal_blockwise",
     "every earlier attention.block_size block and its own whole (lct bench only)"},
    {MaskKind::block_sparse, "block_sparse",
     "its own attention.block_size block causally and the attention.top_blocks earlier blocks its "
     "query selects (MoBA)"},
};
inline MaskKind parse_mask_kind(const std::string& name) { return parse_enum(kMaskKindNames, name, "attention mask"); }
inline const char* mask_kind_name(MaskKind value) { return enum_name(kMaskKindNames, value); }

struct AttentionMask {
  MaskKind kind = MaskKind::causal;
  int32_t window = 0;       // sliding_window, sink_window: W >= 1
  int32_t sink_tokens = 0;  // sink_window: S >= 0
  int32_t block_size = 0;   // chunked, causal_blockwise, block_sparse: B >= 1
  int32_t top_blocks = 0;   // block_sparse: k >= 0, the earlier blocks a query selects
  bool causal() const { return kind == MaskKind::causal; }
  // Which keys a query reads depends on the queries' and keys' values (block_sparse), not
  // only on positions: mask_keys gives the keys it may read.
  bool content_dependent() const { return kind == MaskKind::block_sparse; }
  // Masks whose rule needs per-document data (prefix lengths, segments).
  bool per_document() const { return kind == MaskKind::prefix_lm || kind == MaskKind::shared_question; }
  // Masks under which a query may read keys after it (so its run of queries cannot be
  // cut where a later key is read: attention_runs' query slices).
  bool reads_ahead() const {
    return kind == MaskKind::prefix_lm || kind == MaskKind::full_document || kind == MaskKind::bidirectional_window ||
           kind == MaskKind::causal_blockwise;
  }
  // Empty when the next-token loss means something under it, else one line naming
  // `command` ("lct train", "lct eval", "lct generate"): the masks that let a query read
  // the token it predicts (all that read ahead but prefix_lm, whose prefix is given).
  std::string next_token_problem(const std::string& command) const;
  // Empty when the parameters the kind uses are valid, else one line naming the key.
  std::string validate() const;
  // e.g. "sliding_window (window 4096)"
  std::string describe() const;
};

// Keys read by one query: [0, sink_end) and [lo, hi), in-document positions.
struct MaskKeys {
  int64_t sink_end, lo, hi;
};
// Queries reading one key: [first, last] (first > last: none).
struct MaskQueries {
  int64_t first, last;
};
constexpr int64_t kMaskUnbounded = std::numeric_limits<int64_t>::max() / 4;

// prefix_len: the document's P (prefix_lm) or question length (shared_question);
// segment_pos: the first position of the segment the query lies in (shared_question).
inline MaskKeys mask_keys(const AttentionMask& m, int64_t prefix_len, int64_t segment_pos, int64_t p) {
  int64_t hi = p + 1, lo = 0, sink = 0;
  switch (m.kind) {
    case MaskKind::causal: break;
    case MaskKind::sliding_window: lo = std::max<int64_t>(0, p - m.window + 1); break;
    case MaskKind::sink_window:
      lo = std::max<int64_t>(0, p - m.window + 1);
      sink = m.sink_tokens;
      break;
    case MaskKind::chunked: lo = p / m.block_size * m.block_size; break;
    case MaskKind::prefix_lm: hi = std::max(hi, prefix_len); break;
    case MaskKind::shared_question:
      lo = std::min(segment_pos, p);
      sink = prefix_len;
      break;
    case MaskKind::full_document: hi = kMaskUnbounded; break;
    case MaskKind::bidirectional_window:
      lo = std::max<int64_t>(0, p - m.window + 1);
      hi = p + m.window;
      break;
    case MaskKind::causal_blockwise: hi = (p / m.block_size + 1) * m.block_size; break;
    case MaskKind::block_sparse: break;  // any earlier key may be selected
  }
  return {std::min(sink, lo), lo, hi};
}

// Keys read by the queries at positions [pos, pos + len) together (len >= 1): the union
// of their mask_keys, again [0, sink_end) and [lo, hi) with sink_end <= lo (every rule's
// lo and hi grow with the query, and each query's run reaches its successor's, so the
// first and last query bound it).
inline MaskKeys mask_run_keys(const AttentionMask& m, int64_t prefix_len, int64_t segment_pos, int64_t pos,
                              int64_t len) {
  const MaskKeys first = mask_keys(m, prefix_len, segment_pos, pos);
  const MaskKeys last = mask_keys(m, prefix_len, segment_pos, pos + len - 1);
  return {std::min(last.sink_end, first.lo), first.lo, last.hi};
}
// The first key of the one contiguous run of keys a kernel call reads for them: 0 when
// they read sinks (the keys between are masked), else lo.
inline int64_t first_key(const MaskKeys& k) { return k.sink_end > 0 ? 0 : k.lo; }

inline MaskQueries mask_queries(const AttentionMask& m, int64_t prefix_len, int64_t segment_pos, int64_t k) {
  int64_t first = k, last = kMaskUnbounded;
  switch (m.kind) {
    case MaskKind::causal: break;
    case MaskKind::sliding_window: last = k + m.window - 1; break;
    case MaskKind::sink_window:
      if (k >= m.sink_tokens) last = k + m.window - 1;
      break;
    case MaskKind::chunked: last = (k / m.block_size + 1) * m.block_size - 1; break;
    case MaskKind::prefix_lm:
      if (k < prefix_len) first = 0;
      break;
    case MaskKind::shared_question:
      // a task's queries lie in the segment from segment_pos: they read the question
      // and their own segment, never a key between the two
      if (k >= prefix_len && k < segment_pos) last = -1;
      break;
    case MaskKind::full_document: first = 0; break;
    case MaskKind::bidirectional_window:
      first = std::max<int64_t>(0, k - m.window + 1);
      last = k + m.window - 1;
      break;
    case MaskKind::causal_blockwise: first = k / m.block_size * m.block_size; break;
    case MaskKind::block_sparse: break;  // any later query may select its block
  }
  return {first, last};
}

}  // namespace lct
