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
#pragma once

#include <cstdint>
#include <string>
#include <functional>
#include <vector>

#include "attention/core_attention.h"
#include "compute/gemm.h"
#include "data/context_shards.h"
#include "data/packing.h"
#include "model/attention_placement.h"
#include "model/activations.h"
#include "model/decoder_layer.h"
#include "model/ops.h"
#include "model/progress.h"
#include "model/recompute.h"
#include "model/rope.h"
#include "model/stage.h"
#include "model/llama_config.h"
#include "model/tensor_table.h"

namespace lct {

// One pipeline stage of the model (the whole model by default), run as phases on
// activation slots. Per layer l of the stage:
//
//   attn_in_forward   h1 = rmsnorm(x_in); q, k, v = h1 W^T; RoPE          (saved in the slot)
//   core_attention_forward  o, lse = placement(q, k, v, tasks)            (no weights)
//   attn_out_forward  x_mid = x_in + o Wo^T; h2 = rmsnorm(x_mid);
//                     x_out = x_mid + MLP(h2)                             (next layer's x_in)
//
// and in reverse for backward, on the slot's residual-stream gradient dx. The first
// stage embeds; the last computes the loss and its gradient dx in head_forward_backward.
// The token-linear phases run over the slot's rows in token tiles (train.tile_tokens).
// With recomputation (model/recompute.h) a layer keeps only x_in (and, selective, o and
// lse) in the slot: its forward writes q, k, v (and o, lse) to the lane's workspace and
// the tile's intermediates to the tile buffers, and stage_backward repeats what the layer
// did not keep, layer by layer, just before differentiating it.
// Pieces: under a document-local placement (colocated attention) a slot whose tasks
// make several of the attention kernel's runs (more than 64K rows of documents, or a
// longer document's query slices: attention_runs) runs each layer piece by piece: the
// token tiles advance in their one grid over the sequence, each piece's attention runs
// once the tiles before it have written its Q, K and V, and the tiles after attention
// follow as far as attention is done; backward the same, its recomputation first. So
// the recomputation workspace and the attention gradients hold two windows
// (ActivationSlot::window, AttentionRows), not the sequence: Q, O, LSE and dO at most two
// pieces and three tiles, K, V, dK, dV and dQ that plus the keys a slice reads before its
// rows. Every product, kernel call and gradient sum is the one the layer run over the
// whole sequence at once makes: the same bits.
// Between stages the executor moves stage_output() forward and residual_grad() back.
// forward_backward() composes every phase for one micro-batch in one process.
//
// The model owns the parameter and gradient arenas (whole-model layout on every stage;
// a stage only touches its own ranges), a pool of activation slots, and backward
// scratch shared by all slots (one backward runs at a time).
class LlamaModel {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  LlamaModel(const LlamaConfig& config, const StageSpec& stage);

  const LlamaConfig& config() const { return config_; }
  // How the products run, linear layers and attention: their precision and this
  // machine's kernels (compute/gemm.h Arithmetic, resolved by the run plan); fp32 on
  // OpenBLAS unless set, and set before the first slot is taken. The model's own value:
  // two models in one process may differ. A bf16 run keeps the fp32 parameters and
  // gradients, computes with bf16 copies of the products' weights
  // (refresh_weight_copies) and stores the activations that only feed products and
  // elementwise steps in bf16 (activation_table).
  void set_arithmetic(const Arithmetic& arith);
  const Arithmetic& arithmetic() const { return arith_; }
  Precision precision() const { return arith_.precision; }
  // What each layer keeps for its backward and what the backward recomputes
  // (model/recompute.h); none unless set, and set before the first slot is taken.
  void set_recompute(const RecomputePolicy& policy);
  const RecomputePolicy& recompute() const { return recompute_; }
  const StageSpec& stage() const { return stage_; }
  const TensorTable& table() const { return table_; }
  const ActivationTable& activation_table() const { return acts_table_; }
  int64_t num_params() const { return num_params_; }

  std::vector<float> params;  // arena, laid out by table()
  std::vector<float> grads;   // same layout

