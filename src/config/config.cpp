#include "src/config/config.h"

#include <toml++/toml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "data/files.h"
#include "src/util/integer_text.h"
#include "src/util/number_text.h"
#include "src/util/printable.h"
#include "src/util/log.h"

namespace lct {
namespace {

int64_t parse_int(const std::string& key, const std::string& text) {
  int64_t v = 0;
  switch (parse_integer_text(text, v)) {
    case IntegerText::ok: return v;
    case IntegerText::out_of_range:
      throw ConfigError(key + " must be " + (v < 0 ? ">= " : "<= ") + std::to_string(v) + ", got " + text);
    case IntegerText::not_an_integer: break;
  }
  throw ConfigError(key + " must be an integer, got '" + text + "'");
}

double parse_number(const std::string& key, const std::string& text) {
  double v = 0;
  if (!parse_number_text(text, v)) throw ConfigError(key + " must be a number, got '" + printable(text) + "'");
  return v;
}

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw ConfigError(key + " must be true or false, got '" + text + "'");
}

std::string number_text(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  std::string t(buf, res.ptr);
  if (t.find_first_of(".eEn") == std::string::npos) t += ".0";  // keep it a TOML float
  return t;
}

// Registry helpers: bind a key to a field of Config.
template <typename Field>
ConfigKey int_key(std::string name, std::string help, Field field, int64_t min_value) {
  return {name, KeyType::integer, std::move(help),
          [field](const Config& c) { return std::to_string(int64_t(field(const_cast<Config&>(c)))); },
          [field, name, min_value](Config& c, const std::string& t) {
            const int64_t v = parse_int(name, t);
            if (v < min_value)
              throw ConfigError(name + " must be >= " + std::to_string(min_value) + ", got " + t);
            using T = std::remove_reference_t<decltype(field(c))>;
            // checked before narrowing: 4294967297 must not become a 1-layer model
            if (v > int64_t(std::numeric_limits<T>::max()))
              throw ConfigError(name + " must be <= " + std::to_string(std::numeric_limits<T>::max()) +
                                ", got " + t);
            field(c) = T(v);
          }};
}
// Integer lists: "[3, 5]" (TOML array, also accepted on the command line) or "3,5".
std::vector<int64_t> parse_int_list(const std::string& key, const std::string& text) {
  std::string t = text;
  if (!t.empty() && t.front() == '[') {
    if (t.back() != ']') throw ConfigError(key + " must be a list of integers like [3, 5], got '" + text + "'");
    t = t.substr(1, t.size() - 2);
  }
  std::vector<int64_t> v;
  std::stringstream in(t);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) {
      if (t.find_first_not_of(" \t") == std::string::npos) break;  // "[]"
      throw ConfigError(key + " must be a list of integers like [3, 5], got '" + text + "'");
    }
    try {
      v.push_back(parse_int(key, item.substr(a, b - a + 1)));
    } catch (const ConfigError&) {
      throw ConfigError(key + " must be a list of integers like [3, 5], got '" + text + "'");
    }
  }
  return v;
}

std::string int_list_text(const std::vector<int64_t>& v) {
  std::string t = "[";
  for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
  return t + "]";
}

template <typename Field>
ConfigKey int_list_key(std::string name, std::string help, Field field) {
  return {name, KeyType::integer_list, std::move(help),
          [field](const Config& c) { return int_list_text(field(const_cast<Config&>(c))); },
          [field, name](Config& c, const std::string& t) { field(c) = parse_int_list(name, t); }};
}

// Numbers are used in float32 (the optimizer, init, RoPE and DCA scales), so each must
// be one: finite, at most FLT_MAX in magnitude, and zero or at least the smallest
// normal float (1e-50 would silently become 0 or a denormal there).
double parse_float32(const std::string& key, const std::string& text) {
  const double v = parse_number(key, text);
  if (std::abs(v) > double(std::numeric_limits<float>::max()))
    throw ConfigError(key + " = " + text + " does not fit float32 (|x| <= 3.4e38), in which it is used");
  if (v != 0 && std::abs(v) < double(std::numeric_limits<float>::min()))
    throw ConfigError(key + " = " + text + " is below float32's smallest normal number (1.2e-38), "
                      "in which it is used");
  return v;
}

template <typename Field>
ConfigKey num_key(std::string name, std::string help, Field field) {
  return {name, KeyType::number, std::move(help),
          [field](const Config& c) { return number_text(field(const_cast<Config&>(c))); },
          [field, name](Config& c, const std::string& t) { field(c) = parse_float32(name, t); }};
}
template <typename Field>
ConfigKey bool_key(std::string name, std::string help, Field field) {
  return {name, KeyType::boolean, std::move(help),
          [field](const Config& c) { return std::string(field(const_cast<Config&>(c)) ? "true" : "false"); },
          [field, name](Config& c, const std::string& t) { field(c) = parse_bool(name, t); }};
}
template <typename Field>
ConfigKey bool_or_auto_key(std::string name, std::string help, Field field) {
  return {name, KeyType::boolean_or_auto, std::move(help),
          [field](const Config& c) -> std::string {
            const Switch s = field(const_cast<Config&>(c));
            return s == Switch::automatic ? "auto" : s == Switch::on ? "true" : "false";
          },
          [field, name](Config& c, const std::string& t) {
            if (t == "auto") field(c) = Switch::automatic;
            else if (t == "true" || t == "1" || t == "false" || t == "0")
              field(c) = parse_bool(name, t) ? Switch::on : Switch::off;
            else
              throw ConfigError(name + " must be true, false or auto, got '" + t + "'");
          }};
}
// A choice: TOML string, stored as its enum. parse throws std::exception on an unknown
// name; name_of gives the text back (config_to_toml, --help defaults, differences).
template <typename Field, typename Parse, typename NameOf>
ConfigKey choice_key(std::string name, std::string help, Field field, Parse parse, NameOf name_of) {
  return {name, KeyType::string, std::move(help),
          [field, name_of](const Config& c) { return std::string(name_of(field(const_cast<Config&>(c)))); },
          [field, parse, name](Config& c, const std::string& t) {
            try {
              field(c) = parse(t);
            } catch (const std::exception& e) {
              throw ConfigError(name + ": " + e.what());
            }
          }};
}
template <typename Field>
ConfigKey str_key(std::string name, std::string help, Field field,
                  std::function<void(const std::string&)> check = nullptr) {
  return {name, KeyType::string, std::move(help),
          [field](const Config& c) { return field(const_cast<Config&>(c)); },
          [field, check, name](Config& c, const std::string& t) {
            if (check) {
              try {
                check(t);
              } catch (const std::exception& e) {
                throw ConfigError(name + ": " + e.what());
              }
            }
            field(c) = t;
          }};
}

