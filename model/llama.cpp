#include "model/llama.h"

#include "compute/parallel_for.h"
#include "model/trace.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace lct {

namespace {
// f(r0, n) for the token tiles [r0, r0 + n) of T rows in their one grid, in order, from
// row `from` (a tile's first row, or T) on: while they start before `end` (cover: through
// the tile holding row end - 1) or while they end by `end`. Returns the row they stopped
// at. With end = T both run every tile from `from`.
template <typename F>
int64_t run_tiles(int64_t from, int64_t end, bool cover, int64_t T, int64_t tile, F&& f) {
  for (; from < T && (cover ? from < end : std::min(from + tile, T) <= end); from = std::min(from + tile, T))
    f(from, std::min(tile, T - from));
  return from;
}
template <typename F>
void for_each_tile(int64_t T, int64_t tile, F&& f) {
  run_tiles(0, T, true, T, tile, f);
}
}  // namespace

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
  attn_params_ = attention_params_of(config_);
  for (int l = 0; l < config_.num_hidden_layers; ++l) layer_offsets_.push_back(layer_offsets(table_, config_, l));
  embed_offset_ = table_.get("model.embed_tokens.weight").offset;
  lm_head_offset_ =
      config_.tie_word_embeddings ? embed_offset_ : table_.get("lm_head.weight").offset;
  final_norm_offset_ = table_.get("model.norm.weight").offset;
  build_activation_table();
}

void LlamaModel::build_activation_table() {
  ActivationIds ids;
  acts_table_ = activation_table(config_, stage_, arith_.precision, recompute_, &ids);
  ids_ = std::move(ids.layers);
  x_out_ = ids.x_out, dx_ = ids.dx;
  recomputes_ = recomputes_attention_ = false;
  for (const LayerIds& i : ids_) {
    recomputes_ = recomputes_ || i.mode != Recompute::none;
    recomputes_attention_ = recomputes_attention_ || i.mode == Recompute::full;
  }
  for (Workspace& w : workspace_) w = Workspace{};
  scratch_tokens_ = 0;  // the tile buffers' layout follows the precision
}

void LlamaModel::set_tile_tokens(int64_t rows) {
  if (pool_.in_use() > 0) throw std::logic_error("set_tile_tokens while activation slots are in use");
  if (rows < 1) throw std::invalid_argument("a token tile needs at least one row");
  tile_tokens_ = rows;
  scratch_tokens_ = 0;  // the tile's scratch is sized by it
}

void LlamaModel::set_attention_chunk_rows(int64_t rows) {
  if (pool_.in_use() > 0) throw std::logic_error("set_attention_chunk_rows while activation slots are in use");
  if (rows < 1) throw std::invalid_argument("an attention run needs at least one row");
  attn_params_.chunk_rows = rows;
}

void LlamaModel::set_recompute(const RecomputePolicy& policy) {
  if (pool_.in_use() > 0) throw std::logic_error("set_recompute while activation slots are in use");
  if (policy.layers < 0 || policy.layers > config_.num_hidden_layers)
    throw std::invalid_argument("recompute layers " + std::to_string(policy.layers) + " outside 0.." +
                                std::to_string(config_.num_hidden_layers));
  recompute_ = policy;
  build_activation_table();
}

void LlamaModel::set_arithmetic(const Arithmetic& arith) {
  if (pool_.in_use() > 0) throw std::logic_error("set_arithmetic while activation slots are in use");
  arith_ = arith;
  attn_params_.precision = arith.precision;
  attn_params_.bf16_kernel = bf16_kernel_of(arith);
  build_activation_table();
  weight_copies_fresh_ = false;
  weight_copy_ranges_.clear();
  if (arith.precision == Precision::bf16) {
    weight_copies_.assign(params.size(), 0);
    // the stage's layers (their norms ride along) and the LM head (the embedding, if tied)
    weight_copy_ranges_.push_back(layer_range(table_, stage_.first_layer, stage_.end_layer));
    if (stage_.has_head)
      weight_copy_ranges_.push_back({lm_head_offset_, lm_head_offset_ + config_.vocab_size * config_.hidden_size});
  } else {
    std::vector<uint16_t>().swap(weight_copies_);
  }
}

void LlamaModel::refresh_weight_copies() {
  if (arith_.precision != Precision::bf16) return;
  for (const ArenaRange& r : weight_copy_ranges())
    to_bf16_bits(params.data() + r.begin, r.end - r.begin, weight_copies_.data() + r.begin);
  weight_copies_fresh_ = true;
}

// What one micro-batch saves between forward and backward, per token (C hidden,
// H query heads, hd head dim, I MLP width), for each layer of the stage that does not
// recompute (train.recompute = none):
//   x_in C, rstd1 1, h1 C, q H*hd, k KV*hd, v KV*hd, attn H*hd, lse H,
//   x_mid C, rstd2 1, h2 C, gate_up 2I, act I
// a selective layer only x_in, attn and lse, a full one only x_in (model/recompute.h);
// then the stage output x_out C (the last layer's output: sent to the next stage, or
// the final norm's input) and dx C, the residual-stream gradient (received from the
// next stage, sent to the previous one). The head's norm output and statistics live
// only in a token tile (head_forward_backward runs forward and backward together).
// (gate and up are one tensor, gate_up [2I], the fused product's output.) In a bf16 run,
// h1, h2, gate_up and act are stored as bf16 bits: they feed only products (which round
// them anyway) and the SwiGLU, and the products and the SwiGLU write them in bf16 directly.
// A bf16 run rounds each layer's input to bf16 (the embedding's rows and every layer output
// that another layer reads, a later pipeline stage's too: the stage before sends its
// output in bf16; the last layer's output, the final norm's input, stays fp32) and keeps
// it as bf16 bits; the backward treats the rounding as the identity. Everything
// else the backward needs at full precision stays fp32: x_mid, x_out, dx, the RMSNorm
// statistics, Q/K/V and O (the placements exchange and the kernel reads fp32; it rounds
// its own operands), and the LSE.
ActivationTable LlamaModel::activation_table(const LlamaConfig& c, const StageSpec& stage,
                                             Precision precision, const RecomputePolicy& recompute,
                                             ActivationIds* ids) {
  const Precision product_input = precision;  // fp32 runs store everything in fp32
  const int64_t C = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads;
  const int64_t qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  ActivationTable t;
  ActivationIds out;
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerIds i;
    i.mode = recompute.of(l);
    // bf16 runs round the residual stream at every layer boundary and keep each layer's
    // input as bf16 bits, in every recompute mode (so a recomputed layer starts from the
    // very values its forward read); a later pipeline stage receives its first input as
    // bf16 bits straight into the slot
    i.x_in = t.add(p + "x_in", C, precision);
    if (i.mode == Recompute::selective) {
      i.attn = t.add(p + "attn", qdim);
      i.lse = t.add(p + "lse", H);
    }
    if (i.mode != Recompute::none) {
      out.layers.push_back(i);
      continue;
    }
    i.rstd1 = t.add(p + "rstd1", 1);
    i.h1 = t.add(p + "h1", C, product_input);
    i.q = t.add(p + "q", qdim);
    i.k = t.add(p + "k", kvdim);
    i.v = t.add(p + "v", kvdim);
    i.attn = t.add(p + "attn", qdim);
    i.lse = t.add(p + "lse", H);
    i.x_mid = t.add(p + "x_mid", C);
    i.rstd2 = t.add(p + "rstd2", 1);
    i.h2 = t.add(p + "h2", C, product_input);
    i.gate_up = t.add(p + "gate_up", 2 * I, product_input);
    i.act = t.add(p + "act", I, product_input);
    out.layers.push_back(i);
  }
  out.x_out = t.add("x_out", C);
  out.dx = t.add("dx", C);
  if (ids) *ids = std::move(out);
  return t;
}

