// The run plan: the resolved run. Every decision a configuration implies for a run on N
// ranks, made once by one pure function (no MPI, nothing allocated), and everything the
// run reads past start-up: the trainer, the memory budget, `lct train --dry-run`,
// `lct simulate` and `lct bench` take a plan, never a Config (only src/cli/ and
// make_run_plan see one). None of them re-derives a layout, a schedule, the lanes or the
// placement. What depends on the machine (the fp32 library, the CAD cost model) is
// filled in one step after planning, on rank 0 for every rank
// (src/train/machine_choices.h).
//
// Cross-field rules, all here (each refusal is one line naming the keys):
//   layout      dp x pp x cp = N (one degree may be -1), stages from parallel.pp_layers,
//               data.seq_len a multiple of 2 cp (parallel/layout.h)
//   placement   what runs: CAD needs more than one rank (one rank runs colocated);
//               context parallelism without CAD runs the cp exchange
//   schedule    CAD with pp > 1 runs same-phase ticks whatever parallel.pp_schedule says
//               (every rank must be at the same layer when attention is exchanged),
//               and needs the same number of layers on every stage
//   lanes       2 (ping-pong nano-batches) only for CAD on more than one rank; with
//               attention.cad_pingpong = auto, exactly under pipeline parallelism
//   balance     parallel.dp_balance = packing is a colocated baseline: refused with CAD
//               or cp > 1, and a no-op with dp = 1
//   cp_comm     ulysses trades over all cp ranks, hybrid over groups of parallel.cp_ulysses
//               (1 < U < cp, U divides cp); either needs the heads to split over U ranks:
//               num_attention_heads divisible by U, and num_key_value_heads divisible by
//               U or dividing it (fewer KV heads than U are replicated; block_sparse
//               needs it divisible: a rank selects by a whole group's query heads); double_ring
//               needs parallel.cp_inner_ring to divide cp, strictly between 1 and cp
//   rank speeds CAD learns rank speeds only with one lane (ping-pong plans each lane
//               alone) and a measured cost model (not with attention.cad_profile = pairs)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallel/cad_cost.h"
#include "attention/core_attention.h"
#include "data/context_shards.h"
#include "model/llama_config.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "src/config/sections.h"

