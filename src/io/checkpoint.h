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
//                          run that owns the folder, src/io/run_folder.h)
//   /metrics/<name>        one row per step so far, one dataset per field of the step
//                          metrics schema (src/metrics/step_metrics.h); fields added after
//                          the first format are optional when reading
//
// Files are built in memory, written to a new temporary beside <name>, sealed with their
// length and checksum, fsync'd and renamed into place (write_h5_atomically, src/io/h5io.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/optimizer.h"
#include "src/io/h5io.h"
#include "src/metrics/step_metrics.h"

namespace lct {

constexpr int64_t kCheckpointFormatVersion = 1;
// No step lct can run holds more tokens (2^40: a checkpoint's @tokens_seen is checked
// against it per step).
constexpr int64_t kMaxTokensPerStep = int64_t(1) << 40;
constexpr const char* kCheckpointFormat = "lct-checkpoint";

struct TrainerState {
  int64_t step = 0;           // steps completed
  int64_t tokens_seen = 0;    // tokens consumed so far
  int64_t next_sequence = 0;  // index of the next sequence of the data stream
  int64_t seed = 0;
  std::string run_id;         // the run that wrote it (src/io/run_folder.h; "" in old files)
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
