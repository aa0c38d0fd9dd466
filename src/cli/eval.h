// `lct eval`: loss (and optionally every parameter gradient) of a parameter file on an
// explicit packed batch — the hook for comparing lct with any other implementation.
#pragma once

#include <functional>
#include <string>

#include "data/packing.h"
#include "model/llama.h"
#include "src/io/model_file.h"

namespace lct {

// The file's model config with the attention and RoPE overrides of `adjust` applied and
// validated (throws std::invalid_argument naming the key).
LlamaConfig adjusted_config(const ModelFile& file, const std::function<void(LlamaConfig&)>& adjust);

// Loads params (and /model config) from a checkpoint or parameter file, or a Hugging Face
// Llama folder or safetensors file (src/io/hf_model.h). The optional
// hook may change the attention settings (kernel, DCA keys) before the model is built:
// core attention has no weights, so any checkpoint can be evaluated under DCA.
// With `config_toml`, a checkpoint's /config (its run configuration) is put there ("" for
// a parameter file or a Hugging Face folder), from the same read.
LlamaModel load_model(const std::string& checkpoint_path,
                      const std::function<void(LlamaConfig&)>& adjust = {}, std::string* config_toml = nullptr);

// The first lines of the CSV files lct eval writes (lct inspect recognizes them).
inline constexpr const char* kPerPositionHeader = "position_begin,position_end,targets,mean_loss";
inline constexpr const char* kPerDocumentHeader =
    "document,first_token,tokens,targets,mean_loss,answers,answers_correct,answered";

struct EvalOptions {
  std::string grads_out;          // write /grads/<hf path> and @loss here
  std::string per_position_out;   // write mean loss per in-document position bin (CSV)
  int64_t position_bin = 64;      // bin width for per_position_out
  std::string per_document_out;   // write each document's loss and answers (CSV)
  std::function<void(LlamaConfig&)> adjust_model;  // attention overrides
  Precision precision = Precision::fp32;           // the linear layers' products (train.precision)
};

struct EvalResult {
  double loss = 0;
  int64_t targets = 0, tokens = 0, documents = 0;
  int64_t answers = 0, answers_correct = 0;  // retrieval answers (batches with answer_mask)
  // documents with answers, and those whose every answer's argmax is right (a pass key
  // retrieved whole: greedy decoding would write it digit for digit)
  int64_t answer_documents = 0, answer_documents_correct = 0;
  std::string attention;  // kernel (and DCA settings) used
  std::string precision;  // "fp32", or "bf16 (<what runs it>)"
};

// Mean loss over the batch's targets, plus the optional outputs of EvalOptions.
EvalResult run_eval(const std::string& checkpoint_path, const std::string& batch_path,
                    const EvalOptions& options);

// Writes sequences [first, first + count) of the configured data stream (one packed
// sequence of data.seq_len tokens each) to a batch file for `lct eval`, with the
// answer mask when the source has retrieval answers (synthetic).

}  // namespace lct
