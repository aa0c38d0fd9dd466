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

LlamaModel::LlamaModel(const LlamaConfig& config) : config_(config) {
  const std::string err = config.validate();
  if (!err.empty()) throw std::invalid_argument(err);
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
}

void LlamaModel::zero_grads() { std::fill(grads.begin(), grads.end(), 0.0f); }

LlamaModel::LayerWeights LlamaModel::layer_weights(std::vector<float>& arena, int l) {
  const LayerOffsets& o = layer_offsets_[size_t(l)];
  float* a = arena.data();
  return {a + o.attn_norm, a + o.wq, a + o.wk,    a + o.wv,   a + o.wo,
          a + o.mlp_norm,  a + o.wgate, a + o.wup, a + o.wdown};
}

void LlamaModel::ensure_capacity(int64_t T) {
  if (T <= capacity_) return;
  const LlamaConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads;
  const int64_t qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const int64_t L = c.num_hidden_layers;
  // per layer: x_in C, rstd1 1, h1 C, q qdim, k kvdim, v kvdim, attn qdim, lse H,
  //            x_mid C, rstd2 1, h2 C, gate I, up I, act I   (all per token)
  const int64_t per_layer = 4 * C + 2 + 2 * qdim + 2 * kvdim + H + 3 * I;
  acts_.assign(size_t(T * (per_layer * L + 2 * C + 1)), 0.0f);
  layer_acts_.resize(size_t(L));
  float* p = acts_.data();
  auto take = [&](int64_t n) {
    float* r = p;
    p += T * n;
    return r;
  };
  for (int64_t l = 0; l < L; ++l) {
    LayerActs& a = layer_acts_[size_t(l)];
    a.x_in = take(C);
    a.rstd1 = take(1);
    a.h1 = take(C);
    a.q = take(qdim);
    a.k = take(kvdim);
    a.v = take(kvdim);
    a.attn = take(qdim);
    a.lse = take(H);
    a.x_mid = take(C);
    a.rstd2 = take(1);
    a.h2 = take(C);
    a.gate = take(I);
    a.up = take(I);
    a.act = take(I);
  }
  x_final_ = take(C);
  rstd_final_ = take(1);
  h_final_ = take(C);  // allocated in the same arena: total per_layer*L + 2C + 1 per token
  (void)h_final_;

  // backward scratch: dx C, dh C, dq qdim, dk kvdim, dv kvdim, dattn qdim, dgate/dup/dact I
  const int64_t logit_rows = std::min<int64_t>(T, kLogitRows);
  scratch_.assign(size_t(T * (2 * C + 2 * qdim + 2 * kvdim + 3 * I) + logit_rows * c.vocab_size),
                  0.0f);
  p = scratch_.data();
  dx_ = take(C);
  dh_ = take(C);
  dq_ = take(qdim);
  dk_ = take(kvdim);
  dv_ = take(kvdim);
  dattn_ = take(qdim);
  dgate_ = take(I);
  dup_ = take(I);
  dact_ = take(I);
  logits_ = p;

  // RoPE covers every in-document position, and DCA's query positions 0..C even for
  // short documents.
  int64_t max_pos = std::max<int64_t>(T, rope_.max_positions);
  if (c.attention_kernel == AttentionKernel::dca) max_pos = std::max(max_pos, c.dca_chunk_size + 1);
  rope_ = build_rope_table(max_pos, c.head_dim(), c.rope_theta);
  key_positions_.assign(size_t(T), 0);
  capacity_ = T;
}

int64_t LlamaModel::activation_bytes() const {
  return int64_t(acts_.size() + scratch_.size()) * int64_t(sizeof(float));
}

