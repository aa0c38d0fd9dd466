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

SequencePacker::SequencePacker(const DocumentSource& source, int64_t seq_len)
    : source_(source), seq_len_(seq_len) {
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
  int64_t filled = 0;
  while (filled < seq_len_) {
    const int64_t take = std::min(source_.doc_length(c.doc) - c.offset, seq_len_ - filled);
    source_.doc_tokens(c.doc, c.offset, take, b.tokens.data() + filled,
                       b.answer_mask.data() + filled);
    filled += take;
    b.cu_seqlens.push_back(int32_t(filled));
    ++c.doc;
    c.offset = 0;
  }
  derive_targets_and_positions(b);
  if (!source_.has_answers()) b.answer_mask.clear();
  // an answer position whose target was cut away (end of a piece) is not an answer
  for (size_t t = 0; t < b.answer_mask.size(); ++t)
    if (b.targets[t] < 0) b.answer_mask[t] = 0;
  return b;
}

}  // namespace lct