// The key with its scope (ConfigKey::scope; keys are settings unless said).
ConfigKey in(KeyScope scope, ConfigKey key) {
  key.scope = scope;
  return key;
}

// [model] (Hugging Face LlamaConfig names)
void add_model_keys(std::vector<ConfigKey>& k) {
  k.push_back(in(KeyScope::model, int_key("model.vocab_size", "vocabulary size", [](Config& c) -> auto& { return c.model.vocab_size; }, 1)));
  k.push_back(in(KeyScope::model, int_key("model.hidden_size", "model width C", [](Config& c) -> auto& { return c.model.hidden_size; }, 1)));
  k.push_back(in(KeyScope::model, int_key("model.intermediate_size", "SwiGLU MLP width", [](Config& c) -> auto& { return c.model.intermediate_size; }, 1)));
  k.push_back(in(KeyScope::model, int_key("model.num_hidden_layers", "decoder layers", [](Config& c) -> auto& { return c.model.num_hidden_layers; }, 1)));
  k.push_back(in(KeyScope::model, int_key("model.num_attention_heads", "query heads H", [](Config& c) -> auto& { return c.model.num_attention_heads; }, 1)));
  k.push_back(in(KeyScope::model, int_key("model.num_key_value_heads", "key/value heads (GQA), divides H", [](Config& c) -> auto& { return c.model.num_key_value_heads; }, 1)));
  k.push_back(in(KeyScope::model, num_key("model.rope_theta", "RoPE base", [](Config& c) -> auto& { return c.model.rope_theta; })));
  k.push_back(in(KeyScope::function, choice_key("model.rope_scaling", std::string("RoPE beyond the trained length: ") + enum_help(kRopeScalingNames),
                         [](Config& c) -> auto& { return c.model.rope_scaling; }, parse_rope_scaling, rope_scaling_name)));
  k.push_back(in(KeyScope::function, num_key("model.rope_scaling_factor", "RoPE scaling factor s >= 1 (linear: positions / s)", [](Config& c) -> auto& { return c.model.rope_scaling_factor; })));
  k.push_back(in(KeyScope::function, int_key("model.rope_original_length", "the trained length RoPE scaling refers to (dynamic, yarn)", [](Config& c) -> auto& { return c.model.rope_original_length; }, 0)));
  k.push_back(in(KeyScope::model, num_key("model.rms_norm_eps", "RMSNorm epsilon", [](Config& c) -> auto& { return c.model.rms_norm_eps; })));
  k.push_back(in(KeyScope::model, bool_key("model.tie_word_embeddings", "LM head shares the embedding matrix", [](Config& c) -> auto& { return c.model.tie_word_embeddings; })));
  k.push_back(in(KeyScope::model, num_key("model.init_std", "std of normal init (output projections / sqrt(2 layers))", [](Config& c) -> auto& { return c.model.init_std; })));
}

