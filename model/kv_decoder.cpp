#include "model/kv_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/decoder_layer.h"
#include "model/ops.h"

namespace lct {

KvCacheDecoder::KvCacheDecoder(const LlamaConfig& config, const float* params, int64_t prompt_tokens,
                               int64_t total_tokens)
    : config_(config), params_(params), prompt_(prompt_tokens), total_(total_tokens) {
  const std::string err = config.validate();
  if (!err.empty()) throw std::invalid_argument(err);
  if (prompt_tokens < 1 || total_tokens < prompt_tokens || total_tokens > INT32_MAX)
    throw std::invalid_argument("a decoded document needs 1 <= prompt (" + std::to_string(prompt_tokens) +
                                ") <= total tokens (" + std::to_string(total_tokens) + ") < 2^31");
  C_ = config.hidden_size, I_ = config.intermediate_size, H_ = config.num_attention_heads;
  KV_ = config.num_key_value_heads, hd_ = config.head_dim();
  qdim_ = H_ * hd_, kvdim_ = KV_ * hd_;
  const TensorTable table = build_llama_table(config);
  for (int l = 0; l < config.num_hidden_layers; ++l) offsets_.push_back(layer_offsets(table, config, l));
  embed_offset_ = table.get("model.embed_tokens.weight").offset;
  lm_head_offset_ = config.tie_word_embeddings ? embed_offset_ : table.get("lm_head.weight").offset;
  final_norm_offset_ = table.get("model.norm.weight").offset;
  // RoPE over every position of the document (DCA: its query positions 0..C), with the
  // base dynamic scaling gives the finished document
  const bool dca = config.attention_kernel == AttentionKernel::dca;
  const int64_t rope_rows = dca ? std::max(total_, config.dca_chunk_size + 1) : total_;
  rope_ = build_rope_table(rope_rows, hd_, config.rope(), total_);
  attn_ = attention_params_of(config);
  attn_.dca.rope_cos = rope_.cos.data();
  attn_.dca.rope_sin = rope_.sin.data();
  attn_.dca.rope_positions = rope_.max_positions;
  const size_t cache = size_t(config.num_hidden_layers) * size_t(total_) * size_t(kvdim_);
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

double KvCacheDecoder::bytes(const LlamaConfig& c, int64_t prompt_tokens, int64_t total_tokens, int threads,
                             int64_t append_rows) {
  const double f = sizeof(float);
  const double H = double(c.num_attention_heads), hd = double(c.head_dim());
  const double qdim = H * hd, kvdim = double(c.num_key_value_heads) * hd;
  const double C = double(c.hidden_size), I = double(c.intermediate_size);
  const double L = double(total_tokens);
  const double cache = 2.0 * double(c.num_hidden_layers) * L * kvdim * f;
  // ensure_rows: the rows of the longest append, grow-only (x, q, attention output, LSE,
  // positions, key positions, logit scaling's factors), and one token tile of them. A
  // vector growing from the prompt's rows to a longer append's takes max(2 old, new) (the
  // standard library's growth) and holds the old ones beside them for a moment.
  const auto grown = [](int64_t from, int64_t to) { return to > from ? std::max(2 * from, to) + from : from; };
  const int64_t P = prompt_tokens, A = std::max<int64_t>(append_rows, 1);
  const double rows = double(grown(P, A)) * (C + 2.0 * qdim + H + 2.0 + (c.logit_scaling.on() ? 1.0 : 0.0)) * f;
  const double tile = double(grown(std::min(P, kTileTokens), std::min(std::max(P, A), kTileTokens))) *
                      (4.0 * C + qdim + 2.0 * kvdim + 3.0 * I + 2.0) * f;
  const double rope_rows = c.attention_kernel == AttentionKernel::dca
                               ? std::max(L, double(c.dca_chunk_size + 1))
                               : L;
  const double rope = rope_rows * hd * f;  // cos and sin, hd / 2 each
  const double kernel = double(attention_workspace_bytes(attention_params_of(c), total_tokens, total_tokens, threads));
  return cache + rows + tile + rope + kernel;
}

bool KvCacheDecoder::trains_target(int64_t position) const {
  switch (config_.attention_mask.kind) {
    case MaskKind::prefix_lm: return position >= prompt_;
    case MaskKind::shared_question: return position != prompt_;
    default: return true;
  }
}

void KvCacheDecoder::ensure_rows(int64_t n) {
  if (n <= rows_) return;
  rows_ = n;
  x_.resize(size_t(n * C_));
  q_.resize(size_t(n * qdim_));
  attn_out_.resize(size_t(n * qdim_));
  lse_.resize(size_t(n * H_));
  positions_.resize(size_t(n));
  key_positions_.resize(size_t(n));
  if (config_.logit_scaling.on()) q_scale_.resize(size_t(n));
  const size_t tile = size_t(std::min(n, kTileTokens));
  rstd1_.resize(tile);
  rstd2_.resize(tile);
  h1_.resize(tile * size_t(C_));
  qkv_.resize(tile * size_t(qdim_ + 2 * kvdim_));
  x_mid_.resize(tile * size_t(C_));
  h2_.resize(tile * size_t(C_));
  gate_up_.resize(tile * size_t(2 * I_));
  act_.resize(tile * size_t(I_));
  h_final_.resize(tile * size_t(C_));
}

// Rows [t0, t0 + n) of the document against its keys [0, t0 + n): one task, with the
// prompt as the mask's per-document structure (the prompt rows are one append).
void KvCacheDecoder::attention_tasks(int64_t t0, int64_t n, std::vector<AttentionTask>& tasks) const {
  AttentionTask t;
  t.q_row = 0;
  t.kv_row = 0;
  t.q_len = int32_t(n);
  t.kv_len = int32_t(t0 + n);
  t.q_pos = int32_t(t0);
  t.kv_pos = 0;
  t.doc_len = int32_t(total_);
  t.prefix_len = int32_t(prompt_);
  t.segment_pos = t0 < prompt_ ? 0 : int32_t(prompt_);  // shared_question: the question, or the one answer
  tasks.assign(1, t);
}

void KvCacheDecoder::rewind(int64_t length) {
  if (length < prompt_ || length > length_)
    throw std::logic_error("KvCacheDecoder::rewind: to " + std::to_string(length) + " tokens, outside [prompt " +
                           std::to_string(prompt_) + ", length " + std::to_string(length_) + "]");
  length_ = length;  // the rows beyond are overwritten by the next append
}

void KvCacheDecoder::append(std::span<const int32_t> tokens, float* logits, bool every_row) {
  const int64_t n = int64_t(tokens.size()), t0 = length_, V = config_.vocab_size;
  if (n < 1) throw std::invalid_argument("KvCacheDecoder::append: no tokens");
  if (t0 == 0 && n != prompt_)
    throw std::logic_error("KvCacheDecoder: the first append must be the whole prompt (" + std::to_string(prompt_) +
                           " tokens), got " + std::to_string(n));
  if (t0 + n > total_)
    throw std::logic_error("KvCacheDecoder: " + std::to_string(t0 + n) + " tokens, more than the " +
                           std::to_string(total_) + " planned");
  for (int32_t id : tokens)
    if (id < 0 || id >= V) throw std::invalid_argument("token id " + std::to_string(id) + " outside the vocabulary");
  ensure_rows(n);
  const bool dca = config_.attention_kernel == AttentionKernel::dca;
  for (int64_t i = 0; i < n; ++i) {
    positions_[size_t(i)] = int32_t(t0 + i);
    key_positions_[size_t(i)] = dca ? dca_key_position(t0 + i, attn_.dca) : int32_t(t0 + i);
    if (!q_scale_.empty()) q_scale_[size_t(i)] = logit_scale(config_.logit_scaling, t0 + i);
  }
  const float* p = params_;
  embedding_forward(x_.data(), tokens.data(), p + embed_offset_, n, C_);
  attention_tasks(t0, n, tasks_);
  pairs_ += attention_pairs(tasks_, attn_.mask);
  const int64_t tile = std::min(n, kTileTokens);

  LayerShape sh;
  sh.C = C_, sh.I = I_, sh.H = H_, sh.KV = KV_, sh.hd = hd_;
  sh.eps = float(config_.rms_norm_eps);
  sh.dca = dca;
  sh.rope = &rope_;
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const LayerOffsets& o = offsets_[size_t(l)];
    const LayerWeights w{p + o.attn_norm, p + o.mlp_norm, p + o.wqkv, p + o.wo, p + o.wgate_up, p + o.wdown};
    float* k_layer = k_cache_.data() + size_t(l) * size_t(total_ * kvdim_);
    float* v_layer = v_cache_.data() + size_t(l) * size_t(total_ * kvdim_);
    // a token tile's rows: its residual stream in place (x_out overwrites x_in once
    // x_mid holds what the rest of the layer needs), its q, k, v, attention output
    auto tile_rows = [&](int64_t r0, int64_t rn) {
      sh.T = rn;
      sh.positions = positions_.data() + r0;
      sh.key_positions = key_positions_.data() + r0;
      sh.q_scale = q_scale_.empty() ? nullptr : q_scale_.data() + r0;
      LayerActivations a{};
      a.x_in.f32 = x_.data() + r0 * C_;
      a.rstd1 = rstd1_.data();
      a.h1.f32 = h1_.data();
      a.q = q_.data() + r0 * qdim_;
      a.k = k_layer + (t0 + r0) * kvdim_;
      a.v = v_layer + (t0 + r0) * kvdim_;
      a.attn = attn_out_.data() + r0 * qdim_;
      a.lse = lse_.data() + r0 * H_;
      a.x_mid = x_mid_.data();
      a.rstd2 = rstd2_.data();
      a.h2.f32 = h2_.data();
      a.gate_up.f32 = gate_up_.data();
      a.act.f32 = act_.data();
      a.x_out = a.x_in.f32;
      return a;
    };
    LayerScratch scratch{};
    scratch.qkv = qkv_.data();
    for (int64_t r0 = 0; r0 < n; r0 += tile) attn_in_forward(sh, w, tile_rows(r0, std::min(tile, n - r0)), scratch);
    attention_forward(attn_, tasks_, q_.data(), k_layer, v_layer, attn_out_.data(), lse_.data());
    for (int64_t r0 = 0; r0 < n; r0 += tile) attn_out_forward(sh, w, tile_rows(r0, std::min(tile, n - r0)));
  }
  // final norm and LM head: the last row, or every row
  const int64_t first = every_row ? 0 : n - 1;
  for (int64_t r0 = first; r0 < n; r0 += tile) {
    const int64_t rn = std::min(tile, n - r0);
    rmsnorm_forward(h_final_.data(), rstd1_.data(), x_.data() + r0 * C_, p + final_norm_offset_, rn, C_,
                    float(config_.rms_norm_eps));
    matmul_forward(logits + (r0 - first) * V, h_final_.data(), p + lm_head_offset_, rn, C_, V);
  }
  length_ = t0 + n;
}

}  // namespace lct
