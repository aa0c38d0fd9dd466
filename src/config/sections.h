// The configuration's sections: one struct per TOML section, each field a key (the
// registry in src/config/config.h binds them). The run plan (src/train/run_plan.h)
// carries the sections a run reads past planning, so these types are shared by the
// configuration and the plan; the Config aggregate itself stays with the command layer.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/gemm.h"
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

// A configuration lct refuses: one line naming the key, file or value.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// train.resume: "" (a fresh run), "auto" (the newest checkpoint in checkpoint.dir, fresh
// when there is none) or a checkpoint's path.
struct Resume {
  enum class From { fresh, latest, path };
  From from = From::fresh;
  std::string path;  // with From::path
  bool operator==(const Resume& o) const { return from == o.from && path == o.path; }
};
inline Resume parse_resume(const std::string& text) {
  if (text.empty()) return {};
  if (text == "auto") return {Resume::From::latest, ""};
  return {Resume::From::path, text};
}
inline std::string resume_text(const Resume& r) {
  return r.from == Resume::From::fresh ? "" : r.from == Resume::From::latest ? "auto" : r.path;
}

// attention.cad_profile: "auto" (this machine's measured kernel time), "pairs" (attention
// pairs; "" too, as configs written before auto hold) or a cost-model file.
struct CadProfile {
  enum class Kind { automatic, pairs, file };
  Kind kind = Kind::automatic;
  std::string path;  // with Kind::file
  bool measured() const { return kind != Kind::pairs; }  // a cost model in seconds
  bool operator==(const CadProfile& o) const { return kind == o.kind && path == o.path; }
};
inline CadProfile parse_cad_profile(const std::string& text) {
  if (text == "auto") return {};
  if (text == "pairs" || text.empty()) return {CadProfile::Kind::pairs, ""};
  return {CadProfile::Kind::file, text};
}
inline std::string cad_profile_text(const CadProfile& p) {
  return p.kind == CadProfile::Kind::automatic ? "auto" : p.kind == CadProfile::Kind::pairs ? "pairs" : p.path;
}

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

// The most rows of one document a sequence can hold: its in-document positions (the RoPE
// table's rows) and the longest attention task. A sequence cuts a longer document into
// pieces whose positions restart, so at most data.seq_len; the generated sources'
// documents are at most data.max_doc_len long, text and token files' as long as theirs.
inline int64_t longest_document_piece(const DataConfig& d) {
  const bool bounded = d.source == DataSource::synthetic || d.source == DataSource::passkey || d.source == DataSource::copy;
  return bounded && d.max_doc_len < d.seq_len ? d.max_doc_len : d.seq_len;
}

struct TrainConfig {
  int64_t steps = 150;
  int64_t seed = 1234;
  int64_t micro_batches = 1;
  OptimizerKind optimizer = OptimizerKind::adamw;
  Precision precision = Precision::fp32;  // of the linear layers' products (compute/gemm.h)
  LossOn loss_on = LossOn::all;            // data/local_batch.h
  Fp32Library fp32_gemm = Fp32Library::automatic;  // src/tune/gemm_choice.h
  Bf16Kernel bf16_kernel = Bf16Kernel::automatic;  // src/tune/gemm_choice.h
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
  double heartbeat_s = 30;  // a progress line every this many seconds inside longer steps (0 = none)
  Resume resume;        // train.resume
  // A Hugging Face Llama folder (config.json + safetensors) or file a fresh run starts
  // from: its weights, and the model keys from its config.json (src/cli/options.cpp)
  std::string init_from;  // train.init_from ("" = the seeded init)
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
  CadProfile profile;                    // the cost model the planner balances (src/tune/cad_profile.h)
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

}  // namespace lct