// [attention]
void add_attention_keys(std::vector<ConfigKey>& k) {
  k.push_back(in(KeyScope::function, choice_key("attention.kernel", std::string("core attention kernel: ") + enum_help(kAttentionKernelNames),
                         [](Config& c) -> auto& { return c.model.attention_kernel; },
                         parse_attention_kernel, attention_kernel_name)));
  k.push_back(in(KeyScope::placement, choice_key("attention.placement", std::string("where core attention runs: ") + enum_help(kPlacementNames),
                         [](Config& c) -> auto& { return c.attention.placement; },
                         parse_placement, placement_name)));
  k.push_back(in(KeyScope::placement, num_key("attention.cad_tolerance", "CAD: stop balancing when every server is within this fraction of the mean cost (see attention.cad_profile)", [](Config& c) -> auto& { return c.attention.cad.tolerance; })));
  k.push_back(in(KeyScope::placement, bool_or_auto_key("attention.cad_pingpong", "CAD: split each micro-batch into two nano-batches of whole documents whose attention traffic and token-linear compute overlap (DistCA ping-pong); auto: on under pipeline parallelism (same-phase ticks, where it was measured faster), off otherwise (measured slower with data parallelism on one host, where the exchange is about 1% of a step)", [](Config& c) -> auto& { return c.attention.cad.pingpong; })));
  k.push_back(in(KeyScope::placement, bool_key("attention.cad_rank_speeds", "CAD with a measured cost model and without ping-pong: learn each rank's speed from every step (its compute time against the model) and balance each rank's whole time, token-linear layers included; false assumes equal ranks (plans then depend on the data only, so reruns repeat bit for bit)", [](Config& c) -> auto& { return c.attention.cad.rank_speeds; })));
  k.push_back(in(KeyScope::placement, choice_key("attention.cad_profile", "CAD: what the planner balances: auto (this machine's measured kernel time, cached per CPU, model shape and threads), pairs (attention pairs; also \"\", as configs before auto wrote it), or a cost model file from lct bench --sections profile --profile-out", [](Config& c) -> auto& { return c.attention.cad.profile; },
                         parse_cad_profile, cad_profile_text)));
  k.push_back(in(KeyScope::function, choice_key("attention.mask", std::string("which keys of its document a query reads: ") + enum_help(kMaskKindNames) + " (docs/model.md, Attention masks)",
                         [](Config& c) -> auto& { return c.model.attention_mask.kind; }, parse_mask_kind, mask_kind_name)));
  k.push_back(in(KeyScope::function, int_key("attention.window", "sliding_window, sink_window: W, the keys a query reads, its own included (j > i - W)", [](Config& c) -> auto& { return c.model.attention_mask.window; }, 1)));
  k.push_back(in(KeyScope::function, int_key("attention.sink_tokens", "sink_window: S, the document's first tokens every query also reads", [](Config& c) -> auto& { return c.model.attention_mask.sink_tokens; }, 0)));
  k.push_back(in(KeyScope::function, int_key("attention.block_size", "chunked, causal_blockwise, block_sparse: B, the positions of a block (chunked: a query reads only its own block)", [](Config& c) -> auto& { return c.model.attention_mask.block_size; }, 1)));
  k.push_back(in(KeyScope::function, int_key("attention.top_blocks", "block_sparse: k, the earlier blocks each query selects by its mean query's affinity to their mean key (MoBA; docs/model.md)", [](Config& c) -> auto& { return c.model.attention_mask.top_blocks; }, 0)));
  k.push_back(in(KeyScope::function, int_key("attention.dca_chunk_size", "DCA: C, the largest relative position (Qwen/vLLM chunk_size)", [](Config& c) -> auto& { return c.model.dca_chunk_size; }, 1)));
  k.push_back(in(KeyScope::function, int_key("attention.dca_local_size", "DCA: w, local window; chunks are C - w tokens", [](Config& c) -> auto& { return c.model.dca_local_size; }, 0)));
  k.push_back(in(KeyScope::function, num_key("attention.dca_mscale", "DCA: constant logit multiplier (attention temperature)", [](Config& c) -> auto& { return c.model.dca_mscale; })));
  k.push_back(in(KeyScope::function, int_key("attention.dca_mscale_original_length", "DCA: > 0 multiplies logits by max(1, 0.1 ln(L_doc / this) + 1) per document", [](Config& c) -> auto& { return c.model.dca_mscale_original_length; }, 0)));
  k.push_back(in(KeyScope::function, choice_key("attention.logit_scaling", std::string("multiply a query's logits by a function of the n keys it reads (n = in-document position + 1; causal mask, any kernel): ") + enum_help(kLogitScalingNames) + " (docs/model.md, Logit scaling)",
                         [](Config& c) -> auto& { return c.model.logit_scaling.kind; }, parse_logit_scaling, logit_scaling_name)));
  k.push_back(in(KeyScope::function, int_key("attention.logit_scaling_length", "attention.logit_scaling: L, the n at which the factor is 1 (normally the trained length)", [](Config& c) -> auto& { return c.model.logit_scaling.length; }, 0)));
}

// [data]
void add_data_keys(std::vector<ConfigKey>& k) {
  k.push_back(choice_key("data.source", std::string("the documents: ") + enum_help(kDataSourceNames),
                         [](Config& c) -> auto& { return c.data.source; },
                         parse_data_source, data_source_name));
  k.push_back(str_key("data.path", "text file/folder (text) or binary token file (tokens)", [](Config& c) -> auto& { return c.data.path; }));
  k.push_back(int_key("data.seq_len", "tokens per packed sequence (one micro-batch)", [](Config& c) -> auto& { return c.data.seq_len; }, 2));
  k.push_back(choice_key("data.doc_lengths", std::string("synthetic length distribution: ") + enum_help(kDocLengthDistNames),
                         [](Config& c) -> auto& { return c.data.doc_lengths; }, parse_doc_length_dist,
                         doc_length_dist_name));
  k.push_back(int_key("data.max_doc_len", "synthetic: longest document (distributions are scaled to it)", [](Config& c) -> auto& { return c.data.max_doc_len; }, 1));
  k.push_back(int_key("data.min_doc_len", "synthetic: shortest document", [](Config& c) -> auto& { return c.data.min_doc_len; }, 1));
  k.push_back(num_key("data.passkey_depth", "passkey: the key line's depth in the filler, 0 (start) to 1 (end); -1 = uniform per document", [](Config& c) -> auto& { return c.data.passkey_depth; }));
  k.push_back(num_key("data.prefix_fraction", "attention.mask = prefix_lm: each document's bidirectional prefix, as a share of its tokens in [0, 1) (floor(share x length)); shared_question: its question's share", [](Config& c) -> auto& { return c.data.prefix_fraction; }));
  k.push_back(int_key("data.answers_per_question", "attention.mask = shared_question: the answers after each document's question (its tokens after the question, cut into this many near-equal segments)", [](Config& c) -> auto& { return c.data.answers_per_question; }, 0));
  k.push_back(str_key("data.separator", "text: document separator string (empty: one document per file)", [](Config& c) -> auto& { return c.data.separator; }));
  k.push_back(choice_key("data.token_dtype", std::string("tokens: the file's integer type: ") + enum_help(kTokenDtypeNames),
                         [](Config& c) -> auto& { return c.data.token_dtype; },
                         parse_token_dtype, token_dtype_name));
  k.push_back(int_key("data.separator_id", "tokens: document-separator token id", [](Config& c) -> auto& { return c.data.separator_id; }, 0));
  k.push_back(int_key("data.segment_end_id", "tokens, attention.mask = prefix_lm or shared_question: the id that closes a document's prefix (its first), question and answers (each); it stays in its segment; -1 = none", [](Config& c) -> auto& { return c.data.segment_end_id; }, -1));
}

