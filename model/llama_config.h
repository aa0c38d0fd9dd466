// The Llama model's shape (Hugging Face LlamaConfig names) and what follows from it
// alone: the parameter table, the deterministic init and the matmul FLOP count.
#pragma once

#include <cstdint>
#include <string>

#include "attention/core_attention.h"
#include "model/logit_scaling.h"
#include "model/rope.h"
#include "model/tensor_table.h"

namespace lct {

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 256;
  int64_t intermediate_size = 688;
  int num_hidden_layers = 4;
  int num_attention_heads = 4;
  int num_key_value_heads = 2;
  double rope_theta = 10000.0;
  // RoPE scaling beyond the trained length (model/rope.h): model.rope_scaling,
  // rope_scaling_factor, rope_original_length
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_scaling_factor = 1.0;
  int64_t rope_original_length = 0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  double init_std = 0.02;
  AttentionKernel attention_kernel = AttentionKernel::causal;
  // Dual Chunk Attention ([attention] dca_* keys; used when attention_kernel = dca):
  // C = chunk_size, w = local_size, chunk length s = C - w (core_attention.h).
  int64_t dca_chunk_size = 2048;
  int64_t dca_local_size = 256;
  double dca_mscale = 1.0;                  // constant logit multiplier
  int64_t dca_mscale_original_length = 0;   // > 0: times max(1, 0.1 ln(L_doc / it) + 1)
  // Length-dependent logit scaling per query (attention.logit_scaling,
  // attention.logit_scaling_length; model/logit_scaling.h): any kernel, causal mask only.
  LogitScaling logit_scaling;
  // Which keys of its document a query reads ([attention] mask, window, sink_tokens,
  // block_size; attention/attention_mask.h). Unused fields keep their defaults.
  AttentionMask attention_mask{MaskKind::causal, 4096, 4, 8192, 3};

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The parameters build_llama_table lays out, counted in 128 bits (never wraps; the
  // dimensions' own bounds keep it far below 2^127).
  long double parameter_count() const;
  // validate() refuses a model of more parameters (4 TiB of float32: no machine lct runs
  // on), so that every size derived from a valid model fits int64.
  static constexpr int64_t kMaxParameters = int64_t(1) << 40;
  RopeSpec rope() const { return {rope_theta, rope_scaling, rope_scaling_factor, rope_original_length}; }
  // Empty when valid, else a one-line description naming the offending key.
  std::string validate() const;
};

TensorTable build_llama_table(const LlamaConfig& config);

// Arena offsets of layer l's tensors in build_llama_table's layout. The table joins the
// products that share an input: wqkv is q_proj's offset, with k_proj and v_proj right
// after it (one [(H + 2 KV) hd, C] matrix), and wgate_up gate_proj's, with up_proj after
// it ([2I, C]); this checks that it does.
struct LayerOffsets {
  int64_t attn_norm, wqkv, wo, mlp_norm, wgate_up, wdown;
};
LayerOffsets layer_offsets(const TensorTable& table, const LlamaConfig& config, int l);

// Core attention's parameters for this model: kernel, heads, head dim, scale and the DCA
// settings (the DCA RoPE table is the caller's: rope_cos/sin/positions stay unset).
AttentionParams attention_params_of(const LlamaConfig& config);

// The model's core attention in one phrase, for logs, eval and inspect: "causal",
// "dca (C 2048, w 256[, mscale 1.2][, yarn length 4096])", "causal, mask sliding_window
// (window 4096)".
std::string describe_attention(const LlamaConfig& config);
// The same, and with RoPE scaling its rope_scaling_text: "causal, RoPE scaling yarn x4
// (trained length 512)" (eval, generate, inspect).
std::string describe_attention_and_rope(const LlamaConfig& config);

// Deterministic init: every element is a pure function of (seed, tensor name, index).
void init_llama_params(const TensorTable& table, const LlamaConfig& config, uint64_t seed,
                       float* params);

// Number of weights a token is multiplied by in the forward pass (projections, MLP,
// LM head); the embedding lookup is not a matmul.
int64_t matmul_params_per_token(const LlamaConfig& config);
// One decoder layer's share: its projections and MLP.
int64_t layer_matmul_params(const LlamaConfig& config);
// One decoder layer's forward FLOPs over `tokens` tokens and `pairs` attention pairs, by
// the step's FLOP convention (src/train/flops.h) for one layer: 2 x its matmul weights
// per token + 4 H hd per pair (pairs = 0: its linear part alone).
double layer_forward_flops(const LlamaConfig& config, int64_t tokens, int64_t pairs);

}  // namespace lct
