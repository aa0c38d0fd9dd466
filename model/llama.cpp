#include "model/llama.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "data/rng.h"

namespace lct {

std::string LlamaConfig::validate() const {
  auto positive = [](int64_t v) { return v > 0; };
  if (!positive(vocab_size)) return "model.vocab_size must be > 0";
  if (!positive(hidden_size)) return "model.hidden_size must be > 0";
  if (!positive(intermediate_size)) return "model.intermediate_size must be > 0";
  if (!positive(num_hidden_layers)) return "model.num_hidden_layers must be > 0";
  if (!positive(num_attention_heads)) return "model.num_attention_heads must be > 0";
  if (!positive(num_key_value_heads)) return "model.num_key_value_heads must be > 0";
  if (hidden_size % num_attention_heads != 0)
    return "model.hidden_size (" + std::to_string(hidden_size) +
           ") must be divisible by model.num_attention_heads (" +
           std::to_string(num_attention_heads) + ")";
  if (num_attention_heads % num_key_value_heads != 0)
    return "model.num_key_value_heads (" + std::to_string(num_key_value_heads) +
           ") must divide model.num_attention_heads (" + std::to_string(num_attention_heads) + ")";
  if (head_dim() % 2 != 0)
    return "head dim hidden_size/num_attention_heads = " + std::to_string(head_dim()) +
           " must be even for RoPE";
  if (!(rope_theta > 0)) return "model.rope_theta must be > 0";
  if (!(rms_norm_eps > 0)) return "model.rms_norm_eps must be > 0";
  if (!(init_std > 0)) return "model.init_std must be > 0";
  if (!(dca_chunk_size > dca_local_size && dca_local_size >= 0))
    return "attention.dca_chunk_size (" + std::to_string(dca_chunk_size) +
           ") must be > attention.dca_local_size (" + std::to_string(dca_local_size) +
           ") >= 0";
  if (dca_chunk_size > (int64_t(1) << 30)) return "attention.dca_chunk_size is too large";
  if (!(dca_mscale > 0)) return "attention.dca_mscale must be > 0";
  if (dca_mscale_original_length < 0) return "attention.dca_mscale_original_length must be >= 0";
  return {};
}

TensorTable build_llama_table(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim();
  const int64_t kvdim = c.num_key_value_heads * c.head_dim();
  TensorTable t;
  t.add("model.embed_tokens.weight", {V, C}, TensorInit::normal, -1, true);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {C}, TensorInit::ones, l, false);
    t.add(p + "self_attn.q_proj.weight", {qdim, C}, TensorInit::normal, l, true);
    t.add(p + "self_attn.k_proj.weight", {kvdim, C}, TensorInit::normal, l, true);
    t.add(p + "self_attn.v_proj.weight", {kvdim, C}, TensorInit::normal, l, true);
    t.add(p + "self_attn.o_proj.weight", {C, qdim}, TensorInit::normal_output, l, true);
    t.add(p + "post_attention_layernorm.weight", {C}, TensorInit::ones, l, false);
    t.add(p + "mlp.gate_proj.weight", {I, C}, TensorInit::normal, l, true);
    t.add(p + "mlp.up_proj.weight", {I, C}, TensorInit::normal, l, true);
    t.add(p + "mlp.down_proj.weight", {C, I}, TensorInit::normal_output, l, true);
  }
  t.add("model.norm.weight", {C}, TensorInit::ones, -1, false);
  if (!c.tie_word_embeddings) t.add("lm_head.weight", {V, C}, TensorInit::normal, -1, true);
  return t;
}

void init_llama_params(const TensorTable& table, const LlamaConfig& c, uint64_t seed,
                       float* params) {
  const double out_std = c.init_std / std::sqrt(2.0 * c.num_hidden_layers);
  for (const TensorSpec& s : table.specs()) {
    float* p = params + s.offset;
    // FNV-1a of the name: stable across compilers, unlike std::hash
    uint64_t stream = 0xcbf29ce484222325ULL;
    for (unsigned char ch : s.name) stream = (stream ^ ch) * 0x100000001b3ULL;
    if (s.init == TensorInit::ones) {
      std::fill(p, p + s.numel, 1.0f);
      continue;
    }
    const double std = s.init == TensorInit::normal_output ? out_std : c.init_std;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < s.numel; ++i) p[i] = float(std * normal_at(seed, stream, uint64_t(i)));
  }
}

int64_t matmul_params_per_token(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim();
  const int64_t kvdim = c.num_key_value_heads * c.head_dim();
  const int64_t per_layer = qdim * C * 2 + kvdim * C * 2 + 3 * I * C;
  return per_layer * c.num_hidden_layers + c.vocab_size * C;
}