  void zero_grads();
  // bf16 runs: rounds the products' weights of this stage into their bf16 copies. Call it
  // after every change of params (the trainer does, before each step);
  // forward_backward() calls it itself.
  void refresh_weight_copies();
  // A step's progress, moved as each layer pass of a micro-batch starts and ends (model/
  // progress.h); null: none (the default).
  void set_progress(StepProgress* progress) { progress_ = progress; }
  // The FLOPs this stage's passes over `tokens` tokens with `pairs` attention pairs count
  // in that progress (forward, backward, what recomputation repeats, the head's loss):
  // what a whole step of this rank's micro-batches adds up to.
  double pass_flops(int64_t tokens, int64_t pairs) const;
  // bf16 runs: where those copies live (the arena's layout) and the ranges they cover (the
  // stage's layers and the LM head), for an optimizer step that writes them as it updates
  // the weights (model/optimizer.h WeightCopies), so that no refresh pass is needed after
  // it; null and none in fp32 runs.
  uint16_t* weight_copy_bits() { return weight_copies_.empty() ? nullptr : weight_copies_.data(); }
  const std::vector<ArenaRange>& weight_copy_ranges() const { return weight_copy_ranges_; }
  float* param(const std::string& name) { return params.data() + table_.get(name).offset; }
  float* grad(const std::string& name) { return grads.data() + table_.get(name).offset; }

  // ---- phases ------------------------------------------------------------------
  // A slot for one micro-batch (this rank's LocalBatch, which must outlive it), sized
  // and with its local attention tasks and DCA key positions; end() returns it.
  // round names its work to the placement (AttentionInput::round); lane 1 is the
  // second nano-batch of a ping-pong pair. The batch may be empty (zero tokens): the
  // slot then only takes part in the placement's exchanges.
  ActivationSlot& begin(const LocalBatch& batch, int round, int lane = 0);
  // The same on a slot the caller owns (outside the pool: a pipeline tick's dummy).
  void prepare(ActivationSlot& s, const LocalBatch& batch, int round, int lane = 0);
  void end(ActivationSlot& slot) { pool_.release(slot); }
  // [T, C]: the stage's input in its storage, fp32, or bf16 bits in a bf16 run (a later
  // stage receives it so: its values are bf16 values, every layer's input is)
  SavedRows stage_input(ActivationSlot& s) {
    if (kept_in_bf16(ids_[0].x_in)) return {nullptr, s.bf16_tensor(ids_[0].x_in)};
    return {s.tensor(ids_[0].x_in), nullptr};
  }
  float* stage_output(ActivationSlot& s) { return s.tensor(x_out_); }       // [T, C]
  float* residual_grad(ActivationSlot& s) { return s.tensor(dx_); }         // [T, C]

  void embed_forward(ActivationSlot& s);
  // phase: the trace span it records (recomputation names its own, so that the profile
  // counts its time once and apart from the first forward's)
  void attn_in_forward(int l, ActivationSlot& s, const char* phase = "before attention");
  void core_attention_forward(int l, ActivationSlot& s, AttentionPlacement& placement);
  void attn_out_forward(int l, ActivationSlot& s);
  // Final norm, LM head and loss (sum, not mean). With backward, accumulates the
  // head's gradients and leaves dLoss/d(stage output) * grad_scale in residual_grad.
  // token_loss (optional, [T]) receives each token's loss (0 where there is no target),
  // token_correct (optional, [T]) 1 where the argmax is the target.
  CrossEntropyStats head_forward_backward(ActivationSlot& s, float grad_scale, bool backward,
                                          double* token_loss = nullptr, uint8_t* token_correct = nullptr);
  void attn_out_backward(int l, ActivationSlot& s);
  void core_attention_backward(int l, ActivationSlot& s, AttentionPlacement& placement);
  void attn_in_backward(int l, ActivationSlot& s);
  void embed_backward(ActivationSlot& s);

  // ---- compositions --------------------------------------------------------------
  // Embedding (first stage) and every layer of the stage; between_phases runs after
  // each phase (the executor drives MPI progress there).
  void stage_forward(ActivationSlot& s, AttentionPlacement& placement);
  // Every layer backward from residual_grad (and the embedding's on the first stage).
  void stage_backward(ActivationSlot& s, AttentionPlacement& placement);
  // Ping-pong (DistCA §4.1): the same for two nano-batches (lanes 0 and 1) at once,
  // interleaved per layer so that each one's attention traffic travels while the other
  // computes. Per layer l, after both lanes' attn_in(l) and start:
  //   serve(0)  serve(1)                          (lane 1's inputs / lane 0's replies travel)
  //   finish(0) attn_out(l, 0) attn_in(l+1, 0) start(l+1, 0)   (lane 1's replies travel)
  //   finish(1) attn_out(l, 1) attn_in(l+1, 1) start(l+1, 1)   (lane 0's inputs travel)
  // and the mirror image in backward. Gradients equal running the lanes one after the
  // other (up to float summation order).
  void stage_forward_pair(ActivationSlot& a, ActivationSlot& b, AttentionPlacement& placement);
  void stage_backward_pair(ActivationSlot& a, ActivationSlot& b, AttentionPlacement& placement);
  // One micro-batch through the whole model in this process (colocated attention).
  // Returns loss statistics (sum, not mean). With backward, the gradient of
  // grad_scale * (sum of token losses) is accumulated into grads.
  CrossEntropyStats forward_backward(const PackedBatch& batch, float grad_scale, bool backward,
                                     double* token_loss = nullptr, uint8_t* token_correct = nullptr);

