#include "data/context_shards.h"

#include <algorithm>
#include <stdexcept>

#include "attention/core_attention.h"

namespace lct {

namespace {
// Copies the rows of `pieces` (in order) out of the whole sequence.
void gather_rows(const PackedBatch& b, const std::vector<DocPiece>& pieces, LocalBatch& out) {
  out.tokens.clear();
  out.targets.clear();
  out.positions.clear();
  out.answer_mask.clear();
  out.segment_ids.clear();
  for (const DocPiece& p : pieces) {
    const size_t a = size_t(p.seq_row()), e = a + size_t(p.len);
    out.tokens.insert(out.tokens.end(), b.tokens.begin() + a, b.tokens.begin() + e);
    out.targets.insert(out.targets.end(), b.targets.begin() + a, b.targets.begin() + e);
    out.positions.insert(out.positions.end(), b.positions.begin() + a, b.positions.begin() + e);
    if (!b.answer_mask.empty())
      out.answer_mask.insert(out.answer_mask.end(), b.answer_mask.begin() + a,
                             b.answer_mask.begin() + e);
    if (!b.segment_ids.empty())
      out.segment_ids.insert(out.segment_ids.end(), b.segment_ids.begin() + a, b.segment_ids.begin() + e);
  }
}

// Appends a piece to a rank's list, merging it into the previous one when it continues it.
void add_piece(std::vector<DocPiece>& list, int64_t& rows, int32_t doc, int32_t doc_start,
               int32_t doc_len, int32_t pos, int32_t len) {
  if (len <= 0) return;
  if (!list.empty() && list.back().doc == doc && list.back().pos + list.back().len == pos) {
    list.back().len += len;
  } else {
    DocPiece p;
    p.doc = doc;
    p.doc_len = doc_len;
    p.pos = pos;
    p.len = len;
    p.row = int32_t(rows);
    p.doc_start = doc_start;
    list.push_back(p);
  }
  rows += len;
}
}  // namespace

void whole_sequence(const PackedBatch& b, LocalBatch& out) {
  out.tokens.assign(b.tokens.begin(), b.tokens.end());
  out.targets.assign(b.targets.begin(), b.targets.end());
  out.positions.assign(b.positions.begin(), b.positions.end());
  out.answer_mask.assign(b.answer_mask.begin(), b.answer_mask.end());
  out.segment_ids.assign(b.segment_ids.begin(), b.segment_ids.end());
  out.pieces.clear();
  for (int64_t d = 0; d < b.num_docs(); ++d) {
    const int32_t start = b.cu_seqlens[size_t(d)], len = b.cu_seqlens[size_t(d + 1)] - start;
    DocPiece p;
    p.doc = int32_t(d);
    p.doc_len = len;
    p.pos = 0;
    p.len = len;
    p.row = start;
    p.doc_start = start;
    if (!b.prefix_lens.empty()) p.prefix_len = b.prefix_lens[size_t(d)];
    out.pieces.push_back(p);
  }
  cut_at_segments(out.pieces, b.segment_ids);
  out.group_pieces.resize(1);
  out.group_pieces[0] = out.pieces;
  out.cp_rank = 0;
  out.sequence_tokens = b.num_tokens();
}

LocalBatch whole_sequence(const PackedBatch& b) {
  LocalBatch out;
  whole_sequence(b, out);
  return out;
}

namespace {

// Document d's 2 cp chunk boundaries for the zigzag split (doc_tasks: scratch).
std::vector<int32_t> zigzag_cuts(const PackedBatch& b, int64_t d, int cp, const SplitWork& work,
                                 std::vector<AttentionTask>& doc_tasks) {
  // chunk boundaries: equal tokens under the causal mask (the head and tail chunks
  // then pair up to equal pairs); under another mask, equal shares of the work (a
  // sliding window's first chunk has fewer pairs than the rest)
  const int32_t start = b.cu_seqlens[size_t(d)], L = b.cu_seqlens[size_t(d + 1)] - start;
  std::vector<int32_t> cuts(size_t(2 * cp + 1));
  for (int c = 0; c <= 2 * cp; ++c) cuts[size_t(c)] = int32_t(int64_t(c) * L / (2 * cp));
  if (!work.mask.causal()) {
    doc_tasks.clear();  // the document's tasks under its prefix or segments
    append_document_tasks(doc_tasks, 0, L, b.prefix_lens.empty() ? 0 : b.prefix_lens[size_t(d)],
                          b.segment_ids.empty() ? nullptr : b.segment_ids.data() + start);
    const auto work_below = [&](int64_t x) {  // work of the document's rows [0, x)
      int64_t pairs = 0;
      for (AttentionTask t : doc_tasks) {
        if (t.q_pos >= x) break;
        t.q_len = int32_t(std::min<int64_t>(t.q_len, x - t.q_pos));
        pairs += attention_pairs(t, work.mask);
      }
      return double(pairs) + work.pairs_per_token * double(x);
    };
    const double total = work_below(L);
    for (int c = 1; c < 2 * cp; ++c) {  // the first x with work_below(x) >= c / 2cp of it
      int64_t lo = cuts[size_t(c - 1)], hi = L;
      const double want = total * c / (2 * cp);
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (work_below(mid) >= want) hi = mid;
        else lo = mid + 1;
      }
      cuts[size_t(c)] = int32_t(lo);
    }
  }
  return cuts;
}

// No rank may be left without tokens (every layer phase and exchange needs its rows):
// when short documents leave one empty, it takes the last token of the rank holding the
// most (ties: the lowest), which keeps both ranks' pieces in document order.
void give_every_rank_a_token(std::vector<std::vector<DocPiece>>& pieces, std::vector<int64_t>& rows) {
  const int cp = int(pieces.size());
  for (int r = 0; r < cp; ++r)
    while (rows[size_t(r)] == 0) {
      const size_t s = size_t(std::max_element(rows.begin(), rows.end()) - rows.begin());
      if (rows[s] < 2) throw std::invalid_argument("shard_pieces: fewer tokens than ranks");
      DocPiece& last = pieces[s].back();
      DocPiece moved = last;
      if (last.len >= 2) {
        moved.pos = last.pos + last.len - 1;
        moved.len = 1;
        last.len -= 1;
      } else {
        pieces[s].pop_back();
      }
      moved.row = 0;
      pieces[size_t(r)].push_back(moved);
      rows[s] -= moved.len;
      rows[size_t(r)] += moved.len;
    }
}

}  // namespace