LlamaModel::LlamaModel(const LlamaConfig& config) : LlamaModel(config, whole_model_stage(config)) {}

LlamaModel::LlamaModel(const LlamaConfig& config, const StageSpec& stage)
    : config_(config), stage_(stage) {
  const std::string err = config.validate();
  if (!err.empty()) throw std::invalid_argument(err);
  if (stage.first_layer < 0 || stage.end_layer > config.num_hidden_layers ||
      stage.num_layers() < 1)
    throw std::invalid_argument("pipeline stage layers [" + std::to_string(stage.first_layer) +
                                ", " + std::to_string(stage.end_layer) + ") out of range");
  table_ = build_llama_table(config_);
  num_params_ = 0;
  for (const TensorSpec& s : table_.specs()) num_params_ += s.numel;
  params.assign(size_t(table_.total()), 0.0f);
  grads.assign(size_t(table_.total()), 0.0f);
  attn_params_.kernel = config_.attention_kernel;
  attn_params_.num_heads = config_.num_attention_heads;
  attn_params_.num_kv_heads = config_.num_key_value_heads;
  attn_params_.head_dim = int(config_.head_dim());
  attn_params_.scale = float(1.0 / std::sqrt(double(config_.head_dim())));
  attn_params_.dca.chunk_size = int32_t(config_.dca_chunk_size);
  attn_params_.dca.local_size = int32_t(config_.dca_local_size);
  attn_params_.dca.mscale = float(config_.dca_mscale);
  attn_params_.dca.mscale_original_length = int32_t(config_.dca_mscale_original_length);
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto at = [&](const char* n) { return table_.get(p + n).offset; };
    layer_offsets_.push_back({at("input_layernorm.weight"), at("self_attn.q_proj.weight"),
                              at("self_attn.k_proj.weight"), at("self_attn.v_proj.weight"),
                              at("self_attn.o_proj.weight"), at("post_attention_layernorm.weight"),
                              at("mlp.gate_proj.weight"), at("mlp.up_proj.weight"),
                              at("mlp.down_proj.weight")});
  }
  embed_offset_ = table_.get("model.embed_tokens.weight").offset;
  lm_head_offset_ =
      config_.tie_word_embeddings ? embed_offset_ : table_.get("lm_head.weight").offset;
  final_norm_offset_ = table_.get("model.norm.weight").offset;
  build_activation_table();
}

// What one micro-batch saves between forward and backward, per token (C hidden,
// H query heads, hd head dim, I MLP width), for each layer of the stage:
//   x_in C, rstd1 1, h1 C, q H*hd, k KV*hd, v KV*hd, attn H*hd, lse H,
//   x_mid C, rstd2 1, h2 C, gate I, up I, act I
// then the stage output x_out C (the last layer's output: sent to the next stage, or
// the final norm's input), rstd_final 1 and h_final C on the last stage, and dx C, the
// residual-stream gradient (received from the next stage, sent to the previous one).
void LlamaModel::build_activation_table() {
  const LlamaConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads;
  const int64_t qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  ActivationTable& t = acts_table_;
  for (int l = stage_.first_layer; l < stage_.end_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerIds i;
    i.x_in = t.add(p + "x_in", C);
    i.rstd1 = t.add(p + "rstd1", 1);
    i.h1 = t.add(p + "h1", C);
    i.q = t.add(p + "q", qdim);
    i.k = t.add(p + "k", kvdim);
    i.v = t.add(p + "v", kvdim);
    i.attn = t.add(p + "attn", qdim);
    i.lse = t.add(p + "lse", H);
    i.x_mid = t.add(p + "x_mid", C);
    i.rstd2 = t.add(p + "rstd2", 1);
    i.h2 = t.add(p + "h2", C);
    i.gate = t.add(p + "gate", I);
    i.up = t.add(p + "up", I);
    i.act = t.add(p + "act", I);
    ids_.push_back(i);
  }
  x_out_ = t.add("x_out", C);
  if (stage_.has_head) {
    rstd_final_ = t.add("rstd_final", 1);
    h_final_ = t.add("h_final", C);
  }
  dx_ = t.add("dx", C);
}

void LlamaModel::zero_grads() { std::fill(grads.begin(), grads.end(), 0.0f); }

