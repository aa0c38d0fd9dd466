#include "data/nano_batches.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace lct {

std::array<LocalBatch, 2> split_nano_batches(const LocalBatch& batch) {
  const std::vector<DocPiece>& pieces = batch.pieces;
  for (const DocPiece& p : pieces)
    if (p.pos != 0 || p.len != p.doc_len)
      throw std::invalid_argument(
          "ping-pong nano-batches split whole documents (not context-parallel shards)");
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return pieces[a].len > pieces[b].len; });
  std::vector<int> half(pieces.size(), 0);
  int64_t tokens[2] = {0, 0};
  for (size_t i : order) {
    const int h = tokens[1] < tokens[0] ? 1 : 0;
    half[i] = h;
    tokens[h] += pieces[i].len;
  }
  std::array<LocalBatch, 2> out;
  for (int h = 0; h < 2; ++h) {
    LocalBatch& lb = out[size_t(h)];
    int32_t row = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (half[i] != h) continue;
      const DocPiece& src = pieces[i];
      const size_t a = size_t(src.row), e = a + size_t(src.len);
      lb.tokens.insert(lb.tokens.end(), batch.tokens.begin() + a, batch.tokens.begin() + e);
      lb.targets.insert(lb.targets.end(), batch.targets.begin() + a, batch.targets.begin() + e);
      lb.positions.insert(lb.positions.end(), batch.positions.begin() + a,
                          batch.positions.begin() + e);
      if (!batch.answer_mask.empty())
        lb.answer_mask.insert(lb.answer_mask.end(), batch.answer_mask.begin() + a,
                              batch.answer_mask.begin() + e);
      DocPiece p = src;
      p.doc = int32_t(lb.pieces.size());
      p.row = row;
      p.doc_start = row;
      lb.pieces.push_back(p);
      row += src.len;
    }
    lb.group_pieces = {lb.pieces};
    lb.cp_rank = 0;
    lb.sequence_tokens = row;
  }
  return out;
}

}  // namespace lct
