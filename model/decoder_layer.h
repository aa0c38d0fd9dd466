// One decoder layer's math on plain arrays, in the two halves around core attention
// (core attention itself has no weights and goes through an AttentionPlacement):
//
//   attn_in   h1 = rmsnorm(x_in, attn_norm); q, k, v = h1 Wq^T, h1 Wk^T, h1 Wv^T; RoPE
//   attn_out  x_mid = x_in + attn Wo^T; h2 = rmsnorm(x_mid, mlp_norm);
//             x_out = x_mid + (silu(h2 Wgate^T) * (h2 Wup^T)) Wdown^T
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
  Precision precision = Precision::fp32;               // of the linear layers' products
  const int32_t* positions = nullptr;      // [T] in-document positions (causal RoPE)
  const int32_t* key_positions = nullptr;  // [T] DCA key positions
  const RopeTable* rope = nullptr;
};

struct LayerTensors {  // a layer's fp32 weights, or their gradients (same layout)
  float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *wgate, *wup, *wdown;
};

// The weights a layer computes with: fp32 norms, and the products' matrices in fp32 or,
// in a bf16 run, as the bf16 copies refreshed after each optimizer step.
struct LayerWeights {
  const float *attn_norm, *mlp_norm;
  Operand wq, wk, wv, wo, wgate, wup, wdown;
};

// A saved activation that only feeds products and elementwise steps: fp32, or in a bf16
// run bf16 bits (exactly one is set). Rounding it when it is written gives the bits a
// bf16 product would round it to anyway, once instead of at every product.
struct SavedRows {
  float* f32 = nullptr;
  uint16_t* bf16 = nullptr;
  Operand operand() const { return bf16 ? Operand(bf16) : Operand(f32); }
};

struct LayerActivations {  // saved by forward for backward; x_out is the next layer's x_in
  float *x_in, *rstd1;
  SavedRows h1;
  float *q, *k, *v, *attn, *lse, *x_mid, *rstd2;
  SavedRows h2, gate, up;
  float* act;  // fp32 runs; a bf16 run recomputes act = silu(gate) * up in backward
  float* x_out;
};

struct LayerScratch {  // backward temporaries; dq/dk/dv/dattn meet the placement
  float *dh, *dq, *dk, *dv, *dattn, *dgate, *dup, *dact;
};

// A bf16 run's attn_out_forward uses scratch.dgate and scratch.dup (T x I fp32 each) for
// the MLP's fp32 gate and up before they are rounded and scratch.dact for act, and its
// attn_out_backward recomputes act into scratch.dgate before that is written: the MLP
// scratch holds nothing between phases, so forwards may use it while backwards are in
// flight.
void attn_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a);
// Recomputation's parts of the forward (model/recompute.h), bit for bit as the forward
// computes them: h1 and rstd1 (attn_in_forward's norm), and x_mid, rstd2, h2, gate, up
// and (fp32 runs) act (attn_out_forward up to the down projection, same scratch use).
void attn_norm_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a);
void mlp_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a,
                    const LayerScratch& scratch);
void attn_out_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a,
                      const LayerScratch& scratch);
// dx: dLoss/d(x_out) on entry, dLoss/d(x_mid) on exit; writes scratch.dattn = dLoss/d(attn).
void attn_out_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                       const LayerActivations& a, const LayerScratch& scratch, float* dx);
// From scratch.dq/dk/dv (the placement's output): dx becomes dLoss/d(x_in).
void attn_in_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                      const LayerActivations& a, const LayerScratch& scratch, float* dx);

}  // namespace lct