LlamaModel::LayerWeights LlamaModel::layer_weights(std::vector<float>& arena, int l) {
  const LayerOffsets& o = layer_offsets_[size_t(l)];
  float* a = arena.data();
  return {a + o.attn_norm, a + o.wq, a + o.wk,    a + o.wv,   a + o.wo,
          a + o.mlp_norm,  a + o.wgate, a + o.wup, a + o.wdown};
}

float* LlamaModel::layer_output(int l, ActivationSlot& s) {
  return l + 1 < stage_.end_layer ? s.tensor(ids(l + 1).x_in) : s.tensor(x_out_);
}

void LlamaModel::ensure_scratch(int64_t T, int64_t max_position) {
  const LlamaConfig& c = config_;
  // RoPE covers every in-document position, and DCA's query positions 0..C even for
  // short documents (grow-only; the kernel reads the table through attn_params_).
  int64_t rope_rows = std::max(max_position + 1, T);
  if (c.attention_kernel == AttentionKernel::dca) rope_rows = std::max(rope_rows, c.dca_chunk_size + 1);
  if (rope_rows > rope_.max_positions) {
    rope_ = build_rope_table(rope_rows, c.head_dim(), c.rope_theta);
  }
  // (set on every call, not at allocation, so copies of the model use their own table)
  attn_params_.dca.rope_cos = rope_.cos.data();
  attn_params_.dca.rope_sin = rope_.sin.data();
  attn_params_.dca.rope_positions = rope_.max_positions;
  if (T <= scratch_tokens_) return;
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  // dh C, dq qdim, dk kvdim, dv kvdim, dattn qdim, dgate/dup/dact I, plus logit rows
  const int64_t logit_rows = std::min<int64_t>(T, kLogitRows);
  scratch_.assign(size_t(T * (C + 2 * qdim + 2 * kvdim + 3 * I) + logit_rows * c.vocab_size), 0.0f);
  float* p = scratch_.data();
  auto take = [&](int64_t n) {
    float* r = p;
    p += T * n;
    return r;
  };
  dh_ = take(C);
  dq_ = take(qdim);
  dk_ = take(kvdim);
  dv_ = take(kvdim);
  dattn_ = take(qdim);
  dgate_ = take(I);
  dup_ = take(I);
  dact_ = take(I);
  logits_ = p;
  scratch_tokens_ = T;
}

int64_t LlamaModel::activation_bytes() const {
  return pool_.peak_bytes() + int64_t(scratch_.size() * sizeof(float));
}

ActivationSlot& LlamaModel::begin(const PackedBatch& batch, int micro_batch) {
  const int64_t T = batch.num_tokens();
  if (T == 0) throw std::invalid_argument("empty batch");
  int32_t max_position = 0;
  for (int32_t p : batch.positions) max_position = std::max(max_position, p);
  ensure_scratch(T, max_position);
  ActivationSlot& s = pool_.acquire();
  s.reset(acts_table_, T);
  s.batch = &batch;
  s.micro_batch = micro_batch;
  tasks_for_documents(batch.cu_seqlens, s.tasks);
  if (config_.attention_kernel == AttentionKernel::dca) {
    s.key_positions.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t)
      s.key_positions[size_t(t)] = dca_key_position(batch.positions[size_t(t)], attn_params_.dca);
  }
  return s;
}

void LlamaModel::embed_forward(ActivationSlot& s) {
  embedding_forward(stage_input(s), s.batch->tokens.data(), params.data() + embed_offset_,
                    s.tokens(), config_.hidden_size);
}

void LlamaModel::embed_backward(ActivationSlot& s) {
  embedding_backward(grads.data() + embed_offset_, residual_grad(s), s.batch->tokens.data(),
                     s.tokens(), config_.hidden_size);
}

void LlamaModel::attn_in_forward(int l, ActivationSlot& s) {
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens(), C = c.hidden_size, hd = c.head_dim();
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads;
  const LayerWeights w = layer_weights(params, l);
  const LayerIds& a = ids(l);
  float *h1 = s.tensor(a.h1), *q = s.tensor(a.q), *k = s.tensor(a.k);
  rmsnorm_forward(h1, s.tensor(a.rstd1), s.tensor(a.x_in), w.attn_norm, T, C, float(c.rms_norm_eps));
  matmul_forward(q, h1, w.wq, T, C, H * hd);
  matmul_forward(k, h1, w.wk, T, C, KV * hd);
  matmul_forward(s.tensor(a.v), h1, w.wv, T, C, KV * hd);
  if (c.attention_kernel == AttentionKernel::dca) {
    // DCA: keys are rotated once by t mod s; queries stay unrotated and the kernel
    // rotates each tile by the position its key range needs (core_attention.h)
    rope_forward(k, s.key_positions.data(), rope_, T, KV, hd);
  } else {
    const int32_t* positions = s.batch->positions.data();
    rope_forward(q, positions, rope_, T, H, hd);
    rope_forward(k, positions, rope_, T, KV, hd);
  }
}

