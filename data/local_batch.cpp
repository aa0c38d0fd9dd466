#include "data/local_batch.h"

#include <algorithm>
#include <stdexcept>

#include "attention/core_attention.h"

namespace lct {

int64_t LocalBatch::num_targets() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

AttentionTask DocPiece::task(int64_t kv_row, int32_t kv_pos, int32_t kv_len) const {
  AttentionTask t{row, kv_row, len, kv_len, pos, kv_pos, doc_len};
  t.prefix_len = prefix_len;
  t.segment_pos = segment_pos;
  return t;
}

void cut_at_segments(std::vector<DocPiece>& pieces, std::span<const int32_t> seg) {
  if (seg.empty()) return;
  std::vector<DocPiece> out;
  out.reserve(pieces.size());
  for (const DocPiece& p : pieces) {
    const int32_t* s = seg.data() + p.doc_start;  // the document's segment ids
    int32_t question = 0;
    while (question < p.doc_len && s[question] == 0) ++question;
    // the first segment's start: back from the piece's first position
    int32_t b = p.pos;
    if (b < question) b = 0;
    else
      while (b > question && s[b - 1] == s[p.pos]) --b;
    for (int32_t at = p.pos; at < p.end();) {
      int32_t e = at + 1;
      while (e < p.end() && s[e] == s[at]) ++e;
      DocPiece c = p;
      c.pos = at;
      c.len = e - at;
      c.row = p.row + (at - p.pos);
      c.prefix_len = question;
      c.segment_pos = at == p.pos ? b : at;
      out.push_back(c);
      at = e;
    }
  }
  pieces = std::move(out);
}

int64_t LocalBatch::attention_pairs(const AttentionMask& mask) const {
  int64_t pairs = 0;
  for (const DocPiece& p : pieces)
    pairs += lct::attention_pairs(p.task(0, 0, p.key_end(mask)), mask);
  return pairs;
}

void LocalBatch::local_tasks(std::vector<AttentionTask>& tasks, const AttentionMask& mask) const {
  tasks.clear();
  for (size_t i = 0; i < pieces.size();) {
    // the run [i, j) of consecutive pieces of one document in consecutive rows
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].doc == pieces[i].doc && pieces[j].pos == pieces[j - 1].end() &&
           pieces[j].row == pieces[j - 1].row + pieces[j - 1].len)
      ++j;
    const DocPiece& first = pieces[i];
    const int32_t run_end = pieces[j - 1].end();
    for (; i < j; ++i) {
      const DocPiece& p = pieces[i];
      tasks.push_back(p.task(first.row, first.pos, std::min(p.key_end(mask), run_end) - first.pos));
    }
  }
}

void keep_answer_targets(LocalBatch& batch) {
  for (size_t t = 0; t < batch.targets.size(); ++t)
    if (t >= batch.answer_mask.size() || batch.answer_mask[t] == 0) batch.targets[t] = -1;
}

}  // namespace lct