int64_t LlamaModel::activation_floats_per_token(const LlamaConfig& config, const StageSpec& stage,
                                                Precision precision, const RecomputePolicy& recompute) {
  return activation_table(config, stage, precision, recompute, nullptr).floats_per_token();
}

int64_t LlamaModel::workspace_floats_per_token(const LlamaConfig& c, const StageSpec& stage,
                                               const RecomputePolicy& recompute) {
  return workspace_floats(c, stage, recompute, {1, 1});
}

// the query side (q qdim; with a full-recompute layer attn qdim and lse H) by the query
// rows, k and v (kvdim each) by the key rows
int64_t LlamaModel::workspace_floats(const LlamaConfig& c, const StageSpec& stage, const RecomputePolicy& recompute,
                                     AttentionRows rows) {
  const int64_t qdim = c.num_attention_heads * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  int64_t query = 0, key = 0;
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    if (recompute.of(l) == Recompute::selective) query = std::max(query, qdim), key = 2 * kvdim;
    if (recompute.of(l) == Recompute::full) query = std::max(query, 2 * qdim + c.num_attention_heads), key = 2 * kvdim;
  }
  return query * rows.query + key * rows.key;
}

namespace {
// a token tile's intermediates (TileBuffers, all fp32-sized): rstd1, h1, x_mid, rstd2,
// h2, gate_up (2I), act, rstd_final, h_final per row; in bf16 runs also the layer
// output's rows before their rounding (x_out: the slot keeps it as bf16 bits)
int64_t tile_floats_per_row(const LlamaConfig& c, Precision precision) {
  return 3 + 4 * c.hidden_size + 3 * c.intermediate_size + (precision == Precision::bf16 ? c.hidden_size : 0);
}
}  // namespace

// the attention gradients' rows (attention_grads_floats); one token tile: dh C, qkv
// qdim + 2 kvdim, dgate_up 2I, dact I per row and the tile buffers; the LM head's logit
// rows (processed kLogitRows at a time)
int64_t LlamaModel::scratch_floats(const LlamaConfig& c, int64_t T, int64_t tile_tokens, Precision precision,
                                   AttentionRows attention_rows) {
  const int64_t qdim = c.num_attention_heads * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const int64_t tile = std::min(T, tile_tokens);
  return attention_grads_floats(c, {attention_rows.query < 0 ? T : attention_rows.query,
                                    attention_rows.key < 0 ? T : attention_rows.key}) +
         tile * (c.hidden_size + qdim + 2 * kvdim + 3 * c.intermediate_size + tile_floats_per_row(c, precision)) +
         std::min<int64_t>(T, kLogitRows) * c.vocab_size;
}

AttentionRows LlamaModel::attention_window_rows(int64_t T, int64_t piece_rows, int64_t key_reach,
                                                int64_t tile_tokens) {
  if (piece_rows >= T) return {T, T};
  const int64_t rows = 2 * piece_rows + 3 * std::min(T, tile_tokens);
  return {std::min(T, rows), std::min(T, rows + key_reach)};
}

// dattn qdim per query row; dq qdim, dk and dv kvdim each per key row
int64_t LlamaModel::attention_grads_floats(const LlamaConfig& c, AttentionRows rows) {
  const int64_t qdim = c.num_attention_heads * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  return rows.query * qdim + rows.key * (qdim + 2 * kvdim);
}

void LlamaModel::zero_grads() {
  // on the OpenMP threads, in pieces of 64K floats: one thread's memset of a 3M-parameter
  // model's 12 MB left the other spinning (the same zeros either way)
  constexpr int64_t kPiece = 1 << 16;
  const int64_t n = int64_t(grads.size()), pieces = (n + kPiece - 1) / kPiece;
  float* const g = grads.data();
  parallel_for(pieces, n, [&](int64_t p) {
    std::fill(g + p * kPiece, g + std::min(n, (p + 1) * kPiece), 0.0f);
  });
}

LayerTensors LlamaModel::layer_tensors(std::vector<float>& arena, int l) {
  const LayerOffsets& o = layer_offsets_[size_t(l)];
  float* a = arena.data();
  return {a + o.attn_norm, a + o.wqkv, a + o.wo, a + o.mlp_norm, a + o.wgate_up, a + o.wdown};
}

LayerWeights LlamaModel::layer_weights(int l) const {
  const LayerOffsets& o = layer_offsets_[size_t(l)];
  const float* p = params.data();
  if (arith_.precision == Precision::fp32)
    return {p + o.attn_norm, p + o.mlp_norm, p + o.wqkv, p + o.wo, p + o.wgate_up, p + o.wdown};
  if (!weight_copies_fresh_) throw std::logic_error("bf16 run without refresh_weight_copies()");
  const uint16_t* b = weight_copies_.data();
  return {p + o.attn_norm, p + o.mlp_norm, b + o.wqkv, b + o.wo, b + o.wgate_up, b + o.wdown};
}

Operand LlamaModel::lm_head_weight() const {
  if (arith_.precision == Precision::fp32) return params.data() + lm_head_offset_;
  if (!weight_copies_fresh_) throw std::logic_error("bf16 run without refresh_weight_copies()");
  return weight_copies_.data() + lm_head_offset_;
}