  // Called during backward with an arena offset x: every gradient at offsets >= x that
  // this stage owns is final for this micro-batch (after the LM head and final norm,
  // after each layer from the last, after the embedding with 0). Data parallelism
  // starts reducing gradient buckets from it; unset, nothing is called.
  std::function<void(int64_t)> grads_final_hook;
  // Called between phases of stage_forward/stage_backward (MPI progress); may be unset.
  std::function<void()> between_phases;

  // Activation memory: peak slots in use times slot bytes, plus the recomputation
  // workspaces, the token tiles' buffers and the backward scratch.
  int64_t activation_bytes() const { return stored_bytes() + scratch_bytes(); }
  int64_t stored_bytes() const;   // peak slots in use x slot bytes, and the workspaces
  int64_t scratch_bytes() const;  // backward scratch and tile buffers (both lanes')
  // The same sizes without building a model (memory budgets, src/train/memory_budget.h):
  // floats per token a stage saves between forward and backward (a slot holds T of
  // them); of the recomputation workspace (one per lane: the tensors of the one layer
  // being recomputed, 0 without recomputation) per token and for given attention rows;
  // of the backward scratch for T tokens (with the token tiles' buffers, the logit rows
  // and the attention gradients for attention_rows, T where negative).
  static int64_t activation_floats_per_token(const LlamaConfig& config, const StageSpec& stage,
                                             Precision precision, const RecomputePolicy& recompute = {});
  static int64_t workspace_floats_per_token(const LlamaConfig& config, const StageSpec& stage,
                                            const RecomputePolicy& recompute);
  static int64_t workspace_floats(const LlamaConfig& config, const StageSpec& stage, const RecomputePolicy& recompute,
                                  AttentionRows rows);
  static int64_t scratch_floats(const LlamaConfig& config, int64_t T, int64_t tile_tokens = kTileTokens,
                                Precision precision = Precision::fp32, AttentionRows attention_rows = {-1, -1});
  // The attention rows a slot of T tokens holds (the recomputation workspace's and the
  // attention gradients'): T, or under a document-local placement whose pieces span at
  // most piece_rows and whose keys reach at most key_reach rows before a piece's first
  // row (slices of a long document), a window of two pieces and three token tiles for
  // the query side and key_reach more rows for the key side.
  static AttentionRows attention_window_rows(int64_t T, int64_t piece_rows, int64_t key_reach, int64_t tile_tokens);
  // The attention gradients for those rows (dO by the query rows; dQ, dK, dV by the key
  // rows): a part of the backward scratch, and lane 1's own scratch (ping-pong, T rows).
  static int64_t attention_grads_floats(const LlamaConfig& config, AttentionRows rows);
  // Rows of a token tile (train.tile_tokens; kTileTokens unless set, and set before the
  // first slot is taken): the token-linear phases (norms, products, MLP, LM head and
  // loss) run over the sequence in tiles of this many rows, in every recompute mode, so
  // recomputation repeats the same products and a tile's intermediates never exist for
  // the whole sequence.
  static constexpr int64_t kTileTokens = 4096;
  void set_tile_tokens(int64_t rows);
  int64_t tile_tokens() const { return tile_tokens_; }
  // Rows of the attention kernel's runs, and so of the pieces (AttentionParams::chunk_rows:
  // kAttentionChunkRows unless a test wants many pieces of a short sequence).
  void set_attention_chunk_rows(int64_t rows);
  SlotPool& slot_pool() { return pool_; }

