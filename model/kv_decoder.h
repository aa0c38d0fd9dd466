// Autoregressive decoding of one document with a KV cache (lct generate).
//
// The same layer math as training (model/decoder_layer.h) and the same core attention
// kernel (attention/core_attention.h), run on the document's new rows only: each layer
// appends its new rows' keys and values to the layer's cache and attends their queries
// against every cached row, as one attention task (queries at positions [t, t + n), keys
// [0, t + n) of the document). So the kernel applies the model's rules exactly as in a
// full forward: causal or DCA, and the mask. The cache holds K as the kernel wants it:
// rotated by the in-document position (causal), or by DCA's key position t mod s
// (dca_key_position), q then going in unrotated and the kernel rotating it by the
// intra-, successive- or inter-chunk position each key block needs.
//
// The document is planned up front: `prompt_tokens` P and `total_tokens` L (prompt plus
// every token that will be generated). What a full forward makes depend on the
// document's length is computed from L once, so the cache stays exact as it grows:
// dynamic RoPE's base (rope_effective_theta at L) and DCA's length-dependent logit
// multiplier (doc_len L). Every row's logits then equal those of a full forward over the
// finished document of L tokens, up to float summation order. Masks with per-document
// data take the prompt as the structure: prefix_lm's bidirectional prefix is the prompt
// (the first append must be the whole prompt, so every prompt query sees every prompt
// key), shared_question's question is the prompt and everything generated is one answer.
//
// fp32 throughout (checkpoints are precision-free; the products are fp32 GEMMs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/core_attention.h"
#include "model/llama_config.h"
#include "model/rope.h"

namespace lct {

class KvCacheDecoder {
 public:
  // params: the model's parameters in build_llama_table(config)'s layout; not copied, so
  // they must outlive the decoder. 1 <= prompt_tokens <= total_tokens < 2^31.
  KvCacheDecoder(const LlamaConfig& config, const float* params, int64_t prompt_tokens, int64_t total_tokens);

  // Runs tokens[n] through the model at positions [length(), length() + n) and keeps
  // their keys and values. logits[V] gets the last row's next-token logits, or with
  // every_row logits[n, V] every row's. The first call must be the whole prompt; later
  // ones may be any length, up to total_tokens in all.
  void append(std::span<const int32_t> tokens, float* logits, bool every_row = false);

  // Forgets the rows from `length` on, so that the next append continues the document
  // there (the prompt stays: prompt_tokens <= length <= length()). Scoring a given
  // continuation after generating one rewinds to the prompt (model/generation.h).
  void rewind(int64_t length);

  int64_t length() const { return length_; }
  int64_t prompt_tokens() const { return prompt_; }
  // The (query, key) pairs attention has read so far, under the mask (the FLOP
  // convention's count, attention/core_attention.h: attention_pairs).
  int64_t pairs() const { return pairs_; }
  const LlamaConfig& config() const { return config_; }

  // Whether the mask trains the next-token target at document position `position` (the
  // token there, predicted by the row before it), as lct eval's loss and training decide
  // (data/packing.h: drop_masked_targets) with the prompt as the document's structure:
  // not inside prefix_lm's prefix (position < prompt), not across shared_question's
  // question and its answer (position == prompt); every target under the other masks.
  bool trains_target(int64_t position) const;

  // Bytes the decoder allocates for a document (the cache; the rows of its longest append,
  // the prompt or `append_rows` later rows at once: 1 when decoding, n - 1 when scoring a
  // continuation of n tokens; their token tiles; the RoPE table; the kernel's workspace on
  // `threads` threads), not counting the parameters or the caller's logits: what lct
  // generate checks against the memory available up front.
  static double bytes(const LlamaConfig& config, int64_t prompt_tokens, int64_t total_tokens, int threads,
                      int64_t append_rows = 1);

  // Rows of the token tiles the token-linear steps (norms, products, MLP) run in: a
  // long prompt's intermediates never exist for all its rows at once.
  static constexpr int64_t kTileTokens = 1024;

 private:
  void ensure_rows(int64_t n);
  void attention_tasks(int64_t t0, int64_t n, std::vector<AttentionTask>& tasks) const;

  LlamaConfig config_;
  const float* params_;
  int64_t prompt_ = 0, total_ = 0, length_ = 0, pairs_ = 0;
  int64_t C_, I_, H_, KV_, hd_, qdim_, kvdim_;
  std::vector<LayerOffsets> offsets_;
  int64_t embed_offset_, lm_head_offset_, final_norm_offset_;
  RopeTable rope_;
  AttentionParams attn_;
  std::vector<float> k_cache_, v_cache_;  // [layers, total, KV hd], K rotated as the kernel reads it
  // rows of one append (grow-only): the residual stream, queries, attention output, LSE,
  // positions
  int64_t rows_ = 0;
  std::vector<float> x_, q_, attn_out_, lse_;
  std::vector<int32_t> positions_, key_positions_;
  std::vector<float> q_scale_;  // attention.logit_scaling's query factors (empty: none)
  // one token tile's intermediates (min(rows, kTileTokens) rows)
  std::vector<float> rstd1_, h1_, qkv_, x_mid_, rstd2_, h2_, gate_up_, act_, h_final_;
  std::vector<AttentionTask> tasks_;
};

}  // namespace lct