LayerActivations LlamaModel::layer_activations(int l, ActivationSlot& s, int64_t r0) {
  const LayerIds& i = ids_[size_t(l - stage_.first_layer)];
  const LlamaConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads;
  const int64_t qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const Workspace& w = workspace_[size_t(s.lane)];
  // kept: the slot's rows from r0; recomputed: the workspace's (rows from the windows'
  // bases in a layer run piece by piece, lane 0)
  const int64_t wq = r0 - (s.lane == 0 ? window_base_.query : 0), wk = r0 - (s.lane == 0 ? window_base_.key : 0);
  auto rows = [&](int id, float* recomputed, int64_t width, bool key_side = false) {
    return id >= 0 ? s.tensor(id) + r0 * width : recomputed ? recomputed + (key_side ? wk : wq) * width : nullptr;
  };
  // kept: the slot's rows; recomputed in a tile: the tile buffer (its rows from 0)
  auto tile_rows = [&](int id, float* tile, int64_t width) { return id >= 0 ? s.tensor(id) + r0 * width : tile; };
  auto tile_saved = [&](int id, const SavedRows& tile, int64_t width) -> SavedRows {
    if (id < 0) return tile;
    if (acts_table_.specs()[size_t(id)].storage == Precision::bf16) return {nullptr, s.bf16_tensor(id) + r0 * width};
    return {s.tensor(id) + r0 * width, nullptr};
  };
  // the layer's output: the next layer's input (bf16 bits in a bf16 run; tile_activations
  // gives the rows that stage it) or the stage's output
  const int out = l + 1 < stage_.end_layer ? ids_[size_t(l + 1 - stage_.first_layer)].x_in : x_out_;
  LayerActivations a;
  a.x_in = tile_saved(i.x_in, {}, C);
  a.rstd1 = tile_rows(i.rstd1, tile_.rstd1, 1);
  a.h1 = tile_saved(i.h1, tile_.h1, C);
  a.q = rows(i.q, w.q, qdim);
  a.k = rows(i.k, w.k, kvdim, true);
  a.v = rows(i.v, w.v, kvdim, true);
  a.attn = rows(i.attn, w.attn, qdim);
  a.lse = rows(i.lse, w.lse, H);
  a.x_mid = tile_rows(i.x_mid, tile_.x_mid, C);
  a.rstd2 = tile_rows(i.rstd2, tile_.rstd2, 1);
  a.h2 = tile_saved(i.h2, tile_.h2, C);
  a.gate_up = tile_saved(i.gate_up, tile_.gate_up, 2 * I);
  a.act = tile_saved(i.act, tile_.act, I);
  a.x_out = nullptr;
  if (kept_in_bf16(out)) a.x_out_bits = s.bf16_tensor(out) + r0 * C;
  else a.x_out = s.tensor(out) + r0 * C;
  return a;
}

bool LlamaModel::kept_in_bf16(int id) const { return acts_table_.specs()[size_t(id)].storage == Precision::bf16; }

LayerActivations LlamaModel::tile_activations(int l, ActivationSlot& s, int64_t r0) {
  LayerActivations a = layer_activations(l, s, r0);
  if (a.x_out_bits) a.x_out = tile_.x_out;
  return a;
}

LayerShape LlamaModel::layer_shape(const ActivationSlot& s, int64_t r0, int64_t n) const {
  const LlamaConfig& c = config_;
  LayerShape sh;
  sh.T = n < 0 ? s.tokens() : n;
  sh.C = c.hidden_size;
  sh.I = c.intermediate_size;
  sh.H = c.num_attention_heads;
  sh.KV = c.num_key_value_heads;
  sh.hd = c.head_dim();
  sh.eps = float(c.rms_norm_eps);
  sh.dca = c.attention_kernel == AttentionKernel::dca;
  sh.arith = arith_;
  sh.positions = s.batch->positions.data() + r0;
  sh.key_positions = s.key_positions.data() + (s.key_positions.empty() ? 0 : r0);
  sh.q_scale = s.q_scale.empty() ? nullptr : s.q_scale.data() + r0;
  sh.rope = &rope_;
  return sh;
}

void LlamaModel::ensure_scratch(int64_t T, int64_t max_position) {
  const LlamaConfig& c = config_;
  // RoPE covers every in-document position (positions restart in every document, so the
  // table follows the longest document, not the sequence), and DCA's query positions
  // 0..C even for short documents (grow-only; the kernel reads the table through
  // attn_params_).
  int64_t rope_rows = max_position + 1;
  if (c.attention_kernel == AttentionKernel::dca) rope_rows = std::max(rope_rows, c.dca_chunk_size + 1);
  // (dynamic scaling: the base follows the batch's longest document, max_position + 1)
  const double theta = rope_effective_theta(c.rope(), c.head_dim(), max_position + 1);
  if (rope_rows > rope_.max_positions || theta != rope_.theta)
    rope_ = build_rope_table(std::max(rope_rows, rope_.max_positions), c.head_dim(), c.rope(), max_position + 1);
  // (set on every call, not at allocation, so copies of the model use their own table)
  attn_params_.dca.rope_cos = rope_.cos.data();
  attn_params_.dca.rope_sin = rope_.sin.data();
  attn_params_.dca.rope_positions = rope_.max_positions;
  if (T <= scratch_tokens_) return;
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t qdim = c.num_attention_heads * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const int64_t tile = std::min(T, tile_tokens_);
  std::vector<float>().swap(scratch_);  // free first: no old + new peak
  // (the attention rows' dq, dk, dv, dattn live apart: ensure_attention_grads)
  scratch_.assign(size_t(scratch_floats(c, T, tile_tokens_, arith_.precision, {0, 0})), 0.0f);
  float* p = scratch_.data();
  auto take = [&](int64_t rows, int64_t n) {
    float* r = p;
    p += rows * n;
    return r;
  };
  d_.dh = take(tile, C);  // one token tile
  d_.qkv = take(tile, qdim + 2 * kvdim);
  d_.dgate_up = take(tile, 2 * I);
  d_.dact = take(tile, I);
  // the tile buffers: each array fp32-sized, bf16 ones used as bits from its start
  auto saved = [&](int64_t n) -> SavedRows {
    float* r = take(tile, n);
    if (arith_.precision == Precision::bf16) return {nullptr, reinterpret_cast<uint16_t*>(r)};
    return {r, nullptr};
  };
  tile_.rstd1 = take(tile, 1);
  tile_.h1 = saved(C);
  tile_.x_mid = take(tile, C);
  tile_.rstd2 = take(tile, 1);
  tile_.h2 = saved(C);
  tile_.gate_up = saved(2 * I);
  tile_.act = saved(I);
  tile_.rstd_final = take(tile, 1);
  tile_.h_final = saved(C);
  tile_.x_out = arith_.precision == Precision::bf16 ? take(tile, C) : nullptr;
  logits_ = p;
  scratch_tokens_ = T;
}