std::vector<std::vector<DocPiece>> shard_pieces(const PackedBatch& b, int cp, CpSplit split,
                                                const SplitWork& work) {
  if (cp < 1) throw std::invalid_argument("shard_pieces: cp must be >= 1");
  std::vector<std::vector<DocPiece>> pieces(static_cast<size_t>(cp));
  std::vector<int64_t> rows(static_cast<size_t>(cp), 0);
  const int64_t T = b.num_tokens();
  std::vector<AttentionTask> doc_tasks;
  for (int64_t d = 0; d < b.num_docs(); ++d) {
    const int32_t start = b.cu_seqlens[size_t(d)], L = b.cu_seqlens[size_t(d + 1)] - start;
    if (split == CpSplit::contiguous) {
      for (int r = 0; r < cp; ++r) {  // rank r's rows [r T / cp, (r + 1) T / cp)
        const int64_t lo = std::max<int64_t>(start, r * T / cp);
        const int64_t hi = std::min<int64_t>(start + L, (r + 1) * T / cp);
        add_piece(pieces[size_t(r)], rows[size_t(r)], int32_t(d), start, L, int32_t(lo - start),
                  int32_t(hi - lo));
      }
      continue;
    }
    if (L < 2 * cp) {  // too short to cut: whole, to the rank with the fewest tokens
      const int r = int(std::min_element(rows.begin(), rows.end()) - rows.begin());
      add_piece(pieces[size_t(r)], rows[size_t(r)], int32_t(d), start, L, 0, L);
      continue;
    }
    const std::vector<int32_t> cuts = zigzag_cuts(b, d, cp, work, doc_tasks);
    const auto cut = [&](int c) { return cuts[size_t(c)]; };
    for (int r = 0; r < cp; ++r) {
      const int head = r, tail = 2 * cp - 1 - r;
      add_piece(pieces[size_t(r)], rows[size_t(r)], int32_t(d), start, L, cut(head),
                cut(head + 1) - cut(head));
      add_piece(pieces[size_t(r)], rows[size_t(r)], int32_t(d), start, L, cut(tail),
                cut(tail + 1) - cut(tail));
    }
  }
  give_every_rank_a_token(pieces, rows);
  for (std::vector<DocPiece>& list : pieces) {  // per-document mask data
    if (!b.prefix_lens.empty())
      for (DocPiece& p : list) p.prefix_len = b.prefix_lens[size_t(p.doc)];
    cut_at_segments(list, b.segment_ids);
  }
  return pieces;
}

LocalBatch shard_sequence(const PackedBatch& b, int cp, int rank, CpSplit split, const SplitWork& work) {
  if (rank < 0 || rank >= cp) throw std::invalid_argument("shard_sequence: rank out of range");
  LocalBatch out;
  out.group_pieces = shard_pieces(b, cp, split, work);
  out.pieces = out.group_pieces[size_t(rank)];
  out.cp_rank = rank;
  out.sequence_tokens = b.num_tokens();
  gather_rows(b, out.pieces, out);
  return out;
}

}  // namespace lct
