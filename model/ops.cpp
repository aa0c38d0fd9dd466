#include "model/ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "compute/vector_math.h"
#include "model/trace.h"

namespace lct {
namespace {
// Token chunk for deterministic reductions over T (independent of thread count).
constexpr int64_t kReduceChunk = 256;
}

void matmul_forward(float* out, Operand x, Operand w, int64_t T, int64_t in_dim, int64_t out_dim,
                    const Arithmetic& arith) {
  const ScopedSpan span("product", TraceTrack::product);
  gemm(arith, false, true, T, out_dim, in_dim, 1.0f, x, in_dim, w, in_dim, 0.0f, out, out_dim);
}

void matmul_forward(uint16_t* out, Operand x, Operand w, int64_t T, int64_t in_dim, int64_t out_dim,
                    const Arithmetic& arith) {
  const ScopedSpan span("product", TraceTrack::product);
  gemm_to_bf16(arith, false, true, T, out_dim, in_dim, x, in_dim, w, in_dim, out, out_dim);
}

void matmul_backward(float* dx, float* dw, Operand dout, Operand x, Operand w, int64_t T,
                     int64_t in_dim, int64_t out_dim, const Arithmetic& arith, DxWrite dx_write) {
  // forward was out = x W^T, so dx = dout W and dW = dout^T x. In bf16 both products
  // read dout rounded: it is rounded once here instead of in each (a dout that is stored
  // in bf16 is read as it is).
  Operand g = dout;
  if (arith.precision == Precision::bf16 && !dout.bf16 && dx && dw) {
    static thread_local std::vector<uint16_t> rounded;
    const int64_t n = T * out_dim;
    if (int64_t(rounded.size()) < n) rounded.resize(size_t(n));
    to_bf16_bits(static_cast<const float*>(dout.data), n, rounded.data());
    g = Operand(static_cast<const uint16_t*>(rounded.data()));
  }
  if (dx) {
    const ScopedSpan span("product", TraceTrack::product);
    const float beta = dx_write == DxWrite::overwrite ? 0.0f : 1.0f;
    gemm(arith, false, false, T, in_dim, out_dim, 1.0f, g, out_dim, w, in_dim, beta, dx, in_dim);
  }
  if (dw) {
    const ScopedSpan span("product", TraceTrack::product);
    gemm(arith, true, false, out_dim, in_dim, T, 1.0f, g, out_dim, x, in_dim, 1.0f, dw, in_dim);
  }
}

void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t T,
                       int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) std::copy_n(table + int64_t(tokens[t]) * C, C, out + t * C);
}

