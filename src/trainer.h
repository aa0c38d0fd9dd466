// The single-process training loop: data -> micro-batches -> forward/backward with a
// global-token-count loss -> clipping -> optimizer -> logs, metrics, checkpoints.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/packing.h"
#include "data/sources.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "src/config.h"

namespace lct {

// Sets OpenMP and OpenBLAS thread counts (0 = all cores); returns the count used.
int configure_threads(int64_t threads);
std::string blas_description();

std::unique_ptr<DocumentSource> make_document_source(const Config& config);
LlamaConfig model_config(const Config& config);  // [model] plus attention.kernel

struct StepRecord {
  int64_t step = 0;  // 1-based step just completed
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0, gflops = 0;
  int64_t tokens = 0, targets = 0;
  int64_t answers = 0, answers_correct = 0;  // synthetic retrieval targets
};

class Trainer {
 public:
  explicit Trainer(const Config& config);

  StepRecord train_step();  // runs step number steps_done() + 1
  void run();               // all configured steps with logging and checkpoints
  int64_t steps_done() const { return steps_done_; }
  LlamaModel& model() { return model_; }
  // Write the parameter file for the current step to checkpoint.dir (atomic rename).
  std::string save_checkpoint();

 private:
  Config config_;
  std::unique_ptr<DocumentSource> source_;
  SequencePacker packer_;
  LlamaModel model_;
  OptimizerConfig opt_config_;
  Optimizer optimizer_;
  int64_t steps_done_ = 0;
  std::ofstream metrics_;
};

}  // namespace lct