// [train]
void add_train_keys(std::vector<ConfigKey>& k) {
  k.push_back(in(KeyScope::run, int_key("train.steps", "optimizer steps", [](Config& c) -> auto& { return c.train.steps; }, 1)));
  k.push_back(int_key("train.seed", "seed for init and data", [](Config& c) -> auto& { return c.train.seed; }, 0));
  k.push_back(int_key("train.micro_batches", "sequences per step (gradient accumulation)", [](Config& c) -> auto& { return c.train.micro_batches; }, 1));
  k.push_back(choice_key("train.optimizer", std::string("") + enum_help(kOptimizerNames),
                         [](Config& c) -> auto& { return c.train.optimizer; },
                         parse_optimizer, optimizer_name));
  k.push_back(choice_key("train.loss_on", std::string("whose targets train: ") + enum_help(kLossOnNames),
                         [](Config& c) -> auto& { return c.train.loss_on; }, parse_loss_on, loss_on_name));
  k.push_back(choice_key("train.precision", std::string("the linear layers' products: ") + enum_help(kPrecisionNames),
                         [](Config& c) -> auto& { return c.train.precision; }, parse_precision, precision_name));
  k.push_back(choice_key("train.fp32_gemm", std::string("the library of fp32 linear products: ") + enum_help(kFp32LibraryNames),
                         [](Config& c) -> auto& { return c.train.fp32_gemm; }, parse_fp32_library, fp32_library_name));
  k.push_back(choice_key("train.bf16_kernel", std::string("what runs a bf16 run's products and attention tiles: ") + enum_help(kBf16KernelNames),
                         [](Config& c) -> auto& { return c.train.bf16_kernel; }, parse_bf16_kernel, bf16_kernel_name));
  k.push_back(choice_key("train.recompute", std::string("what each decoder layer keeps for its backward: ") + enum_help(kRecomputeNames),
                         [](Config& c) -> auto& { return c.train.recompute; }, parse_recompute, recompute_name));
  k.push_back(int_key("train.recompute_layers", "with train.recompute: only the first N layers of the model recompute (0 = every layer)",
                      [](Config& c) -> auto& { return c.train.recompute_layers; }, 0));
  k.push_back(int_key("train.tile_tokens", "rows of a token tile: norms, linear layers, MLP, LM head and loss run over the sequence in tiles of this many tokens (their intermediates never exist for the whole sequence)",
                      [](Config& c) -> auto& { return c.train.tile_tokens; }, 1));
  k.push_back(num_key("train.lr", "peak learning rate", [](Config& c) -> auto& { return c.train.lr; }));
  k.push_back(num_key("train.min_lr", "cosine schedule floor", [](Config& c) -> auto& { return c.train.min_lr; }));
  k.push_back(int_key("train.warmup_steps", "linear warm-up steps", [](Config& c) -> auto& { return c.train.warmup_steps; }, 0));
  k.push_back(num_key("train.beta1", "AdamW beta1", [](Config& c) -> auto& { return c.train.beta1; }));
  k.push_back(num_key("train.beta2", "AdamW beta2", [](Config& c) -> auto& { return c.train.beta2; }));
  k.push_back(num_key("train.eps", "AdamW epsilon", [](Config& c) -> auto& { return c.train.eps; }));
  k.push_back(num_key("train.weight_decay", "AdamW decoupled weight decay (matrices only)", [](Config& c) -> auto& { return c.train.weight_decay; }));
  k.push_back(num_key("train.grad_clip", "clip gradients to this global L2 norm (0 = off)", [](Config& c) -> auto& { return c.train.grad_clip; }));
  k.push_back(int_key("train.threads", "threads for BLAS and kernels (0 = all cores)", [](Config& c) -> auto& { return c.train.threads; }, 0));
  k.push_back(in(KeyScope::run, int_key("train.log_every", "print a log line every N steps", [](Config& c) -> auto& { return c.train.log_every; }, 1)));
  k.push_back(in(KeyScope::run, num_key("train.heartbeat_s", "inside a step longer than this many seconds, print where it is (phase, layer, micro-batch, share of its FLOPs, time to go) every this many seconds (0 = never)",
                                        [](Config& c) -> auto& { return c.train.heartbeat_s; })));
  k.push_back(in(KeyScope::run, choice_key("train.resume", "resume from: \"\" (fresh run), \"auto\" (newest checkpoint in checkpoint.dir, fresh if none) or a checkpoint path",
                         [](Config& c) -> auto& { return c.train.resume; }, parse_resume, resume_text)));
  k.push_back(in(KeyScope::run, str_key("train.init_from", "a fresh run starts from this Hugging Face Llama folder or safetensors file (weights, and the model keys from its config.json)",
                                        [](Config& c) -> auto& { return c.train.init_from; })));
}

