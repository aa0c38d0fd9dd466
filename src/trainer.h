// The single-process training loop: data -> micro-batches -> forward/backward with a
// global-token-count loss -> clipping -> optimizer -> logs, metrics, checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/packing.h"
#include "data/sources.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "parallel/grad_reducer.h"
#include "parallel/process_grid.h"
#include "src/checkpoint.h"
#include "src/config.h"

namespace lct {

// Sets OpenMP and OpenBLAS thread counts; 0 = the cores available to this process
// divided by the MPI ranks on its node. Returns the count used.
int configure_threads(int64_t threads);
std::string blas_description();
// Non-empty when OpenBLAS runs kernels below what the CPU supports (AVX2 kernels on an
// AVX-512 CPU, typically forced by OPENBLAS_CORETYPE): says so and how to change it.
std::string blas_capability_warning();

std::unique_ptr<DocumentSource> make_document_source(const Config& config);
LlamaConfig model_config(const Config& config);  // [model] plus attention.kernel

// SIGINT/SIGTERM handling: the handler records the signal; the training loop checks it
// at each step boundary, writes a checkpoint and returns 128 + signal.
void install_stop_signal_handlers();
extern std::atomic<int> g_stop_signal;

// Data parallelism: with a grid of dp ranks, step k's global batch is sequences
// [next, next + dp * micro_batches) of the stream; dp rank r trains sequences
// next + r * micro_batches + m. The loss is normalised by the global target count
// (one small all-reduce per step), gradients are summed over dp x cp by the bucketed
// GradReducer, so every layout computes the single-process step on the same batch.
// Rank 0 logs, writes metrics and checkpoints; every rank loads checkpoints.
class Trainer {
 public:
  explicit Trainer(const Config& config);  // single process
  Trainer(const Config& config, const ProcessGrid& grid);

  // Continue from a checkpoint: validates its format and that the model matches this
  // run's [model]/[attention] (other differences are warnings), then restores params,
  // optimizer, data position and metrics history. Throws before changing anything.
  void resume_from(const std::string& path);

  StepRecord train_step();  // runs step number steps_done() + 1
  // All remaining steps with logging and checkpoints; returns the process exit code
  // (0, or 128 + signal when stopped by SIGINT/SIGTERM after checkpointing).
  int run();
  int64_t steps_done() const { return state_.step; }
  const TrainerState& state() const { return state_; }
  const std::vector<StepRecord>& history() const { return history_; }
  LlamaModel& model() { return model_; }
  Optimizer& optimizer() { return optimizer_; }
  // Write the full checkpoint for the current step to checkpoint.dir (rank 0 writes,
  // the others wait); returns its path.
  std::string save_checkpoint();

 private:
  void open_metrics_file();
  static const ProcessGrid& single_process_grid();
  Config config_;
  const ProcessGrid& grid_;
  std::unique_ptr<DocumentSource> source_;
  SequencePacker packer_;
  LlamaModel model_;
  OptimizerConfig opt_config_;
  Optimizer optimizer_;
  GradReducer reducer_;
  TrainerState state_;
  std::vector<StepRecord> history_;
  bool stop_requested_ = false;  // some rank got SIGINT/SIGTERM (agreed on every step)
  std::ofstream metrics_;
};

}  // namespace lct
