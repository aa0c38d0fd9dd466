// What a run plan's data settings turn into: the document source and the packed
// sequences over it (one place, shared by train, bench, simulate and make-batch).
#pragma once

#include <cstdint>
#include <memory>

#include "data/packing.h"
#include "data/sources.h"
#include "model/llama_config.h"
#include "src/config/sections.h"
#include "src/train/run_plan.h"

namespace lct {

// The source data.* describes; seed is train.seed, vocab_size the synthetic source's.
std::unique_ptr<DocumentSource> make_document_source(const DataConfig& data, int64_t seed, int64_t vocab_size);
// The per-document structure the packer gives documents under `mask` (data.prefix_fraction,
// data.answers_per_question, data.segment_end_id; data/packing.h).
DocStructure doc_structure_of(const DataConfig& data, MaskKind mask);
// Refuses (ConfigError, one line) data the model cannot train on: ids beyond
// model.vocab_size, or only one-token documents (no target). Training and --dry-run.
void check_document_source(const DocumentSource& source, const LlamaConfig& model);

// A run's document stream: the plan's source, checked against its model, and the packer
// cutting it into sequences of data.seq_len tokens with the plan's document structure.
class DocumentStream {
 public:
  explicit DocumentStream(const RunPlan& plan);
  DocumentStream(const DocumentStream&) = delete;
  DocumentStream& operator=(const DocumentStream&) = delete;
  const DocumentSource& source() const { return *source_; }
  SequencePacker& packer() { return packer_; }
  PackedBatch sequence(int64_t index) { return packer_.sequence(index); }

 private:
  std::unique_ptr<DocumentSource> source_;
  SequencePacker packer_;
};

}  // namespace lct