// [parallel]
void add_parallel_keys(std::vector<ConfigKey>& k) {
  k.push_back(int_key("parallel.dp", "data-parallel degree (-1 = world size / (pp x cp))", [](Config& c) -> auto& { return c.parallel.dp; }, -1));
  k.push_back(int_key("parallel.pp", "pipeline-parallel degree (-1 = infer)", [](Config& c) -> auto& { return c.parallel.pp; }, -1));
  k.push_back(int_key("parallel.cp", "context-parallel degree (-1 = infer)", [](Config& c) -> auto& { return c.parallel.cp; }, -1));
  k.push_back(int_list_key("parallel.pp_layers", "layers per pipeline stage, e.g. [3, 5] ([] = split evenly)", [](Config& c) -> auto& { return c.parallel.pp_layers; }));
  k.push_back(choice_key("parallel.pp_schedule", std::string("pipeline schedule: ") + enum_help(kPipelineScheduleNames),
                         [](Config& c) -> auto& { return c.parallel.pp_schedule; },
                         parse_pipeline_schedule, pipeline_schedule_name));
  k.push_back(choice_key("parallel.cp_split", std::string("context-parallel split: ") + enum_help(kCpSplitNames),
                         [](Config& c) -> auto& { return c.parallel.cp_split; },
                         parse_cp_split, cp_split_name));
  k.push_back(choice_key("parallel.cp_comm", std::string("context-parallel exchange: ") + enum_help(kCpCommNames),
                         [](Config& c) -> auto& { return c.parallel.cp_comm; },
                         parse_cp_comm, cp_comm_name));
  k.push_back(int_key("parallel.cp_ulysses", "cp_comm = hybrid: ranks per all-to-all group U (cp = U x R ring steps; 1 < U < cp)", [](Config& c) -> auto& { return c.parallel.cp_ulysses; }, 1));
  k.push_back(int_key("parallel.cp_inner_ring", "cp_comm = double_ring: ranks per inner ring (1 < inner < cp, divides cp)", [](Config& c) -> auto& { return c.parallel.cp_inner_ring; }, 1));
  k.push_back(choice_key("parallel.dp_balance", std::string("data-parallel balance: ") + enum_help(kDpBalanceNames),
                         [](Config& c) -> auto& { return c.parallel.dp_balance; },
                         parse_dp_balance, dp_balance_name));
  k.push_back(int_key("parallel.bucket_size", "gradient elements per data-parallel reduction bucket (whole tensors, at least this many)", [](Config& c) -> auto& { return c.parallel.bucket_size; }, 1));
  k.push_back(bool_key("parallel.overlap_grad_reduce", "reduce gradient buckets during backward (false: all after backward)", [](Config& c) -> auto& { return c.parallel.overlap_grad_reduce; }));
}

// [checkpoint]
void add_checkpoint_keys(std::vector<ConfigKey>& k) {
  k.push_back(str_key("checkpoint.dir", "folder for checkpoints and metrics.jsonl", [](Config& c) -> auto& { return c.checkpoint.dir; }));
  k.push_back(int_key("checkpoint.every", "write a checkpoint every N steps (0 = only at the end)", [](Config& c) -> auto& { return c.checkpoint.every; }, 0));
  k.push_back(int_key("checkpoint.keep", "keep this run's newest N checkpoints", [](Config& c) -> auto& { return c.checkpoint.keep; }, 1));
  k.push_back(in(KeyScope::run, bool_key("checkpoint.overwrite", "let a fresh run replace another run's checkpoints and metrics in checkpoint.dir", [](Config& c) -> auto& { return c.checkpoint.overwrite; })));
  // [trace]
  k.push_back(str_key("trace.path", "write a Chrome trace-event JSON timeline of every rank's phases and waits here (\"\" = off)", [](Config& c) -> auto& { return c.trace.path; }));
}