void LlamaModel::layer_forward(int l, int64_t T, const int32_t* positions,
                               const std::vector<AttentionTask>& tasks) {
  const LlamaConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, hd = c.head_dim();
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads;
  const LayerWeights w = layer_weights(params, l);
  LayerActs& a = layer_acts_[size_t(l)];
  float* x_out = l + 1 < c.num_hidden_layers ? layer_acts_[size_t(l + 1)].x_in : x_final_;

  rmsnorm_forward(a.h1, a.rstd1, a.x_in, w.attn_norm, T, C, float(c.rms_norm_eps));
  matmul_forward(a.q, a.h1, w.wq, T, C, H * hd);
  matmul_forward(a.k, a.h1, w.wk, T, C, KV * hd);
  matmul_forward(a.v, a.h1, w.wv, T, C, KV * hd);
  if (c.attention_kernel == AttentionKernel::dca) {
    // DCA: keys are rotated once by t mod s; queries stay unrotated and the kernel
    // rotates each tile by the position its key range needs (core_attention.h)
    rope_forward(a.k, key_positions_.data(), rope_, T, KV, hd);
  } else {
    rope_forward(a.q, positions, rope_, T, H, hd);
    rope_forward(a.k, positions, rope_, T, KV, hd);
  }
  attention_forward(attn_params_, tasks, a.q, a.k, a.v, a.attn, a.lse);
  // x_mid = x_in + attn Wo^T  (the projection is written, then the residual added)
  matmul_forward(a.x_mid, a.attn, w.wo, T, H * hd, C);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) a.x_mid[i] += a.x_in[i];

  rmsnorm_forward(a.h2, a.rstd2, a.x_mid, w.mlp_norm, T, C, float(c.rms_norm_eps));
  matmul_forward(a.gate, a.h2, w.wgate, T, C, I);
  matmul_forward(a.up, a.h2, w.wup, T, C, I);
  swiglu_forward(a.act, a.gate, a.up, T * I);
  matmul_forward(x_out, a.act, w.wdown, T, I, C);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) x_out[i] += a.x_mid[i];
}

// On entry dx_ holds dLoss/d(layer output); on exit dLoss/d(layer input).
void LlamaModel::layer_backward(int l, int64_t T, const int32_t* positions,
                                const std::vector<AttentionTask>& tasks) {
  const LlamaConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, hd = c.head_dim();
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads;
  const LayerWeights w = layer_weights(params, l);
  const LayerWeights g = layer_weights(grads, l);
  LayerActs& a = layer_acts_[size_t(l)];

  // MLP block. forward: x_out = x_mid + act Wdown^T ; act = silu(gate) * up
  std::fill(dact_, dact_ + T * I, 0.0f);
  matmul_backward(dact_, g.wdown, dx_, a.act, w.wdown, T, I, C);
  swiglu_backward(dgate_, dup_, dact_, a.gate, a.up, T * I);
  std::fill(dh_, dh_ + T * C, 0.0f);
  matmul_backward(dh_, g.wgate, dgate_, a.h2, w.wgate, T, C, I);
  matmul_backward(dh_, g.wup, dup_, a.h2, w.wup, T, C, I);
  // residual: dx already carries d x_mid from the skip path; add the norm's share
  rmsnorm_backward(dx_, g.mlp_norm, dh_, a.x_mid, w.mlp_norm, a.rstd2, T, C);

  // Attention block. forward: x_mid = x_in + attn Wo^T
  std::fill(dattn_, dattn_ + T * H * hd, 0.0f);
  matmul_backward(dattn_, g.wo, dx_, a.attn, w.wo, T, H * hd, C);
  std::fill(dq_, dq_ + T * H * hd, 0.0f);
  std::fill(dk_, dk_ + T * KV * hd, 0.0f);
  std::fill(dv_, dv_ + T * KV * hd, 0.0f);
  attention_backward(attn_params_, tasks, a.q, a.k, a.v, a.attn, a.lse, dattn_, dq_, dk_, dv_);
  if (c.attention_kernel == AttentionKernel::dca) {
    rope_backward(dk_, key_positions_.data(), rope_, T, KV, hd);  // dq_ is already pre-RoPE
  } else {
    rope_backward(dq_, positions, rope_, T, H, hd);
    rope_backward(dk_, positions, rope_, T, KV, hd);
  }
  std::fill(dh_, dh_ + T * C, 0.0f);
  matmul_backward(dh_, g.wq, dq_, a.h1, w.wq, T, C, H * hd);
  matmul_backward(dh_, g.wk, dk_, a.h1, w.wk, T, C, KV * hd);
  matmul_backward(dh_, g.wv, dv_, a.h1, w.wv, T, C, KV * hd);
  rmsnorm_backward(dx_, g.attn_norm, dh_, a.x_in, w.attn_norm, a.rstd1, T, C);
}

