// Full-run checkpoints in one HDF5 file (format "lct-checkpoint", version 1):
//
//   /                      @format @format_version @step
//   /config                string dataset: the resolved run configuration (TOML)
//   /model                 @<Hugging Face LlamaConfig names> @attention_kernel
//   /params/<hf path>      float32 tensors at global shape, @checksum each
//   /optim                 @kind ("adamw" | "sgd") @step_count
//   /optim/exp_avg/<hf path>, /optim/exp_avg_sq/<hf path>   AdamW moments, @checksum
//   /trainer               @step @tokens_seen @next_sequence @seed @run_id
//                          (all randomness is counter-based: a pure function of the
//                          seed and the sequence/element index, so the seed and the
//                          data position are the complete RNG state; @run_id names the
//                          run that owns the folder, src/run_folder.h)
//   /metrics/<column>      one row per step so far, one dataset per column of kColumns
//                          (src/checkpoint.cpp); columns added after the first format are
//                          optional when reading
//
// Files are built in memory, written to <name>.tmp, sealed with their length and
// checksum, fsync'd and renamed into place (write_h5_atomically, src/h5io.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/optimizer.h"
#include "src/h5io.h"

namespace lct {

constexpr int64_t kCheckpointFormatVersion = 1;
constexpr const char* kCheckpointFormat = "lct-checkpoint";

struct StepRecord {
  int64_t step = 0;  // 1-based step just completed
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0, gflops = 0;
  int64_t tokens = 0, targets = 0;
  int64_t answers = 0, answers_correct = 0;  // synthetic retrieval targets
  // Straggler figures over the ranks of the step (1 and 0 in a single process):
  // max / mean of per-rank compute time, and the mean fraction of the step a rank
  // spent waiting in communication.
  double compute_max_over_mean = 1.0, idle_fraction = 0.0;
  // Pipeline figures (0 without pipeline parallelism): the worst stage's bubble (time
  // blocked on activations/gradients from neighbours over the schedule's time), the
  // theoretical (pp - 1) / (m + pp - 1), and the largest stage's peak activation bytes.
  double bubble_fraction = 0.0, bubble_theoretical = 0.0;
  int64_t peak_activation_bytes = 0;
  // Attention work (pairs) of the busiest rank over the mean; context-parallel bytes
  // sent per rank (mean) and the step's fractions of exposed and hidden exchange time
  // (mean over ranks); the largest rank's peak resident memory.
  double attention_pairs_max_over_mean = 1.0, exchange_bytes_sent = 0.0;
  double attention_pairs_served_max_over_mean = 1.0;  // after placement (CAD's plan)
  double exchange_exposed_fraction = 0.0, exchange_hidden_fraction = 0.0;
  int64_t peak_rss_bytes = 0;
  // Per pipeline stage (log and metrics.jsonl only, not checkpointed).
  std::vector<double> stage_bubble;
  std::vector<int64_t> stage_activation_bytes;
  double retrieval_acc() const;              // NaN when the step had no answers
};

struct TrainerState {
  int64_t step = 0;           // steps completed
  int64_t tokens_seen = 0;    // tokens consumed so far
  int64_t next_sequence = 0;  // index of the next sequence of the data stream
  int64_t seed = 0;
  std::string run_id;         // the run that wrote it (src/run_folder.h; "" in old files)
};

struct CheckpointContents {
  int64_t format_version = 0;
  std::string config_toml;
  LlamaConfig model;
  TrainerState state;
  std::vector<StepRecord> history;
  bool has_optimizer = false;
  std::string optimizer_kind;
  int64_t optimizer_step = 0;
};

void write_checkpoint(const std::string& path, const std::string& config_toml,
                      const LlamaModel& model, Optimizer& optimizer, const TrainerState& state,
                      const std::vector<StepRecord>& history);

// Reads and validates the header (format, version, /model, /config, /trainer, metrics)
// without loading tensors. Throws one line naming the file and the problem.
CheckpointContents read_checkpoint_header(const H5File& file);

// The header and every tensor (parameters, optimizer moments) read back with its shape,
// dtype and checksum checked: what a checkpoint must pass before it is renamed into
// place, and before resume picks it. Throws one line naming the file and the problem.
CheckpointContents verify_checkpoint(const H5File& file);

// Loads parameters (and, if `optimizer` is given and the file has moments of the same
// kind, the optimizer state), verifying shapes, dtypes and checksums.
void load_checkpoint_tensors(const H5File& file, LlamaModel& model, Optimizer* optimizer);

// The step_*.h5 files of dir, oldest first (names sort by step); empty if no dir.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Newest step_*.h5 in dir that fully verifies (verify_checkpoint; "" if none); newer
// files that do not are skipped with a warning saying which and why.
std::string latest_checkpoint(const std::string& dir);

}  // namespace lct
