#include "data/packing.h"

#include <algorithm>
#include <string>

namespace lct {

int64_t PackedBatch::num_targets() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

void derive_targets_and_positions(PackedBatch& b) {
  const size_t T = b.tokens.size();
  b.targets.assign(T, -1);
  b.positions.assign(T, 0);
  for (size_t d = 0; d + 1 < b.cu_seqlens.size(); ++d) {
    const int32_t begin = b.cu_seqlens[d], end = b.cu_seqlens[d + 1];
    for (int32_t t = begin; t < end; ++t) {
      b.positions[t] = t - begin;
      if (t + 1 < end) b.targets[t] = b.tokens[t + 1];
    }
  }
}

std::string check_cu_seqlens(std::span<const int32_t> cu, int64_t num_tokens) {
  if (cu.size() < 2) return "cu_seqlens needs at least 2 entries, got " + std::to_string(cu.size());
  if (cu[0] != 0) return "cu_seqlens[0] must be 0, got " + std::to_string(cu[0]);
  for (size_t i = 1; i < cu.size(); ++i)
    if (cu[i] <= cu[i - 1])
      return "cu_seqlens must be strictly increasing, but cu_seqlens[" + std::to_string(i) +
             "] = " + std::to_string(cu[i]) + " <= cu_seqlens[" + std::to_string(i - 1) +
             "] = " + std::to_string(cu[i - 1]);
  if (cu.back() != num_tokens)
    return "cu_seqlens ends at " + std::to_string(cu.back()) + " but there are " +
           std::to_string(num_tokens) + " tokens";
  return {};
}

std::string check_mask_data(const PackedBatch& b) {
  const int64_t n = b.num_docs();
  if (!b.prefix_lens.empty()) {
    if (int64_t(b.prefix_lens.size()) != n)
      return "prefix_lens has " + std::to_string(b.prefix_lens.size()) + " entries for " + std::to_string(n) +
             " documents";
    for (int64_t d = 0; d < n; ++d) {
      const int32_t len = b.cu_seqlens[size_t(d + 1)] - b.cu_seqlens[size_t(d)], p = b.prefix_lens[size_t(d)];
      if (p < 0 || p > len)
        return "prefix_lens[" + std::to_string(d) + "] = " + std::to_string(p) + " is outside its document of " +
               std::to_string(len) + " tokens";
    }
  }
  if (!b.segment_ids.empty()) {
    if (b.segment_ids.size() != b.tokens.size())
      return "segment_ids has " + std::to_string(b.segment_ids.size()) + " entries for " +
             std::to_string(b.tokens.size()) + " tokens";
    for (int64_t d = 0; d < n; ++d)
      for (int32_t t = b.cu_seqlens[size_t(d)]; t < b.cu_seqlens[size_t(d + 1)]; ++t) {
        const int32_t id = b.segment_ids[size_t(t)];
        const int32_t prev = t > b.cu_seqlens[size_t(d)] ? b.segment_ids[size_t(t - 1)] : 0;
        if (id < 0 || id < prev)
          return "segment_ids[" + std::to_string(t) + "] = " + std::to_string(id) + " after " + std::to_string(prev) +
                 ": within a document the ids are a run of 0s (the question), then runs of increasing positive ids "
                 "(the answers)";
      }
  }
  return {};
}

void drop_masked_targets(PackedBatch& b) {
  if (b.prefix_lens.empty() && b.segment_ids.empty()) return;
  for (int64_t d = 0; d < b.num_docs(); ++d) {
    const int32_t begin = b.cu_seqlens[size_t(d)], end = b.cu_seqlens[size_t(d + 1)];
    for (int32_t t = begin; t + 1 < end; ++t) {
      if (!b.prefix_lens.empty() && t - begin + 1 < b.prefix_lens[size_t(d)]) b.targets[size_t(t)] = -1;
      if (!b.segment_ids.empty() && b.segment_ids[size_t(t + 1)] != b.segment_ids[size_t(t)])
        b.targets[size_t(t)] = -1;
    }
  }
}

int64_t DocStructure::prefix(int64_t len) const {
  return std::min<int64_t>(len, int64_t(prefix_fraction * double(len)));
}

int32_t DocStructure::segment(int64_t len, int64_t p) const {
  const int64_t q = prefix(len), rest = len - q;
  if (p < q) return 0;
  // answer k (1-based) holds [q + (k-1) rest / a, q + k rest / a): the largest k with
  // q + (k-1) rest / a <= p
  int64_t k = (p - q) * answers / rest + 1;
  while (k > 1 && q + (k - 1) * rest / answers > p) --k;
  while (k < answers && q + k * rest / answers <= p) ++k;
  return int32_t(k);
}

void DocStructure::append_piece(PackedBatch& b, int64_t len, int64_t offset, int64_t take,
                                std::span<const int32_t> ends) const {
  if (marks == Marks::segments) {  // position p lies in segment #(ends <= p)
    auto e = std::upper_bound(ends.begin(), ends.end(), int32_t(offset));
    for (int64_t p = offset; p < offset + take; ++p) {
      while (e != ends.end() && *e <= p) ++e;
      b.segment_ids.push_back(int32_t(e - ends.begin()));
    }
  } else if (marks == Marks::prefix) {
    const int64_t P = ends.empty() ? 0 : ends.front();
    b.prefix_lens.push_back(int32_t(std::clamp<int64_t>(P - offset, 0, take)));
  } else if (answers > 0) {
    for (int64_t i = 0; i < take; ++i) b.segment_ids.push_back(segment(len, offset + i));
  } else if (prefix_fraction > 0) {
    b.prefix_lens.push_back(int32_t(std::clamp<int64_t>(prefix(len) - offset, 0, take)));
  }
}

SequencePacker::SequencePacker(const DocumentSource& source, int64_t seq_len, const DocStructure& structure)
    : source_(source), seq_len_(seq_len), structure_(structure) {
  cache_[0] = StreamCursor{};
}

StreamCursor SequencePacker::cursor_for(int64_t index) {
  auto it = cache_.upper_bound(index);
  --it;  // largest cached index <= index (0 is always cached)
  int64_t at = it->first;
  StreamCursor c = it->second;
  const int64_t first_doc = c.doc, first_at = at;
  while (at < index) {
    if (c.doc - first_doc > kMaxSeekDocuments)
      throw SeekTooFar("sequence " + std::to_string(index) + " lies more than " +
                       std::to_string(kMaxSeekDocuments) + " documents into the data stream (at sequence " +
                       std::to_string(at) + "): no run reads that far");
    // advance one sequence: consume seq_len tokens of the stream
    int64_t remaining = seq_len_;
    while (remaining > 0) {
      const int64_t left_in_doc = source_.doc_length(c.doc) - c.offset;
      if (left_in_doc <= remaining) {
        remaining -= left_in_doc;
        ++c.doc;
        c.offset = 0;
      } else {
        c.offset += remaining;
        remaining = 0;
      }
    }
    ++at;
    if (at % kCacheEvery == 0) cache_[at] = c;
    // only a long walk asks (a training step's one-sequence walk never does: a signal
    // there is the step loop's to handle, with a checkpoint)
    if (stop_ && (at - first_at) % kCheckEvery == 0 && stop_())
      throw SeekInterrupted("stopped while seeking the data stream to sequence " + std::to_string(index) +
                            " (at sequence " + std::to_string(at) + ")");
  }
  // remember the latest position too, so the next sequential call is one step
  if (cache_.size() > 1 && std::prev(cache_.end())->first % kCacheEvery != 0)
    cache_.erase(std::prev(cache_.end()));
  cache_[index] = c;
  return c;
}

PackedBatch SequencePacker::sequence(int64_t index) {
  StreamCursor c = cursor_for(index);
  PackedBatch b;
  b.tokens.resize(size_t(seq_len_));
  b.answer_mask.assign(size_t(seq_len_), 0);
  b.cu_seqlens.push_back(0);
  if (structure_.segmented()) b.segment_ids.reserve(size_t(seq_len_));
  int64_t filled = 0;
  while (filled < seq_len_) {
    const int64_t doc_len = source_.doc_length(c.doc);
    const int64_t take = std::min(doc_len - c.offset, seq_len_ - filled);
    source_.doc_tokens(c.doc, c.offset, take, b.tokens.data() + filled,
                       b.answer_mask.data() + filled);
    if (structure_.marks != DocStructure::Marks::none) source_.segment_ends(c.doc, ends_);
    structure_.append_piece(b, doc_len, c.offset, take, ends_);
    filled += take;
    b.cu_seqlens.push_back(int32_t(filled));
    ++c.doc;
    c.offset = 0;
  }
  derive_targets_and_positions(b);
  drop_masked_targets(b);
  if (!source_.has_answers()) b.answer_mask.clear();
  // an answer position whose target was cut away (end of a piece) is not an answer
  for (size_t t = 0; t < b.answer_mask.size(); ++t)
    if (b.targets[t] < 0) b.answer_mask[t] = 0;
  return b;
}

}  // namespace lct
