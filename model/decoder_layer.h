// One decoder layer's math on plain arrays, in the two halves around core attention
// (core attention itself has no weights and goes through an AttentionPlacement):
//
//   attn_in   h1 = rmsnorm(x_in, attn_norm); [q k v] = h1 [Wq; Wk; Wv]^T; RoPE
//   attn_out  x_mid = x_in + attn Wo^T; h2 = rmsnorm(x_mid, mlp_norm);
//             [gate up] = h2 [Wgate; Wup]^T; x_out = x_mid + (silu(gate) * up) Wdown^T
//
// RoPE: the causal kernel gets q and k rotated by in-document position; DCA gets k
// rotated by its key position (t mod s) and q unrotated (the kernel rotates it).
// Backward halves run in reverse on dx, the residual-stream gradient, and accumulate
// (+=) into the weight gradients. Every array is [T, width] row-major.
#pragma once

#include <cstdint>

#include "model/ops.h"
#include "model/rope.h"

namespace lct {

struct LayerShape {
  int64_t T = 0, C = 0, I = 0, H = 0, KV = 0, hd = 0;  // tokens, hidden, MLP, heads, head dim
  float eps = 0;                                       // RMSNorm epsilon
  bool dca = false;
  Arithmetic arith;                                    // the linear layers' products: precision, kernels
  const int32_t* positions = nullptr;      // [T] in-document positions (causal RoPE)
  const int32_t* key_positions = nullptr;  // [T] DCA key positions
  const float* q_scale = nullptr;          // [T] attention.logit_scaling's factors (null: none)
  const RopeTable* rope = nullptr;
};

// A layer's fp32 weights, or their gradients (same layout). Q, K and V are one matrix
// [(H + 2 KV) hd, C] (rows of q_proj, then k_proj, then v_proj: the arena joins them,
// model/tensor_table.h) and gate and up one [2I, C], so each pair of products that
// shares an input is one product.
struct LayerTensors {
  float *attn_norm, *wqkv, *wo, *mlp_norm, *wgate_up, *wdown;
};

// The weights a layer computes with: fp32 norms, and the products' matrices in fp32 or,
// in a bf16 run, as the bf16 copies refreshed after each optimizer step.
struct LayerWeights {
  const float *attn_norm, *mlp_norm;
  Operand wqkv, wo, wgate_up, wdown;
};

// A saved activation that only feeds products and elementwise steps: fp32, or in a bf16
// run bf16 bits (exactly one is set). Storing it in bf16 gives the bits a bf16 product
// would round it to anyway, once, where it is written.
struct SavedRows {
  float* f32 = nullptr;
  uint16_t* bf16 = nullptr;
  Operand operand() const { return bf16 ? Operand(bf16) : Operand(f32); }
};

// x_out is the next layer's x_in. A bf16 run keeps each layer's input as bf16 bits
// (x_in.bf16), so a layer whose output is the next layer's input has x_out_bits set: x_out then only stages the down product's rows, and the residual
// add writes x_out_bits (each sum rounded) in its pass.
struct LayerActivations {  // saved by forward for backward
  SavedRows x_in;
  float* rstd1;
  SavedRows h1;
  float *q, *k, *v, *attn, *lse, *x_mid, *rstd2;
  SavedRows h2;
  SavedRows gate_up;  // [T, 2I]: gate | up per row, the fused product's output
  SavedRows act;      // silu(gate) * up [T, I]
  float* x_out;
  uint16_t* x_out_bits = nullptr;
};

// Backward temporaries; dq/dk/dv/dattn meet the placement (the slot's attention rows). The tile's:
// qkv [T, (H + 2 KV) hd] holds the fused Q/K/V product's output in forward (fp32, before
// RoPE splits it) and its output gradient in backward (bf16 bits in a bf16 run);
// dgate_up [T, 2I] the MLP's (bf16 bits in a bf16 run), dact [T, I] fp32. They hold
// nothing between phases, so forwards may use them while backwards are in flight.
struct LayerScratch {
  float *dh, *dq, *dk, *dv, *dattn, *qkv, *dgate_up, *dact;
};

void attn_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a,
                     const LayerScratch& scratch);
// Recomputation's parts of the forward (model/recompute.h), bit for bit as the forward
// computes them: h1 and rstd1 (attn_in_forward's norm), and x_mid, rstd2, h2, gate_up
// and act (attn_out_forward up to the down projection).
void attn_norm_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a);
void mlp_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a);
void attn_out_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a);
// dx: dLoss/d(x_out) on entry, dLoss/d(x_mid) on exit; writes scratch.dattn = dLoss/d(attn).
void attn_out_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                       const LayerActivations& a, const LayerScratch& scratch, float* dx);
// From scratch.dq/dk/dv (the placement's output): dx becomes dLoss/d(x_in).
void attn_in_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                      const LayerActivations& a, const LayerScratch& scratch, float* dx);

}  // namespace lct
