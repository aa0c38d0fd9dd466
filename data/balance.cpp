#include "data/balance.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace lct {

std::vector<LocalBatch> pack_for_balance(const std::vector<PackedBatch>& sequences, int ranks,
                                         int micro_batches, int rank,
                                         const std::function<double(int64_t)>& work) {
  if (ranks < 1 || micro_batches < 1 || rank < 0 || rank >= ranks)
    throw std::invalid_argument("pack_for_balance: bad ranks / micro_batches / rank");
  struct Doc {
    int32_t seq, doc, len;
  };
  std::vector<Doc> docs;
  int64_t total_tokens = 0;
  for (size_t s = 0; s < sequences.size(); ++s)
    for (int64_t d = 0; d < sequences[s].num_docs(); ++d) {
      const int32_t len = sequences[s].cu_seqlens[size_t(d + 1)] - sequences[s].cu_seqlens[size_t(d)];
      docs.push_back({int32_t(s), int32_t(d), len});
      total_tokens += len;
    }
  std::stable_sort(docs.begin(), docs.end(), [](const Doc& a, const Doc& b) { return a.len > b.len; });
  const int bins = ranks * micro_batches;
  const double capacity = 2.0 * double(total_tokens) / bins;
  std::vector<double> load(size_t(bins), 0.0);
  std::vector<int64_t> tokens(size_t(bins), 0);
  std::vector<std::vector<Doc>> content(static_cast<size_t>(bins));
  for (const Doc& d : docs) {
    int best = -1;
    for (int b = 0; b < bins; ++b)
      if (double(tokens[size_t(b)] + d.len) <= capacity && (best < 0 || load[size_t(b)] < load[size_t(best)]))
        best = b;
    if (best < 0) best = int(std::min_element(tokens.begin(), tokens.end()) - tokens.begin());
    load[size_t(best)] += work(d.len);
    tokens[size_t(best)] += d.len;
    content[size_t(best)].push_back(d);
  }
  std::vector<LocalBatch> out;
  for (int m = 0; m < micro_batches; ++m) {
    std::vector<Doc>& bin = content[size_t(rank * micro_batches + m)];
    // every bin gets a document (each of the dp x mb sequences holds at least one, and
    // an empty bin always has room), so this only guards odd inputs: a rank then runs
    // fewer micro-batches, which data parallelism allows
    if (bin.empty()) continue;
    // stream order inside a micro-batch
    std::sort(bin.begin(), bin.end(), [](const Doc& a, const Doc& b) {
      return a.seq != b.seq ? a.seq < b.seq : a.doc < b.doc;
    });
    LocalBatch lb;
    int32_t row = 0;
    for (const Doc& d : bin) {
      const PackedBatch& b = sequences[size_t(d.seq)];
      const size_t a = size_t(b.cu_seqlens[size_t(d.doc)]), e = a + size_t(d.len);
      lb.tokens.insert(lb.tokens.end(), b.tokens.begin() + a, b.tokens.begin() + e);
      lb.targets.insert(lb.targets.end(), b.targets.begin() + a, b.targets.begin() + e);
      lb.positions.insert(lb.positions.end(), b.positions.begin() + a, b.positions.begin() + e);
      if (!b.answer_mask.empty())
        lb.answer_mask.insert(lb.answer_mask.end(), b.answer_mask.begin() + a, b.answer_mask.begin() + e);
      if (!b.segment_ids.empty())
        lb.segment_ids.insert(lb.segment_ids.end(), b.segment_ids.begin() + a, b.segment_ids.begin() + e);
      DocPiece p;
      p.doc = int32_t(lb.pieces.size());
      p.doc_len = d.len;
      p.pos = 0;
      p.len = d.len;
      p.row = row;
      p.doc_start = row;
      if (!b.prefix_lens.empty()) p.prefix_len = b.prefix_lens[size_t(d.doc)];
      lb.pieces.push_back(p);
      row += d.len;
    }
    cut_at_segments(lb.pieces, lb.segment_ids);
    lb.group_pieces = {lb.pieces};
    lb.sequence_tokens = row;
    out.push_back(std::move(lb));
  }
  return out;
}

}  // namespace lct
