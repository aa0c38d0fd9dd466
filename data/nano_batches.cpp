#include "data/nano_batches.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace lct {

std::array<LocalBatch, 2> split_nano_batches(const LocalBatch& batch) {
  // every document of the sequence (over the whole context-parallel group) and its length
  const std::vector<std::vector<DocPiece>>& group =
      batch.group_pieces.empty() ? std::vector<std::vector<DocPiece>>{batch.pieces} : batch.group_pieces;
  std::map<int32_t, int32_t> doc_len;  // document -> tokens, in document order
  for (const std::vector<DocPiece>& rank : group)
    for (const DocPiece& p : rank) doc_len[p.doc] = p.doc_len;
  for (const DocPiece& p : batch.pieces)
    if (!doc_len.count(p.doc)) throw std::invalid_argument("split_nano_batches: a piece outside its group");
  std::vector<std::pair<int32_t, int32_t>> order(doc_len.begin(), doc_len.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::map<int32_t, int> half;
  int64_t tokens[2] = {0, 0};
  for (const auto& [doc, len] : order) {
    const int h = tokens[1] < tokens[0] ? 1 : 0;
    half[doc] = h;
    tokens[h] += len;
  }
  // where each document starts in its half's sequence
  std::map<int32_t, int32_t> start;
  int32_t next[2] = {0, 0};
  for (const auto& [doc, len] : doc_len) start[doc] = next[half[doc]], next[half[doc]] += len;

  const auto keep = [&](const std::vector<DocPiece>& pieces, int h) {
    std::vector<DocPiece> out;
    int32_t row = 0;
    for (const DocPiece& src : pieces) {
      if (half.at(src.doc) != h) continue;
      DocPiece p = src;
      p.row = row;
      p.doc_start = start.at(src.doc);
      out.push_back(p);
      row += src.len;
    }
    return out;
  };
  std::array<LocalBatch, 2> out;
  for (int h = 0; h < 2; ++h) {
    LocalBatch& lb = out[size_t(h)];
    for (const DocPiece& src : batch.pieces) {
      if (half.at(src.doc) != h) continue;
      const size_t a = size_t(src.row), e = a + size_t(src.len);
      lb.tokens.insert(lb.tokens.end(), batch.tokens.begin() + a, batch.tokens.begin() + e);
      lb.targets.insert(lb.targets.end(), batch.targets.begin() + a, batch.targets.begin() + e);
      lb.positions.insert(lb.positions.end(), batch.positions.begin() + a,
                          batch.positions.begin() + e);
      if (!batch.answer_mask.empty())
        lb.answer_mask.insert(lb.answer_mask.end(), batch.answer_mask.begin() + a,
                              batch.answer_mask.begin() + e);
      if (!batch.segment_ids.empty())
        lb.segment_ids.insert(lb.segment_ids.end(), batch.segment_ids.begin() + a, batch.segment_ids.begin() + e);
    }
    lb.pieces = keep(batch.pieces, h);
    for (const std::vector<DocPiece>& rank : group) lb.group_pieces.push_back(keep(rank, h));
    lb.cp_rank = batch.cp_rank;
    lb.sequence_tokens = tokens[h];
  }
  return out;
}

}  // namespace lct