void LlamaModel::attention_forward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const LayerIds& a = ids(l);
  placement.forward(attn_params_, s.tasks, s.tensor(a.q), s.tensor(a.k), s.tensor(a.v),
                    s.tensor(a.attn), s.tensor(a.lse));
}

void LlamaModel::attn_out_forward(int l, ActivationSlot& s) {
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens(), C = c.hidden_size, I = c.intermediate_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim();
  const LayerWeights w = layer_weights(params, l);
  const LayerIds& a = ids(l);
  float *x_in = s.tensor(a.x_in), *x_mid = s.tensor(a.x_mid), *h2 = s.tensor(a.h2);
  float *gate = s.tensor(a.gate), *up = s.tensor(a.up), *act = s.tensor(a.act);
  float* x_out = layer_output(l, s);
  // x_mid = x_in + attn Wo^T  (the projection is written, then the residual added)
  matmul_forward(x_mid, s.tensor(a.attn), w.wo, T, qdim, C);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) x_mid[i] += x_in[i];
  rmsnorm_forward(h2, s.tensor(a.rstd2), x_mid, w.mlp_norm, T, C, float(c.rms_norm_eps));
  matmul_forward(gate, h2, w.wgate, T, C, I);
  matmul_forward(up, h2, w.wup, T, C, I);
  swiglu_forward(act, gate, up, T * I);
  matmul_forward(x_out, act, w.wdown, T, I, C);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) x_out[i] += x_mid[i];
}

// On entry dx holds dLoss/d(layer output); on exit dLoss/d(x_mid) (attention block's output).
void LlamaModel::attn_out_backward(int l, ActivationSlot& s) {
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens(), C = c.hidden_size, I = c.intermediate_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim();
  const LayerWeights w = layer_weights(params, l);
  const LayerWeights g = layer_weights(grads, l);
  const LayerIds& a = ids(l);
  float *dx = residual_grad(s), *h2 = s.tensor(a.h2);
  // MLP block. forward: x_out = x_mid + act Wdown^T ; act = silu(gate) * up
  std::fill(dact_, dact_ + T * I, 0.0f);
  matmul_backward(dact_, g.wdown, dx, s.tensor(a.act), w.wdown, T, I, C);
  swiglu_backward(dgate_, dup_, dact_, s.tensor(a.gate), s.tensor(a.up), T * I);
  std::fill(dh_, dh_ + T * C, 0.0f);
  matmul_backward(dh_, g.wgate, dgate_, h2, w.wgate, T, C, I);
  matmul_backward(dh_, g.wup, dup_, h2, w.wup, T, C, I);
  // residual: dx already carries d x_mid from the skip path; add the norm's share
  rmsnorm_backward(dx, g.mlp_norm, dh_, s.tensor(a.x_mid), w.mlp_norm, s.tensor(a.rstd2), T, C);
  // Attention output projection. forward: x_mid = x_in + attn Wo^T
  std::fill(dattn_, dattn_ + T * qdim, 0.0f);
  matmul_backward(dattn_, g.wo, dx, s.tensor(a.attn), w.wo, T, qdim, C);
}

void LlamaModel::attention_backward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens();
  const int64_t qdim = c.num_attention_heads * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const LayerIds& a = ids(l);
  std::fill(dq_, dq_ + T * qdim, 0.0f);
  std::fill(dk_, dk_ + T * kvdim, 0.0f);
  std::fill(dv_, dv_ + T * kvdim, 0.0f);
  placement.backward(attn_params_, s.tasks, s.tensor(a.q), s.tensor(a.k), s.tensor(a.v),
                     s.tensor(a.attn), s.tensor(a.lse), dattn_, dq_, dk_, dv_);
}

