// The run configuration: one struct per TOML section, one registry of keys.
// Precedence: command line (--section.key VALUE) > config file > built-in defaults.
// The built-in defaults equal configs/default.toml (a test checks this).
//
// Typed: every choice is parsed into its enum here, where the key is read, so nothing
// below compares a configuration string. Only names stay text: paths, the separator,
// train.resume ("" | "auto" | a path) and attention.cad_profile (auto | pairs | a file).
// The run plan (src/train/run_plan.h) turns this into what a run does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attention/gemm.h"
#include "data/balance.h"
#include "data/context_shards.h"
#include "data/doc_lengths.h"
#include "data/sources.h"
#include "model/llama_config.h"
#include "model/optimizer.h"
#include "model/recompute.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"

namespace lct {

struct DataConfig {
  DataSource source = DataSource::synthetic;
  std::string path;                  // text file/folder or token file
  int64_t seq_len = 2048;            // tokens per micro-batch (one packed sequence)
  DocLengthDist doc_lengths = DocLengthDist::pretrain;
  int64_t max_doc_len = 2048;
  int64_t min_doc_len = 1;
  std::string separator;             // text: document separator ("" = one document per file)
  TokenDtype token_dtype = TokenDtype::uint16;
  int64_t separator_id = 0;          // tokens: document-separator id
  int64_t segment_end_id = -1;       // tokens: the id closing a prefix, question or answer (-1: none)
  double passkey_depth = -1;         // passkey: the key line's depth in [0, 1] (-1 = uniform per document)
  double prefix_fraction = 0;        // prefix_lm / shared_question: each document's prefix share (data/packing.h)
  int64_t answers_per_question = 0;  // shared_question: answers after each question
};

struct TrainConfig {
  int64_t steps = 150;
  int64_t seed = 1234;
  int64_t micro_batches = 1;
  OptimizerKind optimizer = OptimizerKind::adamw;
  Precision precision = Precision::fp32;  // of the linear layers' products (attention/gemm.h)
  LossOn loss_on = LossOn::all;            // data/local_batch.h
  Fp32Library fp32_gemm = Fp32Library::automatic;  // src/train/fp32_gemm.h
  Recompute recompute = Recompute::none;   // model/recompute.h
  int64_t recompute_layers = 0;            // the first N layers recompute (0 = every layer)
  int64_t tile_tokens = 4096;              // rows of a token tile (model/llama.h)
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  int64_t threads = 0;  // 0 = all cores
  int64_t log_every = 1;
  std::string resume;   // "" = fresh run, "auto" = newest checkpoint in checkpoint.dir, or a path
};

struct ParallelConfig {
  // Degrees of the MPI process grid (parallel/process_grid.h); -1 = infer from the
  // world size. Their product must equal the number of MPI ranks.
  int64_t dp = -1, pp = 1, cp = 1;
  std::vector<int64_t> pp_layers;    // layers per pipeline stage (empty = even split)
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;  // parallel/pipeline_schedule.h
  CpSplit cp_split = CpSplit::zigzag;                            // data/context_shards.h
  CpComm cp_comm = CpComm::ring;                                 // parallel/layout.h
  int64_t cp_ulysses = 2;            // cp_comm = hybrid: ranks per all-to-all group (U of cp = U x R)
  int64_t cp_inner_ring = 2;         // cp_comm = double_ring: ranks per inner ring
  DpBalance dp_balance = DpBalance::none;                        // data/balance.h
  int64_t bucket_size = 1000000;     // gradient elements per reduction bucket (at least)
  bool overlap_grad_reduce = true;   // start bucket reductions during backward
};

struct TraceConfig {
  std::string path;  // "" = no timeline
};

struct CheckpointConfig {
  std::string dir = "runs/default";
  int64_t every = 50;  // 0 = only at the end
  int64_t keep = 3;
  bool overwrite = false;  // a fresh run may replace another run's files in dir
};

// A boolean the run plan may decide ("auto").
enum class Switch { off, on, automatic };

struct CadConfig {
  double tolerance = 0.1;                // servers within this x mean cost
  Switch pingpong = Switch::automatic;   // two overlapped nano-batches
  std::string profile = "auto";          // cost model: auto | pairs | a file (src/train/cad_profile.h)
  bool rank_speeds = true;               // plan by each rank's measured speed
};

// [attention]: where core attention runs. What it computes, attention.kernel and the
// attention.dca_* keys, belongs to the model (LlamaConfig::attention_kernel and dca_*):
// it changes the function the weights were trained for, so a checkpoint records it
// with the model and `inspect` and `eval` read it from there. One field per key.
struct AttentionConfig {
  Placement placement = Placement::colocated;  // colocated | cad (never context_parallel)
  CadConfig cad;
};

constexpr int64_t kMaxThreads = 1024;  // train.threads, eval --threads

struct Config {
  LlamaConfig model;
  AttentionConfig attention;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  TraceConfig trace;
};

// boolean_or_auto: true, false or "auto" (the run plan decides; src/train/run_plan.h).
enum class KeyType { integer, number, boolean, boolean_or_auto, string, integer_list };

struct ConfigKey {
  std::string name;  // section.key
  KeyType type;
  std::string help;
  std::function<std::string(const Config&)> get;           // value as text
  std::function<void(Config&, const std::string&)> set;     // parses, throws ConfigError
};

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const std::vector<ConfigKey>& config_keys();
const ConfigKey* find_config_key(const std::string& name);

// Applies a TOML file onto config. Unknown sections/keys and wrong types are errors
// naming the file and the key.
void apply_toml_file(Config& config, const std::string& path);
// Same, from TOML text (origin names it in errors, e.g. a checkpoint's /config).
void apply_toml_text(Config& config, const std::string& text, const std::string& origin);
// Every TOML text lct reads (config files, a checkpoint's /config, run.toml) is checked
// first: the parser recurses once per level of nested arrays and inline tables and per
// part of a dotted key, so a crafted text thousands of levels deep would overflow the
// stack. Throws ConfigError naming `origin` and the line when brackets nest deeper than
// kMaxTomlNesting or a line's keys have more parts than that (lct's own texts need 3).
constexpr int kMaxTomlNesting = 32;
void check_toml_nesting(const std::string& text, const std::string& origin);
// Applies "section.key" -> text overrides (from the command line).
void apply_overrides(Config& config, const std::map<std::string, std::string>& overrides);
// Cross-field validation; throws ConfigError naming the key.
void validate_config(const Config& config);
struct ConfigDifference {
  std::string key, a, b;
};
// Keys whose values differ between two configs, in registry order.
std::vector<ConfigDifference> config_differences(const Config& a, const Config& b);
// The resolved configuration as TOML text (what checkpoints and logs record).
std::string config_to_toml(const Config& config);

}  // namespace lct
