// Llama-style decoder, fp32, hand-written forward and backward.
//
//   x = embed[tokens]                                   [T, C]
//   per layer l:
//     h1 = rmsnorm(x, input_layernorm)
//     q, k, v = h1 Wq^T, h1 Wk^T, h1 Wv^T               [T, H*hd], [T, KV*hd] x2
//     q, k = rope(q, k, in-document positions)
//     a = core_attention(q, k, v, documents)           [T, H*hd]
//     x = x + a Wo^T
//     h2 = rmsnorm(x, post_attention_layernorm)
//     x = x + (silu(h2 Wgate^T) * (h2 Wup^T)) Wdown^T
//   logits = rmsnorm(x, norm) W_lm^T                    [T, V] (W_lm = embed if tied)
//   loss = sum over targets of -log softmax(logits)[target]  (normalised by the caller)
//
// The model owns the parameter and gradient arenas and the activations of one
// micro-batch. Layers are processed by index so that a pipeline stage can run a
// contiguous range of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <functional>

#include "attention/core_attention.h"
#include "data/packing.h"
#include "model/ops.h"
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

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Empty when valid, else a one-line description naming the offending key.
  std::string validate() const;
};

TensorTable build_llama_table(const LlamaConfig& config);

// Deterministic init: every element is a pure function of (seed, tensor name, index).
void init_llama_params(const TensorTable& table, const LlamaConfig& config, uint64_t seed,
                       float* params);

// Number of weights a token is multiplied by in the forward pass (projections, MLP,
// LM head); the embedding lookup is not a matmul.
int64_t matmul_params_per_token(const LlamaConfig& config);

class LlamaModel {
 public:
  explicit LlamaModel(const LlamaConfig& config);

  const LlamaConfig& config() const { return config_; }
  const TensorTable& table() const { return table_; }
  int64_t num_params() const { return num_params_; }

  std::vector<float> params;  // arena, laid out by table()
  std::vector<float> grads;   // same layout

  void zero_grads();
  float* param(const std::string& name) { return params.data() + table_.get(name).offset; }
  float* grad(const std::string& name) { return grads.data() + table_.get(name).offset; }

  // One micro-batch. Returns loss statistics (sum, not mean). With backward, the
  // gradient of grad_scale * (sum of token losses) is accumulated into grads.
  // token_loss (optional, [T]) receives each token's loss (0 where there is no target).
  CrossEntropyStats forward_backward(const PackedBatch& batch, float grad_scale, bool backward,
                                     double* token_loss = nullptr);

  // Called during backward with an arena offset x: every gradient at offsets >= x is
  // final for this micro-batch (after the LM head and final norm, after each layer
  // from the last, after the embedding with 0). Data parallelism starts reducing
  // gradient buckets from it; unset, nothing is called.
  std::function<void(int64_t)> grads_final_hook;

  // Bytes held by activations and scratch for the current capacity.
  int64_t activation_bytes() const;

 private:
  struct LayerWeights {
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *wgate, *wup, *wdown;
  };
  struct LayerOffsets {  // arena offsets of one layer's tensors (looked up once)
    int64_t attn_norm, wq, wk, wv, wo, mlp_norm, wgate, wup, wdown;
  };
  struct LayerActs {  // views into acts_, saved by forward for backward
    float *x_in, *rstd1, *h1, *q, *k, *v, *attn, *lse, *x_mid, *rstd2, *h2, *gate, *up, *act;
  };
  LayerWeights layer_weights(std::vector<float>& arena, int l);
  void ensure_capacity(int64_t T);
  void layer_forward(int l, int64_t T, const int32_t* positions,
                     const std::vector<AttentionTask>& tasks);
  void layer_backward(int l, int64_t T, const int32_t* positions,
                      const std::vector<AttentionTask>& tasks);

  LlamaConfig config_;
  TensorTable table_;
  int64_t num_params_ = 0;
  AttentionParams attn_params_;
  std::vector<LayerOffsets> layer_offsets_;
  int64_t embed_offset_ = 0, lm_head_offset_ = 0, final_norm_offset_ = 0;
  std::vector<AttentionTask> tasks_;  // reused across micro-batches
  std::vector<int32_t> key_positions_;  // DCA: RoPE position of each key (t mod s)
  RopeTable rope_;

  int64_t capacity_ = 0;  // tokens the activation buffers hold
  std::vector<float> acts_;
  std::vector<LayerActs> layer_acts_;
  float *x_final_ = nullptr, *rstd_final_ = nullptr, *h_final_ = nullptr;
  // backward scratch
  std::vector<float> scratch_;
  float *dx_ = nullptr, *dh_ = nullptr, *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr,
        *dattn_ = nullptr, *dgate_ = nullptr, *dup_ = nullptr, *dact_ = nullptr,
        *logits_ = nullptr;
  static constexpr int64_t kLogitRows = 512;  // LM head processed in row chunks
};

}  // namespace lct
