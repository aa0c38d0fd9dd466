#include "src/io/batch_file.h"

#include <stdexcept>
#include <tuple>
#include <vector>

#include "data/files.h"

namespace lct {

void write_batch_file(const std::string& path, const PackedBatch& b, bool answers, const BatchFileOrigin& origin) {
  std::vector<int32_t> answer_mask;
  if (answers) answer_mask.assign(b.answer_mask.begin(), b.answer_mask.end());
  if (answers && answer_mask.empty()) answer_mask.assign(b.tokens.size(), 0);
  write_h5_atomically(path, [&](H5File& f) {
    f.write_i32("/tokens", {int64_t(b.tokens.size())}, b.tokens.data());
    f.write_i32("/cu_seqlens", {int64_t(b.cu_seqlens.size())}, b.cu_seqlens.data());
    if (!answer_mask.empty()) f.write_i32("/answer_mask", {int64_t(answer_mask.size())}, answer_mask.data());
    if (!b.prefix_lens.empty())  // prefix_lm
      f.write_i32("/prefix_lens", {int64_t(b.prefix_lens.size())}, b.prefix_lens.data());
    if (!b.segment_ids.empty())  // shared_question
      f.write_i32("/segment_ids", {int64_t(b.segment_ids.size())}, b.segment_ids.data());
    f.set_attr("/", "source", origin.source);
    f.set_attr("/", "first_sequence", origin.first_sequence);
    f.set_attr("/", "seq_len", origin.seq_len);
  });
}

PackedBatch read_batch_file(const std::string& path, int64_t vocab_size) {
  const H5File f = H5File::open_read(path);
  return read_batch(f, vocab_size);
}

PackedBatch read_batch(const H5File& f, int64_t vocab_size) {
  const std::string& path = f.path();
  for (const char* ds : {"/tokens", "/cu_seqlens"})
    if (!f.exists(ds)) throw std::runtime_error(path + ": missing dataset " + std::string(ds + 1));
  for (const char* ds : {"/tokens", "/cu_seqlens", "/answer_mask", "/prefix_lens", "/segment_ids"})  // exactly: 7.9 is no offset
    if (f.exists(ds) && f.dtype(ds) != "int32")
      throw std::runtime_error(path + ": " + std::string(ds + 1) + " must be int32, not " + f.dtype(ds));
  PackedBatch b;
  b.tokens = f.read_i32("/tokens");
  b.cu_seqlens = f.read_i32("/cu_seqlens");
  if (f.shape("/tokens").size() != 1 || f.shape("/cu_seqlens").size() != 1)
    throw std::runtime_error(path + ": tokens and cu_seqlens must be 1-D");
  if (b.tokens.empty()) throw std::runtime_error(path + ": tokens is empty");
  const std::string err = check_cu_seqlens(b.cu_seqlens, b.num_tokens());
  if (!err.empty()) throw std::runtime_error(path + ": " + err);
  for (size_t t = 0; t < b.tokens.size(); ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= vocab_size)
      throw std::runtime_error(path + ": tokens[" + std::to_string(t) + "] = " +
                               std::to_string(b.tokens[t]) + " is outside the vocabulary [0, " +
                               std::to_string(vocab_size) + ")");
  derive_targets_and_positions(b);
  if (f.exists("/answer_mask")) {  // optional: synthetic retrieval answers (make-batch)
    const std::vector<int32_t> mask = f.read_i32("/answer_mask");
    if (f.shape("/answer_mask").size() != 1 || mask.size() != b.tokens.size())
      throw std::runtime_error(path + ": answer_mask must be 1-D with one entry per token (" +
                               std::to_string(b.tokens.size()) + ")");
    b.answer_mask.assign(mask.size(), 0);
    for (size_t t = 0; t < mask.size(); ++t) {
      if (mask[t] != 0 && mask[t] != 1)
        throw std::runtime_error(path + ": answer_mask[" + std::to_string(t) + "] = " +
                                 std::to_string(mask[t]) + " (must be 0 or 1)");
      b.answer_mask[t] = uint8_t(mask[t] == 1 && b.targets[t] >= 0);
    }
  }
  // optional: per-document mask data (prefix_lm, shared_question; make-batch writes them)
  for (const auto& [ds, dst, count, what] :
       {std::tuple{"/prefix_lens", &b.prefix_lens, b.num_docs(), "document"},
        std::tuple{"/segment_ids", &b.segment_ids, b.num_tokens(), "token"}}) {
    if (!f.exists(ds)) continue;
    if (f.shape(ds).size() != 1)
      throw std::runtime_error(path + ": " + std::string(ds + 1) + " must be 1-D with one entry per " + what + " (" +
                               std::to_string(count) + ")");
    *dst = f.read_i32(ds);
  }
  if (const std::string err = check_mask_data(b); !err.empty()) throw std::runtime_error(path + ": " + err);
  return b;
}

void apply_batch_mask(PackedBatch& b, const AttentionMask& mask, const std::string& path) {
  const bool prefix = mask.kind == MaskKind::prefix_lm, segments = mask.kind == MaskKind::shared_question;
  if (prefix && b.prefix_lens.empty())
    throw std::runtime_error(path + ": attention.mask = prefix_lm needs the batch's prefix_lens (one per document; "
                                    "lct make-batch --attention.mask prefix_lm --data.prefix_fraction F writes them)");
  if (segments && b.segment_ids.empty())
    throw std::runtime_error(path + ": attention.mask = shared_question needs the batch's segment_ids (one per token; "
                                    "lct make-batch --attention.mask shared_question --data.answers_per_question N "
                                    "writes them)");
  if (!prefix) b.prefix_lens.clear();
  if (!segments) b.segment_ids.clear();
  drop_masked_targets(b);
  for (size_t t = 0; t < b.answer_mask.size(); ++t)
    if (b.targets[t] < 0) b.answer_mask[t] = 0;
}

}  // namespace lct