 private:
  struct LayerIds {  // activation ids of one layer (saved by forward for backward; -1: recomputed)
    int x_in = -1, rstd1 = -1, h1 = -1, q = -1, k = -1, v = -1, attn = -1, lse = -1, x_mid = -1,
        rstd2 = -1, h2 = -1, gate_up = -1, act = -1;
    Recompute mode = Recompute::none;
  };
  struct ActivationIds {
    std::vector<LayerIds> layers;  // per layer of the stage
    int x_out = -1, dx = -1;
  };
  // A stage's activation table (see llama.cpp) and, when asked, its tensors' ids.
  static ActivationTable activation_table(const LlamaConfig& config, const StageSpec& stage,
                                          Precision precision, const RecomputePolicy& recompute,
                                          ActivationIds* ids);
  // One lane's recomputation workspace: a recomputed layer's attention rows (the whole
  // sequence, or a window of pieces) of q, k, v (full: also attn and lse), reused by every
  // recomputed layer.
  struct Workspace {
    std::vector<float> data;
    AttentionRows rows;
    float *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *lse = nullptr;
  };
  // A token tile's intermediates of recomputed layers and of the head (kTileTokens
  // rows, shared: they hold nothing between phases).
  struct TileBuffers {
    std::vector<float> data;
    float *rstd1 = nullptr, *x_mid = nullptr, *rstd2 = nullptr, *rstd_final = nullptr;
    SavedRows h1, h2, gate_up, act, h_final;
    float* x_out = nullptr;  // bf16 runs: a layer's output rows before their rounding
  };
  void build_activation_table();
  LayerTensors layer_tensors(std::vector<float>& arena, int l);
  LayerWeights layer_weights(int l) const;
  Operand lm_head_weight() const;
  // Layer l's arrays from row r0 on: the slot's rows of what the layer keeps, the lane's
  // workspace rows of what it recomputes (from the windows' bases on lane 0), and the tile buffers
  // for a recomputed layer's token-tile intermediates.
  // (An output kept as bf16 bits, the next layer's input in a bf16 run, has x_out null.)
  LayerActivations layer_activations(int l, ActivationSlot& s, int64_t r0 = 0);
  // The same for the forward of a token tile from row r0: such an output's rows are
  // staged in the tile buffer before their rounding.
  LayerActivations tile_activations(int l, ActivationSlot& s, int64_t r0);
  bool kept_in_bf16(int activation_id) const;
  // Layer l's shape for rows [r0, r0 + n) of a slot (the whole slot by default).
  LayerShape layer_shape(const ActivationSlot& s, int64_t r0 = 0, int64_t n = -1) const;
  // recomputed: the forward that a full-recompute layer repeats in backward.
  AttentionInput attention_input(int l, const ActivationSlot& s, bool backward, bool recomputed = false) const;
  // Backward scratch of a slot from row r0 on: the attention rows (dattn, dq, dk, dv, the
  // whole sequence or, on lane 0, windows from their bases; they live across a
  // split-phase attention and lane 1 has its own) at row r0, the tile's (dh, qkv,
  // dgate_up, dact) from their start.
  LayerScratch scratch_of(const ActivationSlot& s, int64_t r0 = 0) const;
  // Backward of layer l repeats what its recompute mode did not keep (nothing for none).
  void recompute_forward(int l, ActivationSlot& s, AttentionPlacement& placement);
  Recompute mode_of(int l) const { return ids_[size_t(l - stage_.first_layer)].mode; }
  void core_attention_forward_start(int l, ActivationSlot& s, AttentionPlacement& placement);
  void core_attention_backward_start(int l, ActivationSlot& s, AttentionPlacement& placement);
  void zero_attention_grads(const LayerScratch& d, int64_t rows) const;
  // Layer l's backward on one side of core attention (attn_out_backward,
  // attn_in_backward) over token tiles, into the slot's residual gradient; where the
  // layer recomputes, each tile first repeats the `repeat` part of its forward.
  using TileForward = void (*)(const LayerShape&, const LayerWeights&, const LayerActivations&);
  using TileBackward = void (*)(const LayerShape&, const LayerWeights&, const LayerTensors&,
                                const LayerActivations&, const LayerScratch&, float*);
  // (the tiles from row `from` that end by `end`; returns the row they stopped at)
  int64_t tiled_backward(int l, ActivationSlot& s, TileForward repeat, TileBackward backward, int64_t from,
                         int64_t end);
  // Layer l's forward on one side of core attention over the token tiles from row `from`:
  // before it through the tile holding row end - 1, after it the tiles that end by `end`;
  // each returns the row it stopped at
  int64_t attn_in_tiles(int l, ActivationSlot& s, int64_t from, int64_t end);
  int64_t attn_out_tiles(int l, ActivationSlot& s, int64_t from, int64_t end);
  void ensure_scratch(int64_t T, int64_t max_position);
  void ensure_workspace(int lane, AttentionRows rows);
  void ensure_attention_grads(int lane, AttentionRows rows);
  AttentionRows attention_rows(const ActivationSlot& s, const AttentionPlacement& placement) const {
    return by_pieces(s, placement) ? s.window : AttentionRows{s.tokens(), s.tokens()};
  }
  // The slot's pieces, their rebased tasks and window rows (prepare)
  void find_pieces(ActivationSlot& s);
  // Whether a slot's layers run piece by piece, and the attention rows they then hold
  bool by_pieces(const ActivationSlot& s, const AttentionPlacement& placement) const {
    return s.lane == 0 && s.pieces.size() > 1 && placement.document_local();
  }
  void layer_forward(int l, ActivationSlot& s, AttentionPlacement& placement);
  void layer_backward(int l, ActivationSlot& s, AttentionPlacement& placement);
  void layer_forward_by_pieces(int l, ActivationSlot& s, AttentionPlacement& placement);
  void layer_backward_by_pieces(int l, ActivationSlot& s, AttentionPlacement& placement);
  // Piece j's attention (recomputed: a full layer's repeated forward)
  void piece_attention_forward(int l, ActivationSlot& s, AttentionPlacement& placement, size_t j, bool recomputed);
  void piece_attention_backward(int l, ActivationSlot& s, AttentionPlacement& placement, size_t j);
  // A layer run piece by piece holds rows [base, base + rows) of its attention arrays,
  // a window each for the query side and the key side (AttentionRows): before rows up to
  // `need` are written, a window's live rows [low, high) move to its start when they
  // would not fit otherwise.
  void slide_window(const ActivationSlot& s, bool keys, int64_t low, int64_t high, int64_t need, bool grads);
  void phase_done() {
    if (between_phases) between_phases();
  }
  // A layer's split-phase attention of both lanes (stage_forward_pair,
  // stage_backward_pair): each lane's serve (a phase each), then each lane's finish
  // followed by `then(lane)`, its work after attention.
  void serve_then_finish(AttentionPlacement& placement, void (AttentionPlacement::*serve)(int),
                         const char* serve_span, void (AttentionPlacement::*finish)(int),
                         const char* finish_span, const std::function<void(int)>& then);
  void report_final(int64_t offset) {
    if (grads_final_hook) grads_final_hook(offset);
  }