std::vector<ConfigKey> make_keys() {
  std::vector<ConfigKey> k;
  for (const auto add : {add_model_keys, add_attention_keys, add_data_keys, add_train_keys, add_parallel_keys,
                         add_checkpoint_keys})
    add(k);
  return k;
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

const ConfigKey* find_config_key(const std::string& name) {
  for (const ConfigKey& k : config_keys())
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> apply_toml_file(Config& config, const std::string& path) {
  std::string text;
  try {
    text = read_document_file(path, "config file");
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  }
  return apply_toml_text(config, text, path);
}

std::vector<ConfigDifference> config_differences(const Config& a, const Config& b) {
  std::vector<ConfigDifference> d;
  for (const ConfigKey& k : config_keys())
    if (k.get(a) != k.get(b)) d.push_back({k.name, k.get(a), k.get(b), k.scope});
  return d;
}

void set_model_key(LlamaConfig& model, const std::string& key, const std::string& text) {
  const ConfigKey* k = find_config_key(key);
  if (!k || (k->scope != KeyScope::model && k->scope != KeyScope::function))
    throw std::logic_error("set_model_key: '" + key + "' is not a model key");
  Config c;
  c.model = model;
  k->set(c, text);
  model = c.model;
}

std::vector<ConfigDifference> config_text_differences(const std::string& a, const std::string& origin_a,
                                                      const std::string& b) {
  Config ca, cb;
  apply_toml_text(ca, a, origin_a);
  apply_toml_text(cb, b, "this run's configuration");
  return config_differences(ca, cb);
}

std::vector<std::string> resume_warnings(const std::string& saved, const std::string& origin, const std::string& run) {
  std::vector<std::string> warnings;
  for (const ConfigDifference& d : config_text_differences(saved, origin, run)) {
    if (d.scope == KeyScope::model || d.scope == KeyScope::function)
      throw std::runtime_error(origin + ": cannot resume: " + d.key + " is " + d.a + " in the checkpoint but " + d.b +
                               " in this run");
    if (d.scope != KeyScope::run) warnings.push_back("resuming with " + d.key + " = " + d.b + " (checkpoint had " + d.a + ")");
  }
  return warnings;
}

void check_toml_nesting(const std::string& text, const std::string& origin) {
  enum { plain, basic, literal, multi_basic, multi_literal, comment } state = plain;
  int depth = 0, line = 1, key_dots = 0;
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto refuse = [&](const std::string& what) {
    throw ConfigError("config file '" + origin + "':" + std::to_string(line) + ": " + what +
                      " (lct reads at most " + std::to_string(kMaxTomlNesting) + ")");
  };
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    const bool triple = i + 2 < n && text[i + 1] == c && text[i + 2] == c;
    if (c == '\n') {
      ++line, key_dots = 0;
      if (state == comment || state == basic || state == literal) state = plain;
      continue;
    }
    switch (state) {
      case comment: break;
      case basic:
        if (c == '\\') ++i;
        else if (c == '"') state = plain;
        break;
      case literal:
        if (c == '\'') state = plain;
        break;
      case multi_basic:
        if (c == '\\') ++i;
        else if (c == '"' && triple) state = plain, i += 2;
        break;
      case multi_literal:
        if (c == '\'' && triple) state = plain, i += 2;
        break;
      case plain:
        if (c == '#') state = comment;
        else if (c == '"') state = triple ? (i += 2, multi_basic) : basic;
        else if (c == '\'') state = triple ? (i += 2, multi_literal) : literal;
        else if (c == '[' || c == '{') {
          if (++depth > kMaxTomlNesting) refuse("arrays or tables nested more than " + std::to_string(kMaxTomlNesting) + " deep");
        } else if (c == ']' || c == '}') {
          depth = std::max(depth - 1, 0);
        } else if (c == '.' && !(i > 0 && is_digit(text[i - 1]) && i + 1 < n && is_digit(text[i + 1]))) {
          // a dotted key's separator (a number's point has digits on both sides)
          if (++key_dots >= kMaxTomlNesting) refuse("a dotted key of more than " + std::to_string(kMaxTomlNesting) + " parts");
        }
        break;
    }
  }
}

std::vector<std::string> apply_toml_text(Config& config, const std::string& text, const std::string& origin) {
  check_toml_nesting(text, origin);
  std::vector<std::string> set;
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << e.source().begin.line << ":" << e.source().begin.column;
    throw ConfigError("config file '" + origin + "':" + where.str() + ": " +
                      std::string(e.description()));
  }
  for (auto&& [section, node] : root) {
    const std::string sec(section.str());
    const toml::table* table = node.as_table();
    if (!table)
      throw ConfigError("config file '" + origin + "': '" + sec +
                        "' must be a section ([" + sec + "]), not a value");
    for (auto&& [key, value] : *table) {
      const std::string name = sec + "." + std::string(key.str());
      const ConfigKey* k = find_config_key(name);
      if (!k) throw ConfigError("config file '" + origin + "': unknown key '" + printable(name) + "'");
      std::string text;
      switch (k->type) {
        case KeyType::integer:
          if (!value.is_integer())
            throw ConfigError("config file '" + origin + "': " + name + " must be an integer");
          text = std::to_string(value.as_integer()->get());
          break;
        case KeyType::number:
          if (!value.is_number())
            throw ConfigError("config file '" + origin + "': " + name + " must be a number");
          text = number_text(value.value<double>().value());
          break;
        case KeyType::boolean:
          if (!value.is_boolean())
            throw ConfigError("config file '" + origin + "': " + name + " must be true or false");
          text = value.as_boolean()->get() ? "true" : "false";
          break;
        case KeyType::boolean_or_auto:
          if (value.is_boolean())
            text = value.as_boolean()->get() ? "true" : "false";
          else if (value.is_string() && value.as_string()->get() == "auto")
            text = "auto";
          else
            throw ConfigError("config file '" + origin + "': " + name + " must be true, false or \"auto\"");
          break;
        case KeyType::string:
          if (!value.is_string())
            throw ConfigError("config file '" + origin + "': " + name + " must be a string");
          text = value.as_string()->get();
          break;
        case KeyType::integer_list: {
          const toml::array* arr = value.as_array();
          if (!arr) throw ConfigError("config file '" + origin + "': " + name + " must be a list of integers");
          std::vector<int64_t> v;
          for (const toml::node& e : *arr) {
            if (!e.is_integer())
              throw ConfigError("config file '" + origin + "': " + name + " must be a list of integers");
            v.push_back(e.as_integer()->get());
          }
          text = int_list_text(v);
          break;
        }
      }
      try {
        k->set(config, text);
      } catch (const ConfigError& e) {
        throw ConfigError("config file '" + origin + "': " + e.what());
      }
      set.push_back(name);
    }
  }
  return set;
}

void apply_overrides(Config& config, const std::map<std::string, std::string>& overrides) {
  for (const auto& [name, text] : overrides) {
    const ConfigKey* k = find_config_key(name);
    if (!k) throw ConfigError("unknown key '" + printable(name) + "'");
    k->set(config, text);
  }
}