void LlamaModel::ensure_attention_grads(int lane, AttentionRows rows) {
  AttentionGrads& g = attention_grads_[size_t(lane)];
  if (rows.query <= g.rows.query && rows.key <= g.rows.key && !g.data.empty()) return;
  const int64_t qdim = config_.num_attention_heads * config_.head_dim(),
                kvdim = config_.num_key_value_heads * config_.head_dim();
  const int64_t nq = std::max<int64_t>({rows.query, g.rows.query, 1}), nk = std::max<int64_t>({rows.key, g.rows.key, 1});
  std::vector<float>().swap(g.data);  // free first: no old + new peak
  g.data.assign(size_t(attention_grads_floats(config_, {nq, nk})), 0.0f);
  float* p = g.data.data();
  g.dattn = p, p += nq * qdim;
  g.dq = p, p += nk * qdim;
  g.dk = p, p += nk * kvdim;
  g.dv = p;
  g.rows = {nq, nk};
}

void LlamaModel::ensure_workspace(int lane, AttentionRows rows) {
  Workspace& w = workspace_[size_t(lane)];
  if (!recomputes_ || (rows.query <= w.rows.query && rows.key <= w.rows.key && !w.data.empty())) return;
  const LlamaConfig& c = config_;
  const int64_t H = c.num_attention_heads;
  const int64_t qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const AttentionRows n{std::max<int64_t>({rows.query, w.rows.query, 1}), std::max<int64_t>({rows.key, w.rows.key, 1})};
  std::vector<float>().swap(w.data);  // free first: no old + new peak
  w.data.assign(size_t(workspace_floats(c, stage_, recompute_, n)), 0.0f);
  float* p = w.data.data();
  w.q = p, p += n.query * qdim;
  w.k = p, p += n.key * kvdim;
  w.v = p, p += n.key * kvdim;
  w.attn = w.lse = nullptr;
  if (recomputes_attention_) {
    w.attn = p, p += n.query * qdim;
    w.lse = p;
  }
  w.rows = n;
}

int64_t LlamaModel::stored_bytes() const {
  return pool_.peak_bytes() + int64_t((workspace_[0].data.size() + workspace_[1].data.size()) * sizeof(float));
}

int64_t LlamaModel::scratch_bytes() const {
  return int64_t((scratch_.size() + attention_grads_[0].data.size() + attention_grads_[1].data.size()) *
                 sizeof(float));
}

LayerScratch LlamaModel::scratch_of(const ActivationSlot& s, int64_t r0) const {
  LayerScratch d = d_;
  const AttentionGrads& g = attention_grads_[size_t(s.lane)];
  d.dattn = g.dattn, d.dq = g.dq, d.dk = g.dk, d.dv = g.dv;
  const int64_t qdim = config_.num_attention_heads * config_.head_dim();
  const int64_t kvdim = config_.num_key_value_heads * config_.head_dim();
  // (lane 0's rows from the windows' bases; not yet allocated before the first backward)
  const int64_t wq = r0 - (s.lane == 0 ? window_base_.query : 0), wk = r0 - (s.lane == 0 ? window_base_.key : 0);
  if (d.dattn) {
    d.dattn += wq * qdim;
    d.dq += wk * qdim;
    d.dk += wk * kvdim;
    d.dv += wk * kvdim;
  }
  return d;
}

void LlamaModel::prepare(ActivationSlot& s, const LocalBatch& batch, int round, int lane) {
  const int64_t T = batch.num_tokens();
  if (lane != 0 && lane != 1) throw std::invalid_argument("a slot's lane is 0 or 1");
  // (empty: the second nano-batch of a one-document micro-batch, or a pipeline tick's
  // dummy micro-batch, which only serves attention)
  int32_t max_position = 0;
  for (int32_t p : batch.positions) max_position = std::max(max_position, p);
  ensure_scratch(std::max<int64_t>(T, 1), max_position);
  s.reset(acts_table_, T);
  s.batch = &batch;
  s.round = round;
  s.lane = lane;
  batch.local_tasks(s.tasks, attn_params_.mask);  // every piece against its own rows (what colocated attention runs)
  s.pairs = progress_ ? attention_pairs(s.tasks, attn_params_.mask) : 0;  // (only the progress counts them)
  find_pieces(s);
  if (config_.attention_kernel == AttentionKernel::dca) {
    s.key_positions.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t)
      s.key_positions[size_t(t)] = dca_key_position(batch.positions[size_t(t)], attn_params_.dca);
  }
  s.q_scale.clear();  // (capacity kept: steady-state steps allocate nothing)
  if (config_.logit_scaling.on()) {
    s.q_scale.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) s.q_scale[size_t(t)] = logit_scale(config_.logit_scaling, batch.positions[size_t(t)]);
  }
}

void LlamaModel::find_pieces(ActivationSlot& s) {
  const int64_t T = s.tokens();
  s.pieces.clear();
  s.piece_tasks.clear();
  attention_runs(s.tasks, attn_params_.mask, attn_params_.chunk_rows, runs_);
  // the kernel's runs as pieces of rows: each from its first row to the next one's (the
  // first from 0, the last to T); one piece unless the runs' rows follow each other. A
  // slice of a long document starts at its first query row and reads keys before it.
  const auto first_row = [&](const AttentionRun& r) { return r.slice ? r.q_lo : std::min(r.q_lo, r.kv_lo); };
  bool ordered = runs_.size() > 1;
  for (size_t j = 1; ordered && j < runs_.size(); ++j)
    ordered = first_row(runs_[j]) >= std::max(runs_[j - 1].q_hi, runs_[j - 1].kv_hi);
  if (!ordered) {
    s.pieces.push_back({0, T, 0, 0, 0, s.tasks.size(), s.pairs});
    s.window = {T, T};
    return;
  }
  int64_t longest = 0, reach = 0;
  for (size_t j = 0; j < runs_.size(); ++j) {
    ActivationSlot::Piece p;
    p.row_begin = j == 0 ? 0 : first_row(runs_[j]);
    p.row_end = j + 1 < runs_.size() ? first_row(runs_[j + 1]) : T;
    p.key_begin = std::min(p.row_begin, runs_[j].kv_lo);
    p.task_begin = s.piece_tasks.size();
    run_tasks(s.tasks, runs_[j], s.piece_tasks);
    p.task_end = s.piece_tasks.size();
    for (size_t i = p.task_begin; i < p.task_end; ++i) {
      s.piece_tasks[i].q_row -= p.row_begin;
      s.piece_tasks[i].kv_row -= p.key_begin;
    }
    if (progress_)
      p.pairs = attention_pairs(std::span<const AttentionTask>(s.piece_tasks).subspan(p.task_begin, p.task_end - p.task_begin),
                                attn_params_.mask);
    longest = std::max(longest, p.row_end - p.row_begin);
    reach = std::max(reach, p.row_begin - p.key_begin);
    s.pieces.push_back(p);
  }
  int64_t keys_from = T;
  for (size_t j = s.pieces.size(); j-- > 0;) s.pieces[j].keys_from = keys_from = std::min(keys_from, s.pieces[j].key_begin);
  s.window = attention_window_rows(T, longest, reach, tile_tokens_);
}