  LlamaConfig config_;
  StageSpec stage_;
  TensorTable table_;
  int64_t num_params_ = 0;
  AttentionParams attn_params_;
  Arithmetic arith_;
  RecomputePolicy recompute_;
  int64_t tile_tokens_ = kTileTokens;
  std::vector<LayerOffsets> layer_offsets_;
  std::vector<uint16_t> weight_copies_;  // bf16 runs: the products' weights, params' layout
  bool weight_copies_fresh_ = false;      // refreshed since set_arithmetic
  StepProgress* progress_ = nullptr;
  void progress_at(const char* phase, int l, const ActivationSlot& s) {
    if (progress_) progress_->at(phase, l, s.round);
  }
  void progress_finished(double flops) {
    if (progress_) progress_->finished(flops);
  }
  std::vector<ArenaRange> weight_copy_ranges_;  // what they cover (set_arithmetic)
  int64_t embed_offset_ = 0, lm_head_offset_ = 0, final_norm_offset_ = 0;
  RopeTable rope_;

  ActivationTable acts_table_;
  std::vector<LayerIds> ids_;  // per layer of the stage
  int x_out_ = -1, dx_ = -1;
  bool recomputes_ = false, recomputes_attention_ = false;  // any layer: selective or full; full
  Workspace workspace_[2];  // per lane
  TileBuffers tile_;
  SlotPool pool_;
  ColocatedAttention colocated_attention_;
  LocalBatch whole_;  // forward_backward's micro-batch as one rank's batch (reused)

  // backward scratch, shared by all slots (grow-only, sized by the largest T seen; the
  // tile's part by min(T, kTileTokens))
  int64_t scratch_tokens_ = 0;
  std::vector<float> scratch_;
  LayerScratch d_{};
  // per lane: dattn, dq, dk, dv (grow-only, by the attention rows a backward holds: the
  // lane's tokens, or lane 0's window of pieces)
  struct AttentionGrads {
    std::vector<float> data;
    AttentionRows rows;
    float *dattn = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  };
  AttentionGrads attention_grads_[2];
  // lane 0's attention arrays hold rows from here (slide_window): Q, O, LSE, dO; K, V, dQ, dK, dV
  AttentionRows window_base_;
  std::vector<AttentionRun> runs_;  // find_pieces' (reused)
  float* logits_ = nullptr;
  static constexpr int64_t kLogitRows = 512;  // LM head processed in row chunks
};

}  // namespace lct
