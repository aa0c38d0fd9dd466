// The training loop: data -> micro-batches -> pipeline schedule (forward/backward) with a
// global-token-count loss -> clipping -> optimizer -> logs, metrics, checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/balance.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "parallel/cad_attention.h"
#include "parallel/collectives.h"
#include "parallel/grad_reducer.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_grid.h"
#include "src/io/checkpoint.h"
#include "src/io/output_files.h"
#include "src/io/run_folder.h"
#include "src/util/machine.h"
#include "src/train/heartbeat.h"
#include "src/util/heartbeat.h"
#include "src/train/make_placement.h"
#include "src/train/rank_agreement.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"

namespace lct {

// SIGINT/SIGTERM handling: the handler records the (first) signal; the ranks agree on it
// in each step's all-reduce and again right after each periodic checkpoint. Seen in a
// step, the loop writes a checkpoint of that step; seen after a periodic checkpoint (a
// signal during its write), it stops at that checkpoint without training another step.
// Either way run() returns 128 + signal. Installed over any disposition (SIG_IGN too);
// the other signals that end the process remove its temporaries first (src/util/signals.h).
void install_stop_signal_handlers();
extern std::atomic<int> g_stop_signal;

// One training run on a process grid (a single process by default).
//
// Data: each rank trains what the step model (src/train/step_model.h) gives it of the
// step's global batch, sequences [next, next + dp * micro_batches) of the stream. The loss
// is normalised by the global target count (one small all-reduce per step), so every
// layout computes the single-process step on the same batch.
// Execution: the trainer builds the placement (src/train/make_placement.h) and the
// pipeline schedule the run plan chose and runs the PipelineExecutor; every MPI call (executor, placements, reductions, the step's
// small collectives) is in parallel/. With pp = 1 the executor is plain gradient
// accumulation. Each stage reduces the gradients it owns over
// dp x cp, the grad norm sums squares over stages, and the optimizer updates the
// stage's own parameters.
// Checkpoints: every stage's tensors are gathered to rank 0, which writes one
// layout-free file; every rank loads whole checkpoints, so any checkpoint resumes
// under any layout. Rank 0 logs and writes metrics.
class Trainer {
 public:
  // Single process: `plan` made for one rank; its machine choices are resolved here.
  explicit Trainer(RunPlan plan);
  // The plan must be made for this grid (make_run_plan(config, grid.world_size())) and
  // have its machine choices resolved (resolve_machine_choices); the trainer only reads it.
  Trainer(const RunPlan& plan, const ProcessGrid& grid);

  // Continue from a checkpoint: validates its format and that its model and attention
  // function match this run's (the keys' scopes, src/config/config_text.h; other
  // differences are warnings), then restores params, optimizer, data position and
  // metrics history. Throws before changing anything.
  void resume_from(const std::string& path);
  // A fresh run's parameters from a Hugging Face Llama folder or safetensors file
  // (train.init_from, src/io/hf_model.h) in place of the seeded init: every rank reads
  // it (each host must see the path, as data.path). Throws before changing anything.
  void init_from(const std::string& path);

  StepRecord train_step();  // runs step number state().step + 1
  // All remaining steps with logging and checkpoints; returns the process exit code
  // (0, or 128 + signal when stopped by SIGINT/SIGTERM after checkpointing).
  int run();
  const TrainerState& state() const { return state_; }
  const std::vector<StepRecord>& history() const { return history_; }
  LlamaModel& model() { return model_; }
  Optimizer& optimizer() { return optimizer_; }
  // Write the full checkpoint for the current step to checkpoint.dir (rank 0 writes,
  // the others wait); returns its path.
  std::string save_checkpoint();

 private:
  // Checks checkpoint.dir on every rank, then rank 0 takes it for this run (run()).
  void claim_run_folder();
  void take_local_batches();  // this rank's share of the step's micro-batches, into local_
  struct StepCounts {
    int64_t targets = 0, tokens = 0, pairs = 0;  // over dp x cp
    double my_pairs = 0;                          // this rank's
    int64_t my_tokens = 0;                        // this rank's
  };
  StepCounts count_step(double& comm_s);
  void refuse_non_finite(const StepRecord& r) const;
  void prepare_passes();
  void update_weights(StepRecord& r, int64_t step, double& comm_s);
  void record_rank_figures(StepRecord& r, const PipelineStepStats& pipe, const PlacementStats& placement, double step_s,
                           double comm_s, const StepCounts& counts);
  void require_shared_folder() const;
  void open_metrics_file();
  void log_header() const;
  void log_placement() const;
  RunPlan plan_;  // the resolved run (src/train/run_plan.h)
  const ProcessGrid& grid_;
  RankHosts hosts_;  // every rank's host (names ranks in the log and in errors)
  DocumentStream stream_;
  LlamaModel model_;               // this rank's stage
  std::vector<ArenaRange> owned_, counted_;  // this stage's arena ranges (stage.h)
  ArenaRange tied_;                          // its tied embedding copy, if any
  Optimizer optimizer_;
  GradReducer reducer_;
  PlacementChoice placement_;                          // the plan's attention placement
  std::unique_ptr<RunFolderLock> folder_lock_;        // rank 0: this run's folder, locked
  PipelineExecutor executor_;
  TrainerState state_;
  bool resumed_ = false;  // state_ came from a checkpoint
  // bf16: the model's weight copies hold the current params (the last optimizer step
  // wrote them), so the step needs no refresh pass; false until a step did, and after
  // anything else changes params (resume_from, init_from)
  bool copies_follow_params_ = false;
  WeightCopies copies_;  // the model's (bf16), for the optimizer to write
  StepProgress progress_;                 // where the step is (the model moves it)
  std::unique_ptr<Heartbeat> heartbeat_;  // rank 0, train.heartbeat_s > 0: prints it in long steps
  std::vector<std::string> own_checkpoints_;  // rank 0: this run's files in checkpoint.dir, oldest first
  std::vector<StepRecord> history_;
  std::vector<LocalBatch> local_;  // this rank's share of this step's micro-batches
  bool stop_requested_ = false;  // some rank got SIGINT/SIGTERM (agreed on every step and after each checkpoint)
  int64_t run_targets_ = 0;      // global targets of this run's steps (not a resumed run's earlier ones)
  std::string no_targets_reason() const;
  AppendFile metrics_;  // rank 0: metrics.jsonl
};

}  // namespace lct