// On exit dx holds dLoss/d(layer input).
void LlamaModel::attn_in_backward(int l, ActivationSlot& s) {
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens(), C = c.hidden_size, hd = c.head_dim();
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads;
  const LayerWeights w = layer_weights(params, l);
  const LayerWeights g = layer_weights(grads, l);
  const LayerIds& a = ids(l);
  float* h1 = s.tensor(a.h1);
  if (c.attention_kernel == AttentionKernel::dca) {
    rope_backward(dk_, s.key_positions.data(), rope_, T, KV, hd);  // dq is already pre-RoPE
  } else {
    const int32_t* positions = s.batch->positions.data();
    rope_backward(dq_, positions, rope_, T, H, hd);
    rope_backward(dk_, positions, rope_, T, KV, hd);
  }
  std::fill(dh_, dh_ + T * C, 0.0f);
  matmul_backward(dh_, g.wq, dq_, h1, w.wq, T, C, H * hd);
  matmul_backward(dh_, g.wk, dk_, h1, w.wk, T, C, KV * hd);
  matmul_backward(dh_, g.wv, dv_, h1, w.wv, T, C, KV * hd);
  rmsnorm_backward(residual_grad(s), g.attn_norm, dh_, s.tensor(a.x_in), w.attn_norm,
                   s.tensor(a.rstd1), T, C);
}

CrossEntropyStats LlamaModel::head_forward_backward(ActivationSlot& s, float grad_scale,
                                                    bool backward, double* token_loss) {
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens(), C = c.hidden_size, V = c.vocab_size;
  if (!stage_.has_head) throw std::logic_error("head_forward_backward on a stage without the head");
  const float* lm_head = params.data() + lm_head_offset_;
  const float* final_norm = params.data() + final_norm_offset_;
  float *x_final = s.tensor(x_out_), *h_final = s.tensor(h_final_), *rstd = s.tensor(rstd_final_);
  rmsnorm_forward(h_final, rstd, x_final, final_norm, T, C, float(c.rms_norm_eps));

  // LM head and loss in row chunks, so logits never take T x V memory. With backward,
  // the head's gradients are produced right here: dh_final = dlogits W, dW += dlogits^T h.
  CrossEntropyStats stats;
  if (backward) std::fill(dh_, dh_ + T * C, 0.0f);
  const PackedBatch& batch = *s.batch;
  const uint8_t* answers = batch.answer_mask.empty() ? nullptr : batch.answer_mask.data();
  for (int64_t r0 = 0; r0 < T; r0 += kLogitRows) {
    const int64_t n = std::min(kLogitRows, T - r0);
    matmul_forward(logits_, h_final + r0 * C, lm_head, n, C, V);
    cross_entropy_forward_backward(logits_, batch.targets.data() + r0,
                                   answers ? answers + r0 : nullptr, n, V, backward, grad_scale,
                                   stats, token_loss ? token_loss + r0 : nullptr);
    if (backward)
      matmul_backward(dh_ + r0 * C, grads.data() + lm_head_offset_, logits_, h_final + r0 * C,
                      lm_head, n, C, V);
  }
  if (!backward) return stats;
  float* dx = residual_grad(s);
  std::fill(dx, dx + T * C, 0.0f);
  rmsnorm_backward(dx, grads.data() + final_norm_offset_, dh_, x_final, final_norm, rstd, T, C);
  return stats;
}

void LlamaModel::stage_forward(ActivationSlot& s, AttentionPlacement& placement) {
  if (stage_.has_embedding) embed_forward(s);
  for (int l = stage_.first_layer; l < stage_.end_layer; ++l) {
    attn_in_forward(l, s);
    phase_done();
    attention_forward(l, s, placement);
    phase_done();
    attn_out_forward(l, s);
    phase_done();
  }
}

void LlamaModel::stage_backward(ActivationSlot& s, AttentionPlacement& placement) {
  // the final norm and the LM head sit at the end of the arena (tied: the head is the
  // embedding, which is only final after the embedding backward, at offset 0)
  if (stage_.has_head) report_final(final_norm_offset_);
  for (int l = stage_.end_layer - 1; l >= stage_.first_layer; --l) {
    attn_out_backward(l, s);
    phase_done();
    attention_backward(l, s, placement);
    phase_done();
    attn_in_backward(l, s);
    report_final(layer_range(table_, l, l + 1).begin);
    phase_done();
  }
  if (stage_.has_embedding) {
    embed_backward(s);
    report_final(0);
  }
}

CrossEntropyStats LlamaModel::forward_backward(const PackedBatch& batch, float grad_scale,
                                               bool backward, double* token_loss) {
  if (!stage_.has_embedding || !stage_.has_head)
    throw std::logic_error("forward_backward needs the whole model (use the pipeline executor)");
  ActivationSlot& s = begin(batch, 0);
  stage_forward(s, local_attention_);
  const CrossEntropyStats stats = head_forward_backward(s, grad_scale, backward, token_loss);
  if (backward) stage_backward(s, local_attention_);
  end(s);
  return stats;
}

}  // namespace lct