ActivationSlot& LlamaModel::begin(const LocalBatch& batch, int round, int lane) {
  ActivationSlot& s = pool_.acquire();
  try {
    prepare(s, batch, round, lane);
  } catch (...) {
    pool_.release(s);
    throw;
  }
  return s;
}

void LlamaModel::embed_forward(ActivationSlot& s) {
  const ScopedSpan span("embedding");
  if (s.tokens() == 0) return;  // an empty ping-pong lane computes nothing
  const SavedRows in = stage_input(s);
  const int32_t* tokens = s.batch->tokens.data();
  const float* table = params.data() + embed_offset_;
  if (in.bf16) embedding_forward(in.bf16, tokens, table, s.tokens(), config_.hidden_size);
  else embedding_forward(in.f32, tokens, table, s.tokens(), config_.hidden_size);
}

void LlamaModel::embed_backward(ActivationSlot& s) {
  const ScopedSpan span("embedding backward");
  if (s.tokens() == 0) return;
  embedding_backward(grads.data() + embed_offset_, residual_grad(s), s.batch->tokens.data(),
                     s.tokens(), config_.hidden_size);
}

void LlamaModel::attn_in_forward(int l, ActivationSlot& s, const char* phase) {
  const ScopedSpan span(phase);
  progress_at(phase == std::string_view("recompute before attention") ? "recompute" : "forward", l, s);
  attn_in_tiles(l, s, 0, s.tokens());
}

int64_t LlamaModel::attn_in_tiles(int l, ActivationSlot& s, int64_t from, int64_t end) {
  const LayerWeights w = layer_weights(l);
  return run_tiles(from, end, true, s.tokens(), tile_tokens_, [&](int64_t r0, int64_t n) {
    lct::attn_in_forward(layer_shape(s, r0, n), w, layer_activations(l, s, r0), scratch_of(s, r0));
  });
}

int64_t LlamaModel::attn_out_tiles(int l, ActivationSlot& s, int64_t from, int64_t end) {
  const LayerWeights w = layer_weights(l);
  return run_tiles(from, end, false, s.tokens(), tile_tokens_, [&](int64_t r0, int64_t n) {
    lct::attn_out_forward(layer_shape(s, r0, n), w, tile_activations(l, s, r0));
  });
}

AttentionInput LlamaModel::attention_input(int l, const ActivationSlot& s, bool backward, bool recomputed) const {
  if (!backward) return {attn_params_, s.tasks, *s.batch, s.round, l == stage_.first_layer, s.lane};
  if (s.backward_round < 0) return {attn_params_, s.tasks, *s.batch, s.round, false, s.lane, recomputed};
  // a backward pipeline tick starts at its last layer: with full recomputation the
  // repeated forward comes first there and starts it, so the backward does not
  const bool starts = l == stage_.end_layer - 1 && (recomputed || mode_of(l) != Recompute::full);
  return {attn_params_, s.tasks, *s.batch, s.backward_round, starts, s.lane, recomputed};
}

void LlamaModel::recompute_forward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const Recompute mode = mode_of(l);
  if (mode == Recompute::none) return;
  // q, k, v into the lane's workspace (h1 only in a tile), one span of its own name
  attn_in_forward(l, s, "recompute before attention");
  phase_done();
  if (mode != Recompute::full) {
    // selective: the layer's linear part (the MLP's inputs are repeated in its backward's tiles)
    progress_finished(layer_forward_flops(config_, s.tokens(), 0));
    return;
  }
  {
    const ScopedSpan span("recompute attention");
    const LayerActivations a = layer_activations(l, s);
    placement.forward(attention_input(l, s, true, true), a.q, a.k, a.v, a.attn, a.lse);
  }
  progress_finished(layer_forward_flops(config_, s.tokens(), s.pairs));
  phase_done();
}

void LlamaModel::core_attention_forward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const ScopedSpan span("attention");
  const LayerActivations a = layer_activations(l, s);
  placement.forward(attention_input(l, s, false), a.q, a.k, a.v, a.attn, a.lse);
}

void LlamaModel::core_attention_forward_start(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const ScopedSpan span("attention start");
  const LayerActivations a = layer_activations(l, s);
  placement.forward_start(attention_input(l, s, false), a.q, a.k, a.v, a.attn, a.lse);
}

void LlamaModel::attn_out_forward(int l, ActivationSlot& s) {
  {
    const ScopedSpan span("after attention");
    attn_out_tiles(l, s, 0, s.tokens());
  }
  progress_finished(layer_forward_flops(config_, s.tokens(), s.pairs));  // the layer's forward
}

int64_t LlamaModel::tiled_backward(int l, ActivationSlot& s, TileForward repeat, TileBackward backward,
                                   int64_t from, int64_t end) {
  const LayerWeights w = layer_weights(l);
  const LayerTensors g = layer_tensors(grads, l);
  const bool recompute = mode_of(l) != Recompute::none;
  float* dx = residual_grad(s);
  return run_tiles(from, end, false, s.tokens(), tile_tokens_, [&](int64_t r0, int64_t n) {
    const LayerShape sh = layer_shape(s, r0, n);
    const LayerActivations a = layer_activations(l, s, r0);
    if (recompute) repeat(sh, w, a);
    backward(sh, w, g, a, scratch_of(s, r0), dx + r0 * config_.hidden_size);
  });
}

void LlamaModel::attn_out_backward(int l, ActivationSlot& s) {
  const ScopedSpan span("after attention backward");
  progress_at("backward", l, s);
  tiled_backward(l, s, lct::mlp_in_forward, lct::attn_out_backward, 0, s.tokens());  // repeats x_mid, h2, gate_up, act
}