namespace lct {

struct Config;

// How gradients are reduced over dp x cp (parallel/grad_reducer.h).
struct GradReductionPlan {
  int64_t bucket_size = 1000000;  // parallel.bucket_size
  bool overlap = true;            // parallel.overlap_grad_reduce
};

// How long the run goes, what it writes and where it starts.
struct RunControl {
  int64_t steps = 1, log_every = 1;  // train.steps, train.log_every
  double heartbeat_s = 30;           // train.heartbeat_s (0 = none)
  int64_t threads = 0;               // train.threads (0 = all cores)
  CheckpointConfig checkpoint;       // [checkpoint]
  std::string trace_path;            // trace.path ("" = no timeline)
  Resume resume;                     // train.resume
  std::string init_from;             // train.init_from ("" = the seeded init)
};

// What this machine decides (resolve_machine_choices, src/train/machine_choices.h): made
// on rank 0 (which may measure) and the same on every rank.
struct MachineChoices {
  bool resolved = false;
  Fp32Library fp32_library = Fp32Library::openblas;  // train.fp32_gemm resolved (bf16's rounded kernel runs on it too)
  std::string fp32_description;                       // (log) the library and why
  Bf16Kernel bf16_kernel = Bf16Kernel::rounded;       // bf16 runs: train.bf16_kernel resolved
  std::string bf16_description;                       // (log) the kernel and why; "" for fp32
  std::optional<CadCostModel> cad_cost;                // CAD: the measured cost model (none: pairs)
  std::string cad_cost_description;                   // (log) what the CAD planner balances
};

struct RunPlan {
  int world = 1;                   // ranks
  Layout layout;                   // dp x pp x cp
  std::vector<StageSpec> stages;   // every pipeline stage's layers (one without pp)
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // the schedule that runs
  std::string schedule_reason;     // why it is not parallel.pp_schedule ("" when it is)
  int lanes = 1;                   // nano-batches per micro-batch (2 = ping-pong)
  std::string lanes_reason;        // how attention.cad_pingpong = auto decided ("" otherwise)
  Placement placement = Placement::colocated;
  DpBalance balance = DpBalance::none;  // packing only when it does something (dp > 1)
  CpSplit cp_split = CpSplit::zigzag;
  SplitWork cp_split_work;         // what the zigzag cuts balance under a mask (data/context_shards.h)
  CpComm cp_comm = CpComm::ring;
  int cp_ulysses = 1;              // ranks per all-to-all group: cp (ulysses), U (hybrid), else 1
  int cp_inner_ring = 1;           // ranks per inner ring (double_ring), else 1
  LlamaConfig model;               // [model] with the [attention] kernel and DCA keys
  AttentionParams attention;       // what every attention call of this model gets
  CadConfig cad;                   // with placement == cad; rank_speeds only where it applies (above)
  // CAD cuts every document only at multiples of the kernel's query tile, short ones too,
  // under pipeline ticks (pp > 1): there full recomputation repeats attention under another
  // tick's plan, whose rows must come out the same bits as the forward's, and the same as
  // a run that does not recompute (so the plans may not depend on train.recompute); a BLAS
  // whose rows depend on the product's row count (OpenBLAS's Haswell SGEMM) would
  // otherwise change them (parallel/cad_plan.h)
  bool cad_align_every_cut = false;
  OptimizerConfig optimizer;
  Precision precision = Precision::fp32;  // the linear layers' products (train.precision)
  RecomputePolicy recompute;              // train.recompute, train.recompute_layers
  int64_t tile_tokens = 4096;             // train.tile_tokens
  LossOn loss_on = LossOn::all;           // whose targets train (train.loss_on)
  Fp32Library fp32_gemm = Fp32Library::automatic;  // train.fp32_gemm as set (machine.fp32_library runs)
  Bf16Kernel bf16_kernel = Bf16Kernel::automatic;  // train.bf16_kernel as set (machine.bf16_kernel runs)
  DataConfig data;                 // the document source's settings; data.seq_len tokens per sequence
  int64_t seed = 0;                // train.seed: init and data
  int64_t micro_batches = 1;       // sequences per data-parallel rank and step
  DocStructure doc_structure;      // prefix_lm / shared_question: the packer's per-document data
  GradReductionPlan reduction;
  RunControl run;
  MachineChoices machine;          // filled by resolve_machine_choices
  std::string config_text;         // the configuration as TOML: checkpoints and the run's identity

  bool pipelined() const { return layout.pp > 1; }
  // How the model's products run (compute/gemm.h): the precision on the kernels this
  // machine chose (machine must be resolved)
  Arithmetic arithmetic() const {
    return {precision, machine.fp32_library, precision == Precision::bf16 ? machine.bf16_kernel : Bf16Kernel::automatic};
  }
  // tokens of one optimizer step over all data-parallel replicas
  int64_t tokens_per_step() const { return data.seq_len * micro_batches * layout.dp; }
};

// The plan of `config` on `world` ranks; throws ConfigError (one line) when a rule above
// refuses it. `config` must already have passed validate_config.
RunPlan make_run_plan(const Config& config, int world);

// "dp 2 x pp 1 x cp 1, placement cad (one exchange at a time), pipeline schedule 1f1b":
// the layout line that --dry-run prints and the log starts with.
std::string describe_run_plan(const RunPlan& plan);
// "recompute full (every layer), token tiles of 4096 rows": what the log and --dry-run say
// of train.recompute, train.recompute_layers and train.tile_tokens.
std::string describe_activations(const RunPlan& plan);

}  // namespace lct