CrossEntropyStats LlamaModel::forward_backward(const PackedBatch& batch, float grad_scale,
                                               bool backward, double* token_loss) {
  const LlamaConfig& c = config_;
  const int64_t T = batch.num_tokens(), C = c.hidden_size, V = c.vocab_size;
  const int L = c.num_hidden_layers;
  if (T == 0) throw std::invalid_argument("empty batch");
  ensure_capacity(T);
  tasks_for_documents(batch.cu_seqlens, tasks_);
  const std::vector<AttentionTask>& tasks = tasks_;
  const int32_t* positions = batch.positions.data();
  // (set here, not at allocation, so copies of the model point at their own table)
  attn_params_.dca.rope_cos = rope_.cos.data();
  attn_params_.dca.rope_sin = rope_.sin.data();
  attn_params_.dca.rope_positions = rope_.max_positions;
  if (c.attention_kernel == AttentionKernel::dca)
    for (int64_t t = 0; t < T; ++t)
      key_positions_[size_t(t)] = dca_key_position(positions[t], attn_params_.dca);

  const float* embed = params.data() + embed_offset_;
  const float* lm_head = params.data() + lm_head_offset_;
  float* d_lm_head = grads.data() + lm_head_offset_;
  const float* final_norm = params.data() + final_norm_offset_;

  embedding_forward(layer_acts_[0].x_in, batch.tokens.data(), embed, T, C);
  for (int l = 0; l < L; ++l) layer_forward(l, T, positions, tasks);
  rmsnorm_forward(h_final_, rstd_final_, x_final_, final_norm, T, C, float(c.rms_norm_eps));

  // LM head and loss in row chunks, so logits never take T x V memory. With backward,
  // the head's gradients are produced right here: dh_final = dlogits W, dW += dlogits^T h.
  CrossEntropyStats stats;
  if (backward) std::fill(dh_, dh_ + T * C, 0.0f);
  const uint8_t* answers = batch.answer_mask.empty() ? nullptr : batch.answer_mask.data();
  for (int64_t r0 = 0; r0 < T; r0 += kLogitRows) {
    const int64_t n = std::min(kLogitRows, T - r0);
    matmul_forward(logits_, h_final_ + r0 * C, lm_head, n, C, V);
    cross_entropy_forward_backward(logits_, batch.targets.data() + r0,
                                   answers ? answers + r0 : nullptr, n, V, backward, grad_scale,
                                   stats, token_loss ? token_loss + r0 : nullptr);
    if (backward) matmul_backward(dh_ + r0 * C, d_lm_head, logits_, h_final_ + r0 * C, lm_head, n, C, V);
  }
  if (!backward) return stats;

  std::fill(dx_, dx_ + T * C, 0.0f);
  rmsnorm_backward(dx_, grads.data() + final_norm_offset_, dh_, x_final_,
                   final_norm, rstd_final_, T, C);
  // the final norm and the LM head sit at the end of the arena (tied: the head is the
  // embedding, which is only final after the embedding backward, at offset 0)
  if (grads_final_hook) grads_final_hook(final_norm_offset_);
  for (int l = L - 1; l >= 0; --l) {
    layer_backward(l, T, positions, tasks);
    if (grads_final_hook) grads_final_hook(layer_range(table_, l, l + 1).begin);
  }
  embedding_backward(grads.data() + embed_offset_, dx_,
                     batch.tokens.data(), T, C);
  if (grads_final_hook) grads_final_hook(0);
  return stats;
}

}  // namespace lct