void LlamaModel::core_attention_backward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const ScopedSpan span("attention backward");
  const LayerActivations a = layer_activations(l, s);
  const LayerScratch d = scratch_of(s);
  zero_attention_grads(d, s.tokens());
  placement.backward(attention_input(l, s, true), a.q, a.k, a.v, a.attn, a.lse, d.dattn, d.dq, d.dk,
                     d.dv);
}

void LlamaModel::core_attention_backward_start(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const ScopedSpan span("attention backward start");
  const LayerActivations a = layer_activations(l, s);
  const LayerScratch d = scratch_of(s);
  zero_attention_grads(d, s.tokens());
  placement.backward_start(attention_input(l, s, true), a.q, a.k, a.v, a.attn, a.lse, d.dattn, d.dq,
                           d.dk, d.dv);
}

void LlamaModel::zero_attention_grads(const LayerScratch& d, int64_t T) const {
  const int64_t qdim = config_.num_attention_heads * config_.head_dim();
  const int64_t kvdim = config_.num_key_value_heads * config_.head_dim();
  std::fill(d.dq, d.dq + T * qdim, 0.0f);  // the placement accumulates
  std::fill(d.dk, d.dk + T * kvdim, 0.0f);
  std::fill(d.dv, d.dv + T * kvdim, 0.0f);
}

void LlamaModel::attn_in_backward(int l, ActivationSlot& s) {
  {
    const ScopedSpan span("before attention backward");
    tiled_backward(l, s, lct::attn_norm_forward, lct::attn_in_backward, 0, s.tokens());  // repeats h1, rstd1
  }
  progress_finished(2 * layer_forward_flops(config_, s.tokens(), s.pairs));  // the layer's backward
}

CrossEntropyStats LlamaModel::head_forward_backward(ActivationSlot& s, float grad_scale,
                                                    bool backward, double* token_loss,
                                                    uint8_t* token_correct) {
  const ScopedSpan span("loss");
  const LlamaConfig& c = config_;
  const int64_t T = s.tokens(), C = c.hidden_size, V = c.vocab_size;
  if (!stage_.has_head) throw std::logic_error("head_forward_backward on a stage without the head");
  if (T == 0) return {};  // an empty ping-pong lane
  progress_at("loss", -1, s);
  const Operand lm_head = lm_head_weight();
  const float* final_norm = params.data() + final_norm_offset_;
  const float eps = float(c.rms_norm_eps);
  const LocalBatch& batch = *s.batch;
  const uint8_t* answers = batch.answer_mask.empty() ? nullptr : batch.answer_mask.data();
  CrossEntropyStats stats;
  // Per token tile: final norm into the tile buffer, then the LM head and the loss in row
  // chunks, so neither the normed rows nor the logits ever exist for the whole sequence
  // (T x V would be 128 GiB at 1M tokens of a 32K vocabulary). With backward, the head's
  // gradients are produced right here: dh = dlogits W, dW += dlogits^T h, and the norm's.
  for_each_tile(T, tile_tokens_, [&](int64_t t0, int64_t tn) {
    const float* x_final = s.tensor(x_out_) + t0 * C;
    float* rstd = tile_.rstd_final;
    const SavedRows& h = tile_.h_final;
    if (h.bf16) rmsnorm_forward(h.bf16, rstd, x_final, final_norm, tn, C, eps);
    else rmsnorm_forward(h.f32, rstd, x_final, final_norm, tn, C, eps);
    // rows r0.. of the tile's h
    auto h_rows = [&h, C](int64_t r0) { return h.bf16 ? Operand(h.bf16 + r0 * C) : Operand(h.f32 + r0 * C); };
    // the row chunks cover the tile: each writes its rows of dh (no zeroing first)
    for (int64_t r0 = 0; r0 < tn; r0 += kLogitRows) {
      const int64_t n = std::min(kLogitRows, tn - r0), row = t0 + r0;
      matmul_forward(logits_, h_rows(r0), lm_head, n, C, V, arith_);
      cross_entropy_forward_backward(logits_, batch.targets.data() + row, answers ? answers + row : nullptr, n, V,
                                     backward, grad_scale, stats, token_loss ? token_loss + row : nullptr,
                                     token_correct ? token_correct + row : nullptr);
      if (backward)
        matmul_backward(d_.dh + r0 * C, grads.data() + lm_head_offset_, logits_, h_rows(r0), lm_head, n, C, V,
                        arith_, DxWrite::overwrite);
    }
    if (!backward) return;
    float* dx = residual_grad(s) + t0 * C;
    std::fill(dx, dx + tn * C, 0.0f);
    rmsnorm_backward(dx, grads.data() + final_norm_offset_, d_.dh, x_final, final_norm, rstd, tn, C);
  });
  progress_finished((backward ? 3.0 : 1.0) * 2.0 * double(V) * double(C) * double(T));
  return stats;
}

double LlamaModel::pass_flops(int64_t tokens, int64_t pairs) const {
  const double layer = layer_forward_flops(config_, tokens, pairs), linear = layer_forward_flops(config_, tokens, 0);
  double total = 0;
  for (int l = stage_.first_layer; l < stage_.end_layer; ++l) {
    const Recompute mode = mode_of(l);
    total += 3 * layer + (mode == Recompute::full ? layer : mode == Recompute::selective ? linear : 0.0);
  }
  if (stage_.has_head) total += 3.0 * 2.0 * double(config_.vocab_size) * double(config_.hidden_size) * double(tokens);
  return total;
}

void LlamaModel::stage_forward(ActivationSlot& s, AttentionPlacement& placement) {
  if (stage_.has_embedding) embed_forward(s);
  ensure_workspace(s.lane, attention_rows(s, placement));
  for (int l = stage_.first_layer; l < stage_.end_layer; ++l) layer_forward(l, s, placement);
}

void LlamaModel::layer_forward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  if (by_pieces(s, placement)) return layer_forward_by_pieces(l, s, placement);
  attn_in_forward(l, s);
  phase_done();
  core_attention_forward(l, s, placement);
  phase_done();
  attn_out_forward(l, s);
  phase_done();
}

