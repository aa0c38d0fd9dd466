// Batch files: packed sequences in HDF5, what `lct make-batch` writes and `lct eval`
// and `lct inspect` read (docs/checkpoints.md, "Batch files"). Datasets, all int32 and
// 1-D: tokens [T]; cu_seqlens [n+1] (document boundaries); optional answer_mask [T] (1
// where the next token is a synthetic retrieval answer), prefix_lens [n] (prefix_lm) and
// segment_ids [T] (shared_question). Attributes of "/": source, first_sequence, seq_len.
#pragma once

#include <cstdint>
#include <string>

#include "attention/attention_mask.h"
#include "data/packing.h"
#include "src/io/h5io.h"

namespace lct {

// Where a batch file's sequences came from (its attributes).
struct BatchFileOrigin {
  std::string source;          // the document source's description
  int64_t first_sequence = 0;  // the stream index of its first sequence
  int64_t seq_len = 0;         // tokens per sequence
};

// Writes `batch` (sequences concatenated: tokens, cu_seqlens over all of them, and the
// mask data they carry) atomically to path; answer_mask only with `answers`.
void write_batch_file(const std::string& path, const PackedBatch& batch, bool answers, const BatchFileOrigin& origin);

// Reads datasets `tokens` and `cu_seqlens`, and the optional `answer_mask`, `prefix_lens`
// and `segment_ids`; validates them (boundaries, token range, 0/1 mask, mask data) and
// derives targets/positions. Throws with one line.
PackedBatch read_batch_file(const std::string& path, int64_t vocab_size);
PackedBatch read_batch(const H5File& file, int64_t vocab_size);  // the same, from an open file
// Keeps the batch's per-document mask data that `mask` reads (prefix_lens for prefix_lm,
// segment_ids for shared_question; refused with one line when the file lacks it), drops
// the rest, and the targets the mask does not train (drop_masked_targets).
void apply_batch_mask(PackedBatch& batch, const AttentionMask& mask, const std::string& path);


}  // namespace lct
