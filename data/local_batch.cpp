#include "data/local_batch.h"

#include <algorithm>

#include "attention/core_attention.h"

namespace lct {

int64_t LocalBatch::num_targets() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

int64_t LocalBatch::attention_pairs() const {
  int64_t pairs = 0;
  for (const DocPiece& p : pieces)
    pairs += lct::attention_pairs(AttentionTask{p.row, 0, p.len, p.pos + p.len, p.pos, 0, p.doc_len});
  return pairs;
}

}  // namespace lct