void LlamaModel::stage_backward(ActivationSlot& s, AttentionPlacement& placement) {
  const AttentionRows rows = attention_rows(s, placement);
  ensure_workspace(s.lane, rows);
  ensure_attention_grads(s.lane, rows);
  // the final norm and the LM head sit at the end of the arena (tied: the head is the
  // embedding, which is only final after the embedding backward, at offset 0)
  if (stage_.has_head) report_final(final_norm_offset_);
  for (int l = stage_.end_layer - 1; l >= stage_.first_layer; --l) {
    layer_backward(l, s, placement);
    report_final(layer_range(table_, l, l + 1).begin);
    phase_done();
  }
  if (stage_.has_embedding) {
    embed_backward(s);
    report_final(0);
  }
}

void LlamaModel::layer_backward(int l, ActivationSlot& s, AttentionPlacement& placement) {
  if (by_pieces(s, placement)) return layer_backward_by_pieces(l, s, placement);
  recompute_forward(l, s, placement);
  attn_out_backward(l, s);
  phase_done();
  core_attention_backward(l, s, placement);
  phase_done();
  attn_in_backward(l, s);
}

namespace {
// The rows through which the token tiles from `done` (a tile's first row) must run to
// cover rows up to `end`: the end of the tile holding row end - 1, at most T.
int64_t tiles_cover(int64_t done, int64_t end, int64_t tile, int64_t T) {
  if (done >= end) return done;
  return std::min(T, done + (end - done + tile - 1) / tile * tile);
}
}  // namespace

void LlamaModel::slide_window(const ActivationSlot& s, bool keys, int64_t low, int64_t high, int64_t need,
                              bool grads) {
  int64_t& base = keys ? window_base_.key : window_base_.query;
  const int64_t rows = keys ? s.window.key : s.window.query;
  if (need - base <= rows) return;
  if (need - low > rows || low < base) throw std::logic_error("a layer run by pieces outgrew its attention window");
  const LlamaConfig& c = config_;
  const int64_t H = c.num_attention_heads, qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  const int64_t shift = low - base, n = std::max<int64_t>(high - low, 0);
  auto move = [&](float* a, int64_t width) {
    if (a && n > 0) std::memmove(a, a + shift * width, size_t(n * width) * sizeof(float));
  };
  const Workspace& w = workspace_[0];
  const AttentionGrads& g = attention_grads_[0];
  if (keys) {
    move(w.k, kvdim), move(w.v, kvdim);
    if (grads) move(g.dq, qdim), move(g.dk, kvdim), move(g.dv, kvdim);
  } else {
    move(w.q, qdim), move(w.attn, qdim), move(w.lse, H);
    if (grads) move(g.dattn, qdim);
  }
  base = low;
}

void LlamaModel::piece_attention_forward(int l, ActivationSlot& s, AttentionPlacement& placement, size_t j,
                                         bool recomputed) {
  const ScopedSpan span(recomputed ? "recompute attention" : "attention");
  const ActivationSlot::Piece& p = s.pieces[j];
  const LayerActivations a = layer_activations(l, s, p.row_begin), keys = layer_activations(l, s, p.key_begin);
  AttentionInput in = attention_input(l, s, recomputed, recomputed);
  in.tasks = std::span<const AttentionTask>(s.piece_tasks).subspan(p.task_begin, p.task_end - p.task_begin);
  placement.forward(in, a.q, keys.k, keys.v, a.attn, a.lse);
}

void LlamaModel::piece_attention_backward(int l, ActivationSlot& s, AttentionPlacement& placement, size_t j) {
  const ScopedSpan span("attention backward");
  const ActivationSlot::Piece& p = s.pieces[j];
  const LayerActivations a = layer_activations(l, s, p.row_begin), keys = layer_activations(l, s, p.key_begin);
  const LayerScratch d = scratch_of(s, p.row_begin), dkeys = scratch_of(s, p.key_begin);
  // (the piece's own rows: a slice adds into the dK, dV rows of its document's earlier
  // pieces, zeroed when those ran)
  zero_attention_grads(d, p.row_end - p.row_begin);
  AttentionInput in = attention_input(l, s, true);
  in.tasks = std::span<const AttentionTask>(s.piece_tasks).subspan(p.task_begin, p.task_end - p.task_begin);
  placement.backward(in, a.q, keys.k, keys.v, a.attn, a.lse, d.dattn, d.dq, dkeys.dk, dkeys.dv);
}

// A layer's forward by pieces (the class comment): the tiles before attention run until
// they have covered piece j, its attention runs, and the tiles after attention whose rows
// attention has finished follow. The query window holds the rows the tiles after
// attention have not yet read up to those the tiles before it have written; the key
// window the same from the first key a piece from j on reads.
void LlamaModel::layer_forward_by_pieces(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const int64_t T = s.tokens(), tile = tile_tokens_;
  progress_at("forward", l, s);
  window_base_ = {0, 0};
  int64_t in = 0, out = 0;  // rows through which the tiles before and after attention have run
  for (size_t j = 0; j < s.pieces.size(); ++j) {
    const int64_t end = s.pieces[j].row_end, need = tiles_cover(in, end, tile, T);
    slide_window(s, false, out, in, need, false);
    slide_window(s, true, std::min(out, s.pieces[j].keys_from), in, need, false);
    {
      const ScopedSpan span("before attention");
      in = attn_in_tiles(l, s, in, end);
    }
    phase_done();
    piece_attention_forward(l, s, placement, j, false);
    phase_done();
    {
      const ScopedSpan span("after attention");
      out = attn_out_tiles(l, s, out, end);
    }
    progress_finished(layer_forward_flops(config_, s.pieces[j].row_end - s.pieces[j].row_begin, s.pieces[j].pairs));
    phase_done();
  }
  window_base_ = {0, 0};
}

