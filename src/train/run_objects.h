// What a run's configuration turns into: the model config, the document stream and
// the optimizer settings (one place, shared by train, bench, eval and make-batch).
#pragma once

#include <memory>

#include "data/sources.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "src/config/config.h"

namespace lct {

LlamaConfig model_config(const Config& config);  // [model] plus the [attention] kernel
std::unique_ptr<DocumentSource> make_document_source(const Config& config);
OptimizerConfig optimizer_config(const Config& config);

}  // namespace lct
