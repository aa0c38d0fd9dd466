#include "model/decoder_layer.h"

#include <algorithm>

namespace lct {

void attn_in_forward(const LayerShape& s, const LayerTensors& w, const LayerActivations& a) {
  const int64_t T = s.T, C = s.C;
  rmsnorm_forward(a.h1, a.rstd1, a.x_in, w.attn_norm, T, C, s.eps);
  matmul_forward(a.q, a.h1, w.wq, T, C, s.H * s.hd, s.precision);
  matmul_forward(a.k, a.h1, w.wk, T, C, s.KV * s.hd, s.precision);
  matmul_forward(a.v, a.h1, w.wv, T, C, s.KV * s.hd, s.precision);
  if (s.dca) {
    rope_forward(a.k, s.key_positions, *s.rope, T, s.KV, s.hd);
  } else {
    rope_forward(a.q, s.positions, *s.rope, T, s.H, s.hd);
    rope_forward(a.k, s.positions, *s.rope, T, s.KV, s.hd);
  }
}

void attn_out_forward(const LayerShape& s, const LayerTensors& w, const LayerActivations& a) {
  const int64_t T = s.T, C = s.C, I = s.I;
  // x_mid = x_in + attn Wo^T  (the projection is written, then the residual added)
  matmul_forward(a.x_mid, a.attn, w.wo, T, s.H * s.hd, C, s.precision);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) a.x_mid[i] += a.x_in[i];
  rmsnorm_forward(a.h2, a.rstd2, a.x_mid, w.mlp_norm, T, C, s.eps);
  matmul_forward(a.gate, a.h2, w.wgate, T, C, I, s.precision);
  matmul_forward(a.up, a.h2, w.wup, T, C, I, s.precision);
  swiglu_forward(a.act, a.gate, a.up, T * I);
  matmul_forward(a.x_out, a.act, w.wdown, T, I, C, s.precision);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * C; ++i) a.x_out[i] += a.x_mid[i];
}

void attn_out_backward(const LayerShape& s, const LayerTensors& w, const LayerTensors& g,
                       const LayerActivations& a, const LayerScratch& d, float* dx) {
  const int64_t T = s.T, C = s.C, I = s.I, qdim = s.H * s.hd;
  // MLP block. forward: x_out = x_mid + act Wdown^T ; act = silu(gate) * up
  std::fill(d.dact, d.dact + T * I, 0.0f);
  matmul_backward(d.dact, g.wdown, dx, a.act, w.wdown, T, I, C, s.precision);
  swiglu_backward(d.dgate, d.dup, d.dact, a.gate, a.up, T * I);
  std::fill(d.dh, d.dh + T * C, 0.0f);
  matmul_backward(d.dh, g.wgate, d.dgate, a.h2, w.wgate, T, C, I, s.precision);
  matmul_backward(d.dh, g.wup, d.dup, a.h2, w.wup, T, C, I, s.precision);
  // residual: dx already carries d x_mid from the skip path; add the norm's share
  rmsnorm_backward(dx, g.mlp_norm, d.dh, a.x_mid, w.mlp_norm, a.rstd2, T, C);
  // output projection. forward: x_mid = x_in + attn Wo^T
  std::fill(d.dattn, d.dattn + T * qdim, 0.0f);
  matmul_backward(d.dattn, g.wo, dx, a.attn, w.wo, T, qdim, C, s.precision);
}

void attn_in_backward(const LayerShape& s, const LayerTensors& w, const LayerTensors& g,
                      const LayerActivations& a, const LayerScratch& d, float* dx) {
  const int64_t T = s.T, C = s.C;
  if (s.dca) {
    rope_backward(d.dk, s.key_positions, *s.rope, T, s.KV, s.hd);  // dq is already pre-RoPE
  } else {
    rope_backward(d.dq, s.positions, *s.rope, T, s.H, s.hd);
    rope_backward(d.dk, s.positions, *s.rope, T, s.KV, s.hd);
  }
  std::fill(d.dh, d.dh + T * C, 0.0f);
  matmul_backward(d.dh, g.wq, d.dq, a.h1, w.wq, T, C, s.H * s.hd, s.precision);
  matmul_backward(d.dh, g.wk, d.dk, a.h1, w.wk, T, C, s.KV * s.hd, s.precision);
  matmul_backward(d.dh, g.wv, d.dv, a.h1, w.wv, T, C, s.KV * s.hd, s.precision);
  rmsnorm_backward(dx, g.attn_norm, d.dh, a.x_in, w.attn_norm, a.rstd1, T, C);
}

}  // namespace lct
