#include "src/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "src/flops.h"
#include "src/h5io.h"
#include "src/log.h"
#include "src/params_io.h"

namespace lct {
namespace fs = std::filesystem;

int configure_threads(int64_t threads) {
  const int n = threads > 0 ? int(threads) : omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

std::string blas_description() {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return std::string("OpenBLAS ") + openblas_get_corename() +
         (env ? std::string(" (OPENBLAS_CORETYPE=") + env + ")" : std::string());
}

LlamaConfig model_config(const Config& config) {
  LlamaConfig m = config.model;
  m.attention_kernel = parse_attention_kernel(config.attention_kernel);
  return m;
}

std::unique_ptr<DocumentSource> make_document_source(const Config& c) {
  const uint64_t seed = uint64_t(c.train.seed);
  if (c.data.source == "text") return make_text_source(c.data.path, c.data.separator, seed);
  if (c.data.source == "tokens")
    return make_token_source(c.data.path, c.data.token_dtype, c.data.separator_id, seed);
  SyntheticOptions o;
  o.seed = seed;
  o.vocab_size = c.model.vocab_size;
  o.lengths.dist = parse_doc_length_dist(c.data.doc_lengths);
  o.lengths.min_doc_len = c.data.min_doc_len;
  o.lengths.max_doc_len = c.data.max_doc_len;
  o.lengths.seed = seed;
  return make_synthetic_source(o);
}

namespace {
OptimizerConfig optimizer_config(const Config& c) {
  OptimizerConfig o;
  o.kind = parse_optimizer(c.train.optimizer);
  o.lr = c.train.lr;
  o.min_lr = c.train.min_lr;
  o.warmup_steps = c.train.warmup_steps;
  o.total_steps = c.train.steps;
  o.beta1 = c.train.beta1;
  o.beta2 = c.train.beta2;
  o.eps = c.train.eps;
  o.weight_decay = c.train.weight_decay;
  o.grad_clip = c.train.grad_clip;
  return o;
}

const DocumentSource& checked_source(const std::unique_ptr<DocumentSource>& source,
                                     const Config& c) {
  if (source->vocab_required() > c.model.vocab_size)
    throw ConfigError("model.vocab_size (" + std::to_string(c.model.vocab_size) +
                      ") is smaller than the data's vocabulary (" +
                      std::to_string(source->vocab_required()) + ", " + source->describe() + ")");
  return *source;
}
}  // namespace

Trainer::Trainer(const Config& config)
    : config_(config),
      source_(make_document_source(config)),
      packer_(checked_source(source_, config), config.data.seq_len),
      model_(model_config(config)),
      opt_config_(optimizer_config(config)),
      optimizer_(opt_config_, model_.table()) {
  init_llama_params(model_.table(), model_.config(), uint64_t(config.train.seed),
                    model_.params.data());
}

StepRecord Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t step = steps_done_;  // 0-based index of this step
  const int64_t mb = config_.train.micro_batches;

  // The step's sequences are fixed up front so the loss can be normalised by the
  // global target count: every micro-batch's gradient is scaled by 1 / N_total.
  std::vector<PackedBatch> batches;
  batches.reserve(size_t(mb));
  int64_t targets = 0, tokens = 0, pairs = 0;
  for (int64_t m = 0; m < mb; ++m) {
    batches.push_back(packer_.sequence(step * mb + m));
    targets += batches.back().num_targets();
    tokens += batches.back().num_tokens();
    pairs += attended_pairs(batches.back());
  }
  const float grad_scale = targets > 0 ? 1.0f / float(targets) : 0.0f;

  model_.zero_grads();
  CrossEntropyStats stats;
  for (const PackedBatch& b : batches) {
    const CrossEntropyStats s = model_.forward_backward(b, grad_scale, true);
    stats.loss_sum += s.loss_sum;
    stats.targets += s.targets;
    stats.answers += s.answers;
    stats.answers_correct += s.answers_correct;
  }

  StepRecord r;
  r.step = step + 1;
  r.loss = targets > 0 ? stats.loss_sum / double(targets) : 0.0;
  r.grad_norm = global_grad_norm(model_.grads);
  if (!std::isfinite(r.grad_norm) || !std::isfinite(r.loss))
    throw std::runtime_error("step " + std::to_string(r.step) + ": loss or gradient is not finite (loss " +
                             std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) +
                             "); lower train.lr or check the data");
  const double clip = opt_config_.grad_clip > 0 && r.grad_norm > opt_config_.grad_clip
                          ? opt_config_.grad_clip / r.grad_norm
                          : 1.0;
  r.lr = learning_rate(opt_config_, step);
  optimizer_.step(model_.params, model_.grads, r.lr, clip);
  ++steps_done_;

  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.tokens = tokens;
  r.targets = targets;
  r.tokens_per_s = double(tokens) / (r.ms / 1e3);
  r.gflops = train_step_flops(model_.config(), tokens, pairs) / (r.ms / 1e3) / 1e9;
  r.answers = stats.answers;
  r.answers_correct = stats.answers_correct;
  return r;
}

