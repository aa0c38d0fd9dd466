#include "model/llama_config.h"

#include <fmt/format.h>
#include <cmath>
#include <cstdio>
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
  // a bound far above any real model that keeps every size product within int64
  constexpr int64_t kMaxDim = int64_t(1) << 31;
  if (vocab_size > kMaxDim || hidden_size > kMaxDim || intermediate_size > kMaxDim)
    return "model.vocab_size, hidden_size and intermediate_size must be <= 2^31";
  if (num_hidden_layers > 65536 || num_attention_heads > 65536)  // the tables list each one
    return "model.num_hidden_layers and num_attention_heads must be <= 65536";
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
  // the parameter count in 128 bits, as build_llama_table lays the tensors out: every
  // size lct derives from a model (parameters, gradients, optimizer moments, bytes on the
  // wire, activations of up to 2^30 tokens) then fits int64 with room to spare
  if (const long double n = parameter_count(); n > kMaxParameters)
    return "model.vocab_size, hidden_size, intermediate_size and num_hidden_layers give " +
           std::to_string(static_cast<double>(n)) + " parameters, more than lct addresses (2^40 = " +
           std::to_string(kMaxParameters) + ")";
  if (!(rope_theta > 0)) return "model.rope_theta must be > 0";
  if (!(rope_scaling_factor >= 1.0) || rope_scaling_factor > 1e6)
    return "model.rope_scaling_factor must be in [1, 1e6]";
  if ((rope_scaling == RopeScaling::dynamic || rope_scaling == RopeScaling::yarn) && rope_original_length <= 0)
    return std::string("model.rope_scaling = ") + rope_scaling_name(rope_scaling) +
           " needs model.rope_original_length > 0 (the trained length)";
  if (rope_original_length < 0 || rope_original_length > (int64_t(1) << 40))
    return "model.rope_original_length must be in [0, 2^40]";
  if (!(rms_norm_eps > 0)) return "model.rms_norm_eps must be > 0";
  if (!(init_std > 0)) return "model.init_std must be > 0";
  if (!(dca_chunk_size > dca_local_size && dca_local_size >= 0))
    return "attention.dca_chunk_size (" + std::to_string(dca_chunk_size) +
           ") must be > attention.dca_local_size (" + std::to_string(dca_local_size) +
           ") >= 0";
  if (dca_chunk_size > (int64_t(1) << 30)) return "attention.dca_chunk_size is too large";
  if (!(dca_mscale > 0)) return "attention.dca_mscale must be > 0";
  // (the kernel's parameters are int32: range-checked here, before they are narrowed)
  if (dca_mscale_original_length < 0 || dca_mscale_original_length > (int64_t(1) << 30))
    return "attention.dca_mscale_original_length must be in [0, 2^30]";
  if (logit_scaling.on()) {
    if (logit_scaling.length < 2 || logit_scaling.length > (int64_t(1) << 30))
      return std::string("attention.logit_scaling = ") + logit_scaling_name(logit_scaling.kind) +
             " needs attention.logit_scaling_length in [2, 2^30] (got " + std::to_string(logit_scaling.length) + ")";
    // n = p + 1 counts the keys a causal query reads; other masks read other counts
    if (!attention_mask.causal())
      return std::string("attention.logit_scaling = ") + logit_scaling_name(logit_scaling.kind) +
             " takes only attention.mask = causal (got " + mask_kind_name(attention_mask.kind) + ")";
  } else if (logit_scaling.length < 0 || logit_scaling.length > (int64_t(1) << 30)) {
    return "attention.logit_scaling_length must be in [0, 2^30]";
  }
  if (const std::string bad = attention_mask.validate(); !bad.empty()) return bad;
  if (attention_kernel == AttentionKernel::dca && !attention_mask.causal())
    return std::string("attention.kernel = dca takes only attention.mask = causal (got ") +
           mask_kind_name(attention_mask.kind) + ")";
  return {};
}