void embedding_forward(uint16_t* out, const int32_t* tokens, const float* table, int64_t T,
                       int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* row = table + int64_t(tokens[t]) * C;
    uint16_t* o = out + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = bf16_bits(row[c]);
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t T,
                        int64_t C) {
  // Threads own disjoint column ranges and walk tokens in order: no races, and the
  // summation order per element is fixed.
#pragma omp parallel
  {
    const int64_t nth = omp_get_num_threads(), th = omp_get_thread_num();
    const int64_t c0 = C * th / nth, c1 = C * (th + 1) / nth;
    for (int64_t t = 0; t < T; ++t) {
      float* d = dtable + int64_t(tokens[t]) * C;
      const float* g = dout + t * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

namespace {
// With a residual, x += residual first, row by row, so the norm reads the row from cache
// (the sum is the same loop over the same values as without it: the same bits). x or the
// residual stored as bf16 bits (a bf16 run's layer input) is widened as it is read.
template <typename Out, typename In, typename Residual = float>
void rmsnorm_rows(Out* out, float* rstd, const In* x, const float* w, int64_t T, int64_t C, float eps,
                  float* x_plus = nullptr, const Residual* residual = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const In* xt = x + t * C;
    if (residual) {
      float* xw = x_plus + t * C;
      const Residual* rt = residual + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) xw[c] += stored_value(rt[c]);
    }
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += stored_value(xt[c]) * stored_value(xt[c]);
    const float r = 1.0f / std::sqrt(ss / float(C) + eps);
    rstd[t] = r;
    Out* ot = out + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      ot[c] = store_as<Out>(stored_value(xt[c]) * r * w[c]);
    }
  }
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t T,
                     int64_t C, float eps) {
  rmsnorm_rows(out, rstd, x, w, T, C, eps);
}

void rmsnorm_forward(uint16_t* out, float* rstd, const float* x, const float* w, int64_t T,
                     int64_t C, float eps) {
  rmsnorm_rows(out, rstd, x, w, T, C, eps);
}

void rmsnorm_forward(uint16_t* out, float* rstd, const uint16_t* x, const float* w, int64_t T,
                     int64_t C, float eps) {
  rmsnorm_rows(out, rstd, x, w, T, C, eps);
}

void add_rmsnorm_forward(float* out, float* rstd, float* x, const float* residual, const float* w,
                         int64_t T, int64_t C, float eps) {
  rmsnorm_rows(out, rstd, x, w, T, C, eps, x, residual);
}

void add_rmsnorm_forward(uint16_t* out, float* rstd, float* x, const float* residual, const float* w,
                         int64_t T, int64_t C, float eps) {
  rmsnorm_rows(out, rstd, x, w, T, C, eps, x, residual);
}

void add_rmsnorm_forward(uint16_t* out, float* rstd, float* x, const uint16_t* residual, const float* w,
                         int64_t T, int64_t C, float eps) {
  rmsnorm_rows(out, rstd, x, w, T, C, eps, x, residual);
}

namespace {
template <typename In>
void rmsnorm_grad_rows(float* dx, float* dw, const float* dout, const In* x, const float* w,
                       const float* rstd, int64_t T, int64_t C) {
  // forward: y_c = x_c * r * w_c with r = (mean(x^2) + eps)^(-1/2)
  // dw_c += sum_t dy_c x_c r
  // dx_c += r * g_c - x_c * r^3 / C * sum_j g_j x_j   where g = dy * w
  const int64_t chunks = (T + kReduceChunk - 1) / kReduceChunk;
  // grow-only scratch of the calling thread (no steady-state allocation); the OpenMP
  // workers reach it through this pointer, not through their own thread_local copy
  static thread_local std::vector<float> dw_scratch;
  dw_scratch.assign(size_t(chunks * C), 0.0f);
  float* const dw_partial = dw_scratch.data();
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float* dwp = dw_partial + ch * C;
    for (int64_t t = ch * kReduceChunk; t < std::min(T, (ch + 1) * kReduceChunk); ++t) {
      const In* xt = x + t * C;
      const float* gt = dout + t * C;
      const float r = rstd[t];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) {
        dot += gt[c] * w[c] * stored_value(xt[c]);
        dwp[c] += gt[c] * stored_value(xt[c]) * r;
      }
      const float k = dot * r * r * r / float(C);
      float* dxt = dx + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dxt[c] += r * gt[c] * w[c] - stored_value(xt[c]) * k;
    }
  }
  for (int64_t ch = 0; ch < chunks; ++ch)
    for (int64_t c = 0; c < C; ++c) dw[c] += dw_partial[ch * C + c];
}
}  // namespace

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int64_t T, int64_t C) {
  rmsnorm_grad_rows(dx, dw, dout, x, w, rstd, T, C);
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const uint16_t* x, const float* w,
                      const float* rstd, int64_t T, int64_t C) {
  rmsnorm_grad_rows(dx, dw, dout, x, w, rstd, T, C);
}

namespace {
// The SwiGLU forward takes each row in two loops: first 1 + exp(-g) into a buffer, then
// the rest. One loop holding both fast_exp and the division ran 3.5x slower (GCC 12
// gave it four divisions per 32 elements, two of them masked, where the split loops
// have two: 0.92 against 0.26 ms for 2048 x 688 bf16 elements on 2 threads of an AMD
// Zen 5; fp32 1.5x), and both give the same bits (seen on that AVX-512 CPU: every
// element of fp32 and bf16 rows of 1 to 2048 elements, and 12 training steps of the
// default config in each precision, losses, gradient norms and checkpoint). The
// backward keeps its single loop: split the same way, GCC contracts its products into
// FMAs differently (-ffp-contract=fast), which changes bits.
constexpr int64_t kSwigluPiece = 1024;  // elements of a row per pair of loops

template <typename In, typename Out>
void swiglu_rows(Out* out, const In* gate_up, int64_t T, int64_t I) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float denom[kSwigluPiece];  // 1 + exp(-g)
    for (int64_t i0 = 0; i0 < I; i0 += kSwigluPiece) {
      const int64_t n = std::min(kSwigluPiece, I - i0);
      const In* gate = gate_up + t * 2 * I + i0;
      const In* up = gate + I;
      Out* o = out + t * I + i0;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) denom[i] = 1.0f + fast_exp(-stored_value(gate[i]));
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(stored_value(gate[i]) / denom[i] * stored_value(up[i]));
    }
  }
}