namespace {

// data.* and the per-document mask keys they feed
void validate_data(const Config& c) {
  if ((c.data.source == DataSource::text || c.data.source == DataSource::tokens) && c.data.path.empty())
    throw ConfigError(std::string("data.path is required when data.source = ") + data_source_name(c.data.source));
  if (c.data.min_doc_len > c.data.max_doc_len)
    throw ConfigError("data.min_doc_len (" + std::to_string(c.data.min_doc_len) +
                      ") must be <= data.max_doc_len (" + std::to_string(c.data.max_doc_len) + ")");
  if (c.data.seq_len > kMaxSeqLen) throw ConfigError("data.seq_len is too large");
  if (!(c.data.passkey_depth == -1.0 || (c.data.passkey_depth >= 0.0 && c.data.passkey_depth <= 1.0)))
    throw ConfigError("data.passkey_depth must be -1 (uniform) or in [0, 1], got " + number_text(c.data.passkey_depth));
  if (!(c.data.prefix_fraction >= 0 && c.data.prefix_fraction < 1))
    throw ConfigError("data.prefix_fraction must be in [0, 1), got " + number_text(c.data.prefix_fraction));
  if (c.data.answers_per_question > (int64_t(1) << 20))
    throw ConfigError("data.answers_per_question must be at most 2^20, got " + std::to_string(c.data.answers_per_question));
  {
    const MaskKind mask = c.model.attention_mask.kind;
    const std::string name = std::string("attention.mask = ") + mask_kind_name(mask);
    const bool marked = c.data.segment_end_id >= 0;  // the token file marks the structure
    if (marked && c.data.source != DataSource::tokens)
      throw ConfigError(std::string("data.segment_end_id marks segments in a token file (data.source = tokens), not in "
                                    "data.source = ") + data_source_name(c.data.source));
    if (c.data.source == DataSource::tokens) {  // ids a key names: in the file's type, the model's vocabulary
      const int64_t widest = c.data.token_dtype == TokenDtype::uint16 ? 65535 : 4294967295LL;
      const std::string type = std::string("a ") + token_dtype_name(c.data.token_dtype) + " token file (ids 0 to " +
                               std::to_string(widest) + ")";
      if (c.data.separator_id > widest)
        throw ConfigError("data.separator_id = " + std::to_string(c.data.separator_id) + " can never occur in " + type);
      if (marked && c.data.segment_end_id > widest)
        throw ConfigError("data.segment_end_id = " + std::to_string(c.data.segment_end_id) + " can never occur in " +
                          type);
      if (marked && c.data.segment_end_id >= c.model.vocab_size)
        throw ConfigError("data.segment_end_id = " + std::to_string(c.data.segment_end_id) +
                          " is outside model.vocab_size = " + std::to_string(c.model.vocab_size) +
                          " (it stays in its segment: the model reads it)");
    }
    if (marked && c.data.segment_end_id == c.data.separator_id)
      throw ConfigError("data.segment_end_id = " + std::to_string(c.data.segment_end_id) +
                        " is data.separator_id, which ends documents; give another id");
    if (marked && (c.data.prefix_fraction > 0 || c.data.answers_per_question > 0))
      throw ConfigError(std::string("data.segment_end_id takes the structure from the file: drop ") +
                        (c.data.prefix_fraction > 0 ? "data.prefix_fraction" : "data.answers_per_question") +
                        " (the rule for unmarked documents)");
    if (mask == MaskKind::prefix_lm && !(c.data.prefix_fraction > 0) && !marked)
      throw ConfigError(name + " needs data.prefix_fraction > 0 (each document's bidirectional prefix, as a share of "
                               "its tokens) or data.segment_end_id (a token file's marks)");
    if (mask == MaskKind::prefix_lm && c.data.answers_per_question > 0)
      throw ConfigError(name + " takes no data.answers_per_question (that is shared_question's)");
    if (mask == MaskKind::shared_question && c.data.answers_per_question < 1 && !marked)
      throw ConfigError(name + " needs data.answers_per_question >= 1 (the answers after each document's question) "
                               "or data.segment_end_id (a token file's marks)");
    if (!c.model.attention_mask.per_document() && (c.data.prefix_fraction > 0 || c.data.answers_per_question > 0 || marked))
      throw ConfigError(std::string(c.data.prefix_fraction > 0       ? "data.prefix_fraction"
                                    : c.data.answers_per_question > 0 ? "data.answers_per_question"
                                                                      : "data.segment_end_id") +
                        " is used only with attention.mask = prefix_lm or shared_question (here " +
                        mask_kind_name(mask) + ")");
  }
  if (c.data.max_doc_len < 2 && (c.data.source == DataSource::synthetic || c.data.source == DataSource::passkey ||
                                 c.data.source == DataSource::copy))
    throw ConfigError("data.max_doc_len = " + std::to_string(c.data.max_doc_len) +
                      ": documents of one token have no next token to predict, so the run would have no "
                      "targets (give 2 or more)");
  if (c.train.loss_on == LossOn::answers && c.data.source != DataSource::synthetic &&
      c.data.source != DataSource::passkey)
    throw ConfigError(std::string("train.loss_on = answers needs a source that marks answers (synthetic or "
                                  "passkey), not data.source = ") + data_source_name(c.data.source));
  if (c.data.source == DataSource::passkey) {
    const bool fixed = c.data.doc_lengths == DocLengthDist::fixed;  // every document max_doc_len long
    const int64_t shortest = fixed ? c.data.max_doc_len : c.data.min_doc_len;
    if (shortest < passkey_min_length())
      throw ConfigError(std::string("data.source = passkey needs ") + (fixed ? "data.max_doc_len" : "data.min_doc_len") +
                        " >= " + std::to_string(passkey_min_length()) +
                        " (the introduction, the key line, the question and the answer), got " +
                        std::to_string(shortest));
  }
}

// train.*, the CAD and DCA settings, checkpoint.dir
void validate_training(const Config& c) {
  // model.rope_scaling = dynamic needs no pp or cp: a rule of the resolved layout, checked in
  // make_run_plan (src/train/run_plan.cpp) after parallel.* = -1 is inferred
  if (c.train.threads > kMaxThreads)
    throw ConfigError("train.threads = " + std::to_string(c.train.threads) + " is more than lct runs (at most " +
                      std::to_string(kMaxThreads) + "; 0 = all cores)");
  if (!(c.attention.cad.tolerance > 0)) throw ConfigError("attention.cad_tolerance must be > 0");
  if (c.train.recompute_layers > c.model.num_hidden_layers)
    throw ConfigError("train.recompute_layers must be in 0..model.num_hidden_layers = " +
                      std::to_string(c.model.num_hidden_layers) + ", got " + std::to_string(c.train.recompute_layers));
  if (c.train.recompute_layers > 0 && c.train.recompute == Recompute::none)
    throw ConfigError("train.recompute_layers = " + std::to_string(c.train.recompute_layers) +
                      " needs train.recompute = selective or full (none recomputes no layer)");
  if (!(c.train.lr > 0)) throw ConfigError("train.lr must be > 0");
  if (c.train.min_lr < 0 || c.train.min_lr > c.train.lr)
    throw ConfigError("train.min_lr must be in [0, train.lr]");
  // the optimizer divides by 1 - beta^t in float32: beta must stay below 1 there
  if (!(c.train.beta1 >= 0 && float(c.train.beta1) < 1.0f))
    throw ConfigError("train.beta1 must be in [0, 1) as a float32 (1 - beta1 > 0), got " + number_text(c.train.beta1));
  if (!(c.train.beta2 >= 0 && float(c.train.beta2) < 1.0f))
    throw ConfigError("train.beta2 must be in [0, 1) as a float32 (1 - beta2 > 0), got " + number_text(c.train.beta2));
  if (!(c.train.eps > 0)) throw ConfigError("train.eps must be > 0");
  if (c.train.weight_decay < 0) throw ConfigError("train.weight_decay must be >= 0");
  // decoupled decay multiplies every weight by 1 - lr x weight_decay each step: at or
  // beyond 1 the weights flip sign and grow without bound
  if (c.train.optimizer == OptimizerKind::adamw && c.train.lr * c.train.weight_decay >= 1)
    throw ConfigError("train.lr x train.weight_decay = " + number_text(c.train.lr * c.train.weight_decay) +
                      " must be < 1 (AdamW multiplies the weights by 1 - lr x weight_decay every step)");
  if (c.train.grad_clip < 0) throw ConfigError("train.grad_clip must be >= 0");
  if (!(c.train.heartbeat_s >= 0) || !std::isfinite(c.train.heartbeat_s))
    throw ConfigError("train.heartbeat_s must be >= 0 seconds (0 = no heartbeat), got " + number_text(c.train.heartbeat_s));
  if (c.checkpoint.dir.empty()) throw ConfigError("checkpoint.dir must not be empty");
  if (c.model.attention_kernel == AttentionKernel::dca && c.model.dca_chunk_size - c.model.dca_local_size <= c.model.dca_local_size)
    log_warn("attention.dca_chunk_size - attention.dca_local_size (the chunk length " +
             std::to_string(c.model.dca_chunk_size - c.model.dca_local_size) +
             ") is not above attention.dca_local_size (" + std::to_string(c.model.dca_local_size) +
             "): DCA's successive part then never keeps exact distances beyond the chunk");
}

}  // namespace