// A layer's backward by pieces: per piece j, the repeated tiles before attention (a
// recomputing layer) and the repeated attention (full) cover it, the backward tiles after
// attention run as far as attention's output is there, attention's backward runs for
// every piece whose dO is complete, and the backward tiles before attention follow as
// far as its dQ, dK, dV are final (a long document's keys: once its last slice is done).
// Every weight gradient still accumulates tile by tile in the tiles' order.
void LlamaModel::layer_backward_by_pieces(int l, ActivationSlot& s, AttentionPlacement& placement) {
  const Recompute mode = mode_of(l);
  const bool recompute = mode != Recompute::none;
  const int64_t T = s.tokens(), tile = tile_tokens_;
  progress_at(recompute ? "recompute" : "backward", l, s);
  window_base_ = {0, 0};
  // rows through which the repeated tiles before attention, the backward tiles after it
  // and before it have run; pieces through attention's backward
  int64_t again = 0, after = 0, before = 0;
  size_t attended = 0;
  for (size_t j = 0; j < s.pieces.size(); ++j) {
    const ActivationSlot::Piece& p = s.pieces[j];
    const int64_t end = p.row_end;
    const int64_t high = std::max(again, after), need = std::max(end, recompute ? tiles_cover(again, end, tile, T) : 0);
    // (the pieces from `attended` on still read their Q, O, LSE, dO and keys)
    slide_window(s, false, std::min(after, s.pieces[attended].row_begin), high, need, true);
    slide_window(s, true, std::min(before, s.pieces[attended].keys_from), high, need, true);
    if (recompute) {
      {
        const ScopedSpan span("recompute before attention");
        again = attn_in_tiles(l, s, again, end);
      }
      phase_done();
      if (mode == Recompute::full) {
        piece_attention_forward(l, s, placement, j, true);
        phase_done();
      }
    }
    {
      const ScopedSpan span("after attention backward");
      after = tiled_backward(l, s, lct::mlp_in_forward, lct::attn_out_backward, after, end);
    }
    phase_done();
    for (; attended <= j && s.pieces[attended].row_end <= after; ++attended) {
      piece_attention_backward(l, s, placement, attended);
      phase_done();
    }
    // dQ, dK, dV are final below the first piece still to run and the first key it or a
    // later piece reads
    const int64_t ready = attended == 0                ? 0
                          : attended < s.pieces.size() ? std::min(s.pieces[attended].row_begin, s.pieces[attended].keys_from)
                                                       : T;
    {
      const ScopedSpan span("before attention backward");
      before = tiled_backward(l, s, lct::attn_norm_forward, lct::attn_in_backward, before, ready);
    }
    // piece j's share of the layer's backward and of what it repeats
    const int64_t rows = p.row_end - p.row_begin;
    const double repeated = mode == Recompute::full        ? layer_forward_flops(config_, rows, p.pairs)
                            : mode == Recompute::selective ? layer_forward_flops(config_, rows, 0)
                                                           : 0.0;
    progress_finished(repeated + 2 * layer_forward_flops(config_, rows, p.pairs));
    if (j + 1 < s.pieces.size()) phase_done();
  }
  window_base_ = {0, 0};
}

void LlamaModel::serve_then_finish(AttentionPlacement& placement, void (AttentionPlacement::*serve)(int),
                                   const char* serve_span, void (AttentionPlacement::*finish)(int),
                                   const char* finish_span, const std::function<void(int)>& then) {
  for (int i = 0; i < 2; ++i) {
    {
      const ScopedSpan span(serve_span);
      (placement.*serve)(i);
    }
    phase_done();
  }
  for (int i = 0; i < 2; ++i) {
    {
      const ScopedSpan span(finish_span);
      (placement.*finish)(i);
    }
    then(i);
  }
}

void LlamaModel::stage_forward_pair(ActivationSlot& a, ActivationSlot& b,
                                    AttentionPlacement& placement) {
  if (a.lane != 0 || b.lane != 1) throw std::logic_error("stage_forward_pair: lanes 0 and 1");
  ActivationSlot* lanes[2] = {&a, &b};
  for (ActivationSlot* s : lanes) ensure_workspace(s->lane, {s->tokens(), s->tokens()});
  const int first = stage_.first_layer, end = stage_.end_layer;
  for (ActivationSlot* s : lanes) {
    if (stage_.has_embedding) embed_forward(*s);
    attn_in_forward(first, *s);
    phase_done();
    core_attention_forward_start(first, *s, placement);
  }
  for (int l = first; l < end; ++l) {
    const auto after_attention = [&](int i) {
      ActivationSlot& s = *lanes[i];
      attn_out_forward(l, s);
      phase_done();
      if (l + 1 < end) {
        attn_in_forward(l + 1, s);
        phase_done();
        core_attention_forward_start(l + 1, s, placement);
      }
    };
    serve_then_finish(placement, &AttentionPlacement::forward_serve, "attention serve",
                      &AttentionPlacement::forward_finish, "attention finish", after_attention);
  }
}

void LlamaModel::stage_backward_pair(ActivationSlot& a, ActivationSlot& b,
                                     AttentionPlacement& placement) {
  if (a.lane != 0 || b.lane != 1) throw std::logic_error("stage_backward_pair: lanes 0 and 1");
  ActivationSlot* lanes[2] = {&a, &b};
  for (ActivationSlot* s : lanes) {
    ensure_workspace(s->lane, {s->tokens(), s->tokens()});
    ensure_attention_grads(s->lane, {s->tokens(), s->tokens()});
  }
  const int first = stage_.first_layer, last = stage_.end_layer - 1;
  if (stage_.has_head) report_final(final_norm_offset_);
  // (with recomputation each lane repeats its layer's forward first; a full layer's
  // repeated attention runs whole, with the other lane's backward exchange in flight)
  for (ActivationSlot* s : lanes) {
    recompute_forward(last, *s, placement);
    attn_out_backward(last, *s);
    phase_done();
    core_attention_backward_start(last, *s, placement);
  }
  for (int l = last; l >= first; --l) {
    const auto after_attention = [&](int i) {
      ActivationSlot& s = *lanes[i];
      attn_in_backward(l, s);
      phase_done();
      if (l > first) {
        recompute_forward(l - 1, s, placement);
        attn_out_backward(l - 1, s);
        phase_done();
        core_attention_backward_start(l - 1, s, placement);
      }
    };
    serve_then_finish(placement, &AttentionPlacement::backward_serve, "attention backward serve",
                      &AttentionPlacement::backward_finish, "attention backward finish", after_attention);
    // layer l is final once both lanes are through it (lane 0's attn_out of layer l - 1
    // above only touched layer l - 1)
    report_final(layer_range(table_, l, l + 1).begin);
  }
  if (stage_.has_embedding) {
    for (ActivationSlot* s : lanes) embed_backward(*s);
    report_final(0);
  }
}

CrossEntropyStats LlamaModel::forward_backward(const PackedBatch& batch, float grad_scale,
                                               bool backward, double* token_loss,
                                               uint8_t* token_correct) {
  if (!stage_.has_embedding || !stage_.has_head)
    throw std::logic_error("forward_backward needs the whole model (use the pipeline executor)");
  whole_sequence(batch, whole_);
  refresh_weight_copies();
  ActivationSlot& s = begin(whole_, 0);
  stage_forward(s, colocated_attention_);
  const CrossEntropyStats stats = head_forward_backward(s, grad_scale, backward, token_loss, token_correct);
  if (backward) stage_backward(s, colocated_attention_);
  end(s);
  return stats;
}

}  // namespace lct