std::string Trainer::save_checkpoint() {
  fs::create_directories(config_.checkpoint.dir);
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.h5", static_cast<long long>(steps_done_));
  const std::string path = (fs::path(config_.checkpoint.dir) / name).string();
  const std::string config_text = config_to_toml(config_);
  write_h5_atomically(path, [&](H5File& f) {
    f.set_attr("/", "format", std::string("lct-params"));
    f.set_attr("/", "format_version", int64_t(1));
    f.set_attr("/", "step", steps_done_);
    f.set_attr("/", "config", config_text);
    write_model_attrs(f, model_.config());
    write_tensors(f, "/params", model_.table(), model_.params.data());
  });
  // keep the newest checkpoint.keep files (names sort by step)
  std::vector<fs::path> existing;
  for (const auto& e : fs::directory_iterator(config_.checkpoint.dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && e.path().extension() == ".h5") existing.push_back(e.path());
  }
  std::sort(existing.begin(), existing.end());
  for (size_t i = 0; i + size_t(config_.checkpoint.keep) < existing.size(); ++i)
    fs::remove(existing[i]);
  return path;
}

void Trainer::run() {
  const LlamaConfig& mc = model_.config();
  const int64_t tokens_per_step = config_.data.seq_len * config_.train.micro_batches;
  log_info("lct train | %s | threads %d | %s", blas_description().c_str(), omp_get_max_threads(),
           source_->describe().c_str());
  log_info("model: %d layers, hidden %lld, heads %d/%d (head dim %lld), mlp %lld, vocab %lld, "
           "%.2fM params, attention %s",
           mc.num_hidden_layers, (long long)mc.hidden_size, mc.num_attention_heads,
           mc.num_key_value_heads, (long long)mc.head_dim(), (long long)mc.intermediate_size,
           (long long)mc.vocab_size, double(model_.num_params()) / 1e6,
           attention_kernel_name(mc.attention_kernel));
  log_info("train: %lld steps x %lld sequences x %lld tokens = %lld tokens/step, %s lr %.3g",
           (long long)config_.train.steps, (long long)config_.train.micro_batches,
           (long long)config_.data.seq_len, (long long)tokens_per_step,
           optimizer_name(opt_config_.kind), opt_config_.lr);
  log_info("GFLOP/s: causal-aware model FLOPs of real tokens, 3 x (2 x matmul params x tokens + "
           "4 x H x hd x layers x sum L_i(L_i+1)/2) per step");

  fs::create_directories(config_.checkpoint.dir);
  const std::string metrics_path = (fs::path(config_.checkpoint.dir) / "metrics.jsonl").string();
  metrics_.open(metrics_path, std::ios::trunc);
  metrics_.precision(10);
  if (!metrics_) throw std::runtime_error("cannot write metrics file '" + metrics_path + "'");

  double first_loss = 0;
  StepRecord r;
  while (steps_done_ < config_.train.steps) {
    r = train_step();
    if (r.step == 1) first_loss = r.loss;
    char acc[48] = "";
    if (r.answers > 0)
      std::snprintf(acc, sizeof acc, " | recall %.3f", double(r.answers_correct) / double(r.answers));
    if (r.step % config_.train.log_every == 0 || r.step == config_.train.steps || r.step == 1)
      log_info("step %5lld/%lld | loss %.4f | lr %.3e | gnorm %.3f | %7.1f ms | %8.0f tok/s | "
               "%6.1f GFLOP/s%s",
               (long long)r.step, (long long)config_.train.steps, r.loss, r.lr, r.grad_norm, r.ms,
               r.tokens_per_s, r.gflops, acc);
    metrics_ << "{\"step\":" << r.step << ",\"loss\":" << r.loss << ",\"lr\":" << r.lr
             << ",\"grad_norm\":" << r.grad_norm << ",\"ms\":" << r.ms
             << ",\"tokens\":" << r.tokens << ",\"tokens_per_s\":" << r.tokens_per_s
             << ",\"gflops\":" << r.gflops;
    if (r.answers > 0)
      metrics_ << ",\"retrieval_acc\":" << double(r.answers_correct) / double(r.answers);
    metrics_ << "}\n";
    metrics_.flush();
    if (config_.checkpoint.every > 0 && r.step % config_.checkpoint.every == 0 &&
        r.step != config_.train.steps)
      log_info("checkpoint: %s", save_checkpoint().c_str());
  }
  log_info("checkpoint: %s", save_checkpoint().c_str());
  log_info("done: loss %.4f -> %.4f over %lld steps; metrics in %s", first_loss, r.loss,
           (long long)r.step, metrics_path.c_str());
}

}  // namespace lct