long double LlamaConfig::parameter_count() const {
  const __int128 C = hidden_size, I = intermediate_size, V = vocab_size, L = num_hidden_layers;
  const __int128 q = __int128(num_attention_heads) * head_dim(), kv = __int128(num_key_value_heads) * head_dim();
  const __int128 layer = 2 * C + q * C + 2 * kv * C + C * q + 3 * I * C;
  return static_cast<long double>(V * C * (tie_word_embeddings ? 1 : 2) + L * layer + C);
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
    // Q, K and V joined (one [qdim + 2 kvdim, C] product), gate and up too ([2I, C])
    t.add(p + "self_attn.q_proj.weight", {qdim, C}, TensorInit::normal, l, true, true);
    t.add(p + "self_attn.k_proj.weight", {kvdim, C}, TensorInit::normal, l, true, true);
    t.add(p + "self_attn.v_proj.weight", {kvdim, C}, TensorInit::normal, l, true);
    t.add(p + "self_attn.o_proj.weight", {C, qdim}, TensorInit::normal_output, l, true);
    t.add(p + "post_attention_layernorm.weight", {C}, TensorInit::ones, l, false);
    t.add(p + "mlp.gate_proj.weight", {I, C}, TensorInit::normal, l, true, true);
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

int64_t layer_matmul_params(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim();
  const int64_t kvdim = c.num_key_value_heads * c.head_dim();
  return qdim * C * 2 + kvdim * C * 2 + 3 * I * C;
}

int64_t matmul_params_per_token(const LlamaConfig& c) {
  return layer_matmul_params(c) * c.num_hidden_layers + c.vocab_size * c.hidden_size;
}

double layer_forward_flops(const LlamaConfig& c, int64_t tokens, int64_t pairs) {
  return 2.0 * double(layer_matmul_params(c)) * double(tokens) +
         4.0 * double(c.num_attention_heads) * double(c.head_dim()) * double(pairs);
}

LayerOffsets layer_offsets(const TensorTable& table, const LlamaConfig& config, int l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  auto at = [&](const char* n) { return table.get(p + n).offset; };
  const LayerOffsets o{at("input_layernorm.weight"),          at("self_attn.q_proj.weight"),
                       at("self_attn.o_proj.weight"),         at("post_attention_layernorm.weight"),
                       at("mlp.gate_proj.weight"),            at("mlp.down_proj.weight")};
  const int64_t C = config.hidden_size, I = config.intermediate_size;
  const int64_t qdim = config.num_attention_heads * config.head_dim();
  const int64_t kvdim = config.num_key_value_heads * config.head_dim();
  if (at("self_attn.k_proj.weight") != o.wqkv + qdim * C || at("self_attn.v_proj.weight") != o.wqkv + (qdim + kvdim) * C ||
      at("mlp.up_proj.weight") != o.wgate_up + I * C)
    throw std::logic_error("the parameter table does not join Q, K, V and gate, up");
  return o;
}

AttentionParams attention_params_of(const LlamaConfig& c) {
  AttentionParams p;
  p.kernel = c.attention_kernel;
  p.num_heads = c.num_attention_heads;
  p.num_kv_heads = c.num_key_value_heads;
  p.head_dim = int(c.head_dim());
  p.scale = float(1.0 / std::sqrt(double(c.head_dim())));
  p.dca.chunk_size = int32_t(c.dca_chunk_size);
  p.dca.local_size = int32_t(c.dca_local_size);
  p.dca.mscale = float(c.dca_mscale);
  p.dca.mscale_original_length = int32_t(c.dca_mscale_original_length);
  p.mask = c.attention_mask;
  return p;
}

std::string describe_attention(const LlamaConfig& m) {
  std::string t = attention_kernel_name(m.attention_kernel);
  if (m.attention_kernel == AttentionKernel::dca) {
    t += fmt::format(" (C {}, w {}", m.dca_chunk_size, m.dca_local_size);
    if (m.dca_mscale != 1.0) t += fmt::format(", mscale {:g}", m.dca_mscale);
    if (m.dca_mscale_original_length > 0) t += fmt::format(", yarn length {}", m.dca_mscale_original_length);
    t += ")";
  }
  if (!m.attention_mask.causal()) t += ", mask " + m.attention_mask.describe();
  if (m.logit_scaling.on()) t += ", " + logit_scaling_text(m.logit_scaling);
  return t;
}

std::string describe_attention_and_rope(const LlamaConfig& m) {
  const std::string rope = rope_scaling_text(m.rope());  // "" without scaling
  return describe_attention(m) + (rope.empty() ? "" : ", " + rope);
}

}  // namespace lct
