#include "model/decoder_layer.h"

#include <algorithm>

namespace lct {

void attn_norm_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a) {
  if (a.h1.bf16) rmsnorm_forward(a.h1.bf16, a.rstd1, a.x_in, w.attn_norm, s.T, s.C, s.eps);
  else rmsnorm_forward(a.h1.f32, a.rstd1, a.x_in, w.attn_norm, s.T, s.C, s.eps);
}

void attn_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a) {
  const int64_t T = s.T, C = s.C;
  attn_norm_forward(s, w, a);
  const Operand h1 = a.h1.operand();
  matmul_forward(a.q, h1, w.wq, T, C, s.H * s.hd, s.precision);
  matmul_forward(a.k, h1, w.wk, T, C, s.KV * s.hd, s.precision);
  matmul_forward(a.v, h1, w.wv, T, C, s.KV * s.hd, s.precision);
  if (s.dca) {
    rope_forward(a.k, s.key_positions, *s.rope, T, s.KV, s.hd);
  } else {
    rope_forward(a.q, s.positions, *s.rope, T, s.H, s.hd);
    rope_forward(a.k, s.positions, *s.rope, T, s.KV, s.hd);
  }
}

void mlp_in_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a,
                    const LayerScratch& scratch) {
  const int64_t T = s.T, C = s.C, I = s.I;
  // x_mid = x_in + attn Wo^T  (the projection is written, then the residual added)
  matmul_forward(a.x_mid, a.attn, w.wo, T, s.H * s.hd, C, s.precision);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) a.x_mid[i] += a.x_in[i];
  if (a.h2.bf16) rmsnorm_forward(a.h2.bf16, a.rstd2, a.x_mid, w.mlp_norm, T, C, s.eps);
  else rmsnorm_forward(a.h2.f32, a.rstd2, a.x_mid, w.mlp_norm, T, C, s.eps);
  const Operand h2 = a.h2.operand();
  if (a.gate.bf16) {  // fp32 gate and up in scratch, saved rounded; act from the rounded
    matmul_forward(scratch.dgate, h2, w.wgate, T, C, I, s.precision);
    matmul_forward(scratch.dup, h2, w.wup, T, C, I, s.precision);
    uint16_t* act = reinterpret_cast<uint16_t*>(scratch.dact);
    swiglu_forward(act, a.gate.bf16, a.up.bf16, scratch.dgate, scratch.dup, T * I);
  } else {
    matmul_forward(a.gate.f32, h2, w.wgate, T, C, I, s.precision);
    matmul_forward(a.up.f32, h2, w.wup, T, C, I, s.precision);
    swiglu_forward(a.act, a.gate.f32, a.up.f32, T * I);
  }
}

void attn_out_forward(const LayerShape& s, const LayerWeights& w, const LayerActivations& a,
                      const LayerScratch& scratch) {
  const int64_t T = s.T, C = s.C, I = s.I;
  mlp_in_forward(s, w, a, scratch);
  // x_out = x_mid + act Wdown^T (a bf16 run's act is in scratch.dact, as bf16 bits)
  if (a.gate.bf16) matmul_forward(a.x_out, reinterpret_cast<const uint16_t*>(scratch.dact), w.wdown, T, I, C, s.precision);
  else matmul_forward(a.x_out, a.act, w.wdown, T, I, C, s.precision);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) a.x_out[i] += a.x_mid[i];
}

void attn_out_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                       const LayerActivations& a, const LayerScratch& d, float* dx) {
  const int64_t T = s.T, C = s.C, I = s.I, qdim = s.H * s.hd;
  // MLP block. forward: x_out = x_mid + act Wdown^T ; act = silu(gate) * up
  std::fill(d.dact, d.dact + T * I, 0.0f);
  if (a.gate.bf16) {  // act recomputed (as forward computed it) where dgate goes next
    uint16_t* act = reinterpret_cast<uint16_t*>(d.dgate);
    swiglu_forward(act, a.gate.bf16, a.up.bf16, T * I);
    matmul_backward(d.dact, g.wdown, dx, act, w.wdown, T, I, C, s.precision);
    swiglu_backward(d.dgate, d.dup, d.dact, a.gate.bf16, a.up.bf16, T * I);
  } else {
    matmul_backward(d.dact, g.wdown, dx, a.act, w.wdown, T, I, C, s.precision);
    swiglu_backward(d.dgate, d.dup, d.dact, a.gate.f32, a.up.f32, T * I);
  }
  std::fill(d.dh, d.dh + T * C, 0.0f);
  const Operand h2 = a.h2.operand();
  matmul_backward(d.dh, g.wgate, d.dgate, h2, w.wgate, T, C, I, s.precision);
  matmul_backward(d.dh, g.wup, d.dup, h2, w.wup, T, C, I, s.precision);
  // residual: dx already carries d x_mid from the skip path; add the norm's share
  rmsnorm_backward(dx, g.mlp_norm, d.dh, a.x_mid, w.mlp_norm, a.rstd2, T, C);
  // output projection. forward: x_mid = x_in + attn Wo^T
  std::fill(d.dattn, d.dattn + T * qdim, 0.0f);
  matmul_backward(d.dattn, g.wo, dx, a.attn, w.wo, T, qdim, C, s.precision);
}

void attn_in_backward(const LayerShape& s, const LayerWeights& w, const LayerTensors& g,
                      const LayerActivations& a, const LayerScratch& d, float* dx) {
  const int64_t T = s.T, C = s.C;
  if (s.dca) {
    rope_backward(d.dk, s.key_positions, *s.rope, T, s.KV, s.hd);  // dq is already pre-RoPE
  } else {
    rope_backward(d.dq, s.positions, *s.rope, T, s.H, s.hd);
    rope_backward(d.dk, s.positions, *s.rope, T, s.KV, s.hd);
  }
  std::fill(d.dh, d.dh + T * C, 0.0f);
  const Operand h1 = a.h1.operand();
  matmul_backward(d.dh, g.wq, d.dq, h1, w.wq, T, C, s.H * s.hd, s.precision);
  matmul_backward(d.dh, g.wk, d.dk, h1, w.wk, T, C, s.KV * s.hd, s.precision);
  matmul_backward(d.dh, g.wv, d.dv, h1, w.wv, T, C, s.KV * s.hd, s.precision);
  rmsnorm_backward(dx, g.attn_norm, d.dh, a.x_in, w.attn_norm, a.rstd1, T, C);
}

}  // namespace lct