std::vector<std::string> inert_keys(const Config& c, const std::set<std::string>* given) {
  const Config d;
  const MaskKind mask = c.model.attention_mask.kind;
  const std::string mask_text = std::string("attention.mask = ") + mask_kind_name(mask);
  const std::string source = std::string("data.source = ") + data_source_name(c.data.source);
  const bool dca = c.model.attention_kernel == AttentionKernel::dca;
  // key, whether it acts under the resolved run, and what makes it inert
  const struct {
    const char* key;
    bool acts;
    std::string why;
  } rules[] = {
      {"train.bf16_kernel", c.train.precision == Precision::bf16, "train.precision = fp32"},
      {"attention.window",
       mask == MaskKind::sliding_window || mask == MaskKind::sink_window || mask == MaskKind::bidirectional_window,
       mask_text},
      {"attention.sink_tokens", mask == MaskKind::sink_window, mask_text},
      {"attention.block_size",
       mask == MaskKind::chunked || mask == MaskKind::causal_blockwise || mask == MaskKind::block_sparse, mask_text},
      {"attention.top_blocks", mask == MaskKind::block_sparse, mask_text},
      {"attention.dca_chunk_size", dca, "attention.kernel = causal"},
      {"attention.dca_local_size", dca, "attention.kernel = causal"},
      {"attention.dca_mscale", dca, "attention.kernel = causal"},
      {"attention.dca_mscale_original_length", dca, "attention.kernel = causal"},
      {"attention.logit_scaling_length", c.model.logit_scaling.on(), "attention.logit_scaling = none"},
      {"model.rope_scaling_factor", c.model.rope_scaling != RopeScaling::none, "model.rope_scaling = none"},
      {"model.rope_original_length", c.model.rope_scaling != RopeScaling::none, "model.rope_scaling = none"},
      {"data.passkey_depth", c.data.source == DataSource::passkey, source},
      {"data.separator_id", c.data.source == DataSource::tokens, source},
      {"data.token_dtype", c.data.source == DataSource::tokens, source},
      {"data.separator", c.data.source == DataSource::text, source},
  };
  std::vector<std::string> out;
  for (const auto& r : rules) {
    if (r.acts) continue;
    const ConfigKey* k = find_config_key(r.key);
    if (!k) throw std::logic_error(std::string("inert_keys: no key ") + r.key);
    if (given ? given->count(r.key) > 0 : k->get(c) != k->get(d)) out.push_back(std::string(r.key) + " = " + k->get(c) + " does nothing under " +
                                                   r.why);
  }
  return out;
}

void validate_config(const Config& c) {
  const std::string model_error = c.model.validate();
  if (!model_error.empty()) throw ConfigError(model_error);
  validate_data(c);
  validate_training(c);
}

std::string config_key_lines(const Config& config) {
  std::string t;
  for (const ConfigKey& k : config_keys()) t += k.name + " = " + k.get(config) + "\n";
  return t;
}

std::string config_to_toml(const Config& config) {
  std::ostringstream out;
  std::string section;
  for (const ConfigKey& k : config_keys()) {
    const size_t dot = k.name.find('.');
    const std::string sec = k.name.substr(0, dot), key = k.name.substr(dot + 1);
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    const std::string v = k.get(config);
    if (k.type == KeyType::string || (k.type == KeyType::boolean_or_auto && v == "auto")) {
      toml::table t;
      t.insert("v", v);
      std::ostringstream q;
      q << t;  // "v = '...'" with correct TOML quoting
      out << key << q.str().substr(1) << "\n";
    } else {
      out << key << " = " << v << "\n";
    }
  }
  return out.str();
}

}  // namespace lct
