#include "model/decoder_layer.h"

#include <algorithm>

namespace lct {

namespace {
int64_t qkv_width(const LayerShape& s) { return (s.H + 2 * s.KV) * s.hd; }

// The RoPE positions of q (null under DCA, whose kernel rotates q) and of k.
const int32_t* q_positions(const LayerShape& s) { return s.dca ? nullptr : s.positions; }
const int32_t* k_positions(const LayerShape& s) { return s.dca ? s.key_positions : s.positions; }
}  // namespace

void attn_norm_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a) {
  if (a.h1.f32) rmsnorm_forward(a.h1.f32, a.rstd1, a.x_in.f32, w.attn_norm, s.T, s.C, s.eps);
  else if (a.x_in.bf16) rmsnorm_forward(a.h1.bf16, a.rstd1, a.x_in.bf16, w.attn_norm, s.T, s.C, s.eps);
  else rmsnorm_forward(a.h1.bf16, a.rstd1, a.x_in.f32, w.attn_norm, s.T, s.C, s.eps);
}

void attn_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a,
                     const LayerScratch& scratch) {
  attn_norm_forward(s, w, a);
  // one product for q, k and v, then RoPE writes them to their own arrays
  matmul_forward(scratch.qkv, a.h1.operand(), w.wqkv, s.T, s.C, qkv_width(s), s.arith);
  rope_split_qkv(a.q, a.k, a.v, scratch.qkv, q_positions(s), s.q_scale, k_positions(s), *s.rope, s.T, s.H, s.KV, s.hd);
}

void mlp_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a) {
  const int64_t T = s.T, C = s.C, I = s.I;
  // x_mid = x_in + attn Wo^T  (the projection is written, then the residual added in the
  // pass of the norm that reads x_mid)
  matmul_forward(a.x_mid, a.attn, w.wo, T, s.H * s.hd, C, s.arith);
  // h2, then gate and up in one product (bf16 runs: written in bf16 by the product), then
  // act in one pass
  if (a.h2.bf16) {
    if (a.x_in.bf16) add_rmsnorm_forward(a.h2.bf16, a.rstd2, a.x_mid, a.x_in.bf16, w.mlp_norm, T, C, s.eps);
    else add_rmsnorm_forward(a.h2.bf16, a.rstd2, a.x_mid, a.x_in.f32, w.mlp_norm, T, C, s.eps);
    matmul_forward(a.gate_up.bf16, a.h2.bf16, w.wgate_up, T, C, 2 * I, s.arith);
    swiglu_forward(a.act.bf16, a.gate_up.bf16, T, I);
  } else {
    add_rmsnorm_forward(a.h2.f32, a.rstd2, a.x_mid, a.x_in.f32, w.mlp_norm, T, C, s.eps);
    matmul_forward(a.gate_up.f32, a.h2.f32, w.wgate_up, T, C, 2 * I, s.arith);
    swiglu_forward(a.act.f32, a.gate_up.f32, T, I);
  }
}

void attn_out_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a) {
  const int64_t T = s.T, C = s.C;
  mlp_in_forward(s, w, a);
  // x_out = x_mid + act Wdown^T (kept as bf16 bits: rounded in the add's pass)
  matmul_forward(a.x_out, a.act.operand(), w.wdown, T, s.I, C, s.arith);
  if (a.x_out_bits) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * C; ++i) a.x_out_bits[i] = bf16_bits(a.x_out[i] + a.x_mid[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * C; ++i) a.x_out[i] += a.x_mid[i];
  }
}

void attn_out_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                       const LayerActivations& a, const LayerScratch& d, float* dx) {
  const int64_t T = s.T, C = s.C, I = s.I, qdim = s.H * s.hd;
  // MLP block. forward: x_out = x_mid + act Wdown^T ; act = silu(gate) * up
  matmul_backward(d.dact, g.wdown, dx, a.act.operand(), w.wdown, T, I, C, s.arith, DxWrite::overwrite);
  // dgate | dup in one pass (bf16 runs: as the bf16 bits the products read), then one
  // product pair for both
  Operand dgate_up = d.dgate_up;
  if (a.gate_up.bf16) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(d.dgate_up);
    swiglu_backward(bits, d.dact, a.gate_up.bf16, T, I);
    dgate_up = Operand(static_cast<const uint16_t*>(bits));
  } else {
    swiglu_backward(d.dgate_up, d.dact, a.gate_up.f32, T, I);
  }
  matmul_backward(d.dh, g.wgate_up, dgate_up, a.h2.operand(), w.wgate_up, T, C, 2 * I, s.arith,
                  DxWrite::overwrite);
  // residual: dx already carries d x_mid from the skip path; add the norm's share
  rmsnorm_backward(dx, g.mlp_norm, d.dh, a.x_mid, w.mlp_norm, a.rstd2, T, C);
  // output projection. forward: x_mid = x_in + attn Wo^T
  matmul_backward(d.dattn, g.wo, dx, a.attn, w.wo, T, qdim, C, s.arith, DxWrite::overwrite);
}

void attn_in_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                      const LayerActivations& a, const LayerScratch& d, float* dx) {
  const int64_t T = s.T, C = s.C;
  // RoPE's backward joins dq, dk and dv into the fused product's output gradient (in a
  // bf16 run as the bf16 bits both its products read)
  Operand dqkv = d.qkv;
  if (s.arith.precision == Precision::bf16) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(d.qkv);
    rope_join_qkv_grad(bits, d.dq, d.dk, d.dv, q_positions(s), s.q_scale, k_positions(s), *s.rope, T, s.H, s.KV, s.hd);
    dqkv = Operand(static_cast<const uint16_t*>(bits));
  } else {
    rope_join_qkv_grad(d.qkv, d.dq, d.dk, d.dv, q_positions(s), s.q_scale, k_positions(s), *s.rope, T, s.H, s.KV, s.hd);
  }
  matmul_backward(d.dh, g.wqkv, dqkv, a.h1.operand(), w.wqkv, T, C, qkv_width(s), s.arith,
                  DxWrite::overwrite);
  if (a.x_in.bf16) rmsnorm_backward(dx, g.attn_norm, d.dh, a.x_in.bf16, w.attn_norm, a.rstd1, T, C);
  else rmsnorm_backward(dx, g.attn_norm, d.dh, a.x_in.f32, w.attn_norm, a.rstd1, T, C);
}

}  // namespace lct