// silu(g) = g * s(g), s = sigmoid; silu'(g) = s(g) * (1 + g * (1 - s(g)))
template <typename T>
void swiglu_grad_rows(T* dgate_up, const float* dout, const T* gate_up, int64_t T_, int64_t I) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T_; ++t) {
    const T* gate = gate_up + t * 2 * I;
    const T* up = gate + I;
    const float* d = dout + t * I;
    T* dgate = dgate_up + t * 2 * I;
    T* dup = dgate + I;
#pragma omp simd
    for (int64_t i = 0; i < I; ++i) {
      const float g = stored_value(gate[i]), u = stored_value(up[i]);
      const float s = 1.0f / (1.0f + fast_exp(-g));
      dup[i] = store_as<T>(d[i] * g * s);
      dgate[i] = store_as<T>(d[i] * u * s * (1.0f + g * (1.0f - s)));
    }
  }
}
}  // namespace

void swiglu_forward(float* out, const float* gate_up, int64_t T, int64_t I) { swiglu_rows(out, gate_up, T, I); }

void swiglu_forward(uint16_t* out, const uint16_t* gate_up, int64_t T, int64_t I) {
  swiglu_rows(out, gate_up, T, I);
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t T, int64_t I) {
  swiglu_grad_rows(dgate_up, dout, gate_up, T, I);
}

void swiglu_backward(uint16_t* dgate_up, const float* dout, const uint16_t* gate_up, int64_t T, int64_t I) {
  swiglu_grad_rows(dgate_up, dout, gate_up, T, I);
}

void cross_entropy_forward_backward(float* logits, const int32_t* targets,
                                    const uint8_t* answer_mask, int64_t n, int64_t V,
                                    bool compute_grad, float grad_scale, CrossEntropyStats& stats,
                                    double* row_loss_out, uint8_t* row_correct_out) {
  // grow-only scratch of the calling thread, reached by the workers through pointers
  static thread_local std::vector<double> loss_scratch;
  static thread_local std::vector<uint8_t> correct_scratch;
  loss_scratch.assign(size_t(n), 0.0);
  correct_scratch.assign(size_t(n), 0);
  double* const row_loss = loss_scratch.data();
  uint8_t* const row_correct = correct_scratch.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    float* z = logits + r * V;
    const int32_t y = targets[r];
    if (y < 0) {
      if (compute_grad) std::fill(z, z + V, 0.0f);
      continue;
    }
    int64_t argmax = 0;
    float mx = z[0];
    for (int64_t v = 1; v < V; ++v)
      if (z[v] > mx) mx = z[v], argmax = v;
    // e_v = exp(z_v - max) to ~1 ulp, summed in double: the loss keeps ~1e-8 accuracy
    const float zy = z[y];
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) {
      const float e = fast_exp(z[v] - mx);
      z[v] = e;
      sum += double(e);
    }
    row_loss[r] = std::log(sum) - double(zy - mx);
    row_correct[r] = argmax == y;
    if (compute_grad) {
      // d(-log softmax_y)/dz = softmax(z) - onehot(y)
      const float k = float(double(grad_scale) / sum);
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) z[v] *= k;
      z[y] -= grad_scale;
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    if (row_loss_out) row_loss_out[r] = targets[r] < 0 ? 0.0 : row_loss[r];
    if (row_correct_out) row_correct_out[r] = targets[r] < 0 ? 0 : row_correct[r];
    if (targets[r] < 0) continue;
    stats.loss_sum += row_loss[r];
    ++stats.targets;
    if (answer_mask && answer_mask[r]) {
      ++stats.answers;
      stats.answers_correct += row_correct[r];
    }
  }
}

}  // namespace lct
