// What a run's configuration turns into: the document stream and the optimizer
// settings (one place, shared by the run plan, train, bench, eval and make-batch).
#pragma once

#include <memory>

#include "data/packing.h"
#include "data/sources.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "src/config/config.h"

namespace lct {

std::unique_ptr<DocumentSource> make_document_source(const Config& config);
// The per-document structure the packer gives documents (data.prefix_fraction,
// data.answers_per_question; data/packing.h).
DocStructure doc_structure_of(const Config& config);
// Refuses (ConfigError, one line) data the model cannot train on: ids beyond
// model.vocab_size, or only one-token documents (no target). Training and --dry-run.
void check_document_source(const DocumentSource& source, const LlamaConfig& model);
OptimizerConfig optimizer_config(const Config& config);

}  // namespace lct
