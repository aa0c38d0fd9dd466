// `lct eval`: loss (and optionally every parameter gradient) of a parameter file on an
// explicit packed batch — the hook for comparing lct with any other implementation.
#pragma once

#include <string>

#include "data/packing.h"
#include "model/llama.h"

namespace lct {

// Reads datasets `tokens` int32 [T] and `cu_seqlens` int32 [n+1]; validates them
// (boundaries, token range) and derives targets/positions. Throws with one line.
PackedBatch read_batch_file(const std::string& path, int64_t vocab_size);

// Loads params (and /model config) from a checkpoint or parameter file.
LlamaModel load_model(const std::string& checkpoint_path);

struct EvalResult {
  double loss = 0;
  int64_t targets = 0, tokens = 0, documents = 0;
};

// Mean loss over the batch's targets; if grads_out is non-empty, writes /grads/<hf path>
// for every parameter (gradient of the mean loss) plus root attribute `loss`.
EvalResult run_eval(const std::string& checkpoint_path, const std::string& batch_path,
                    const std::string& grads_out);

}  // namespace lct
