// Layer math as free functions over plain arrays, forward/backward pairs.
// Argument order: outputs, saved-for-backward values, inputs, weights, dims.
// Backward functions *accumulate* (+=) into parameter gradients; into activation
// gradients they accumulate too unless the comment says "writes".
// T = tokens, C = hidden size, V = vocabulary, I = intermediate size.
//
// Reductions over tokens (weight gradients of norms/embeddings, loss sums) use fixed
// token chunks combined in order, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/gemm.h"

namespace lct {

// out[T, O] = x[T, I] W^T with W[O, I] (PyTorch Linear layout, no bias), in `arith`'s
// precision on its kernels (compute/gemm.h: bf16 rounds x and W unless they are stored in
// bf16, sums in fp32)
void matmul_forward(float* out, Operand x, Operand w, int64_t T, int64_t in_dim, int64_t out_dim,
                    const Arithmetic& arith = {});
// The same in bf16 on arith's bf16 kernel, out written as bf16 bits (each value its fp32
// sum rounded)
void matmul_forward(uint16_t* out, Operand x, Operand w, int64_t T, int64_t in_dim, int64_t out_dim,
                    const Arithmetic& arith);
// dx[T, I] += dout W ; dw[O, I] += dout^T x   (pass nullptr to skip either; bf16 rounds
// dout once for both unless it is stored in bf16, and W and x unless stored in bf16; the
// gradients accumulate in fp32). DxWrite::overwrite writes dx = dout W instead, saving
// the pass that would zero dx first (the same values: x + 0 = x).
enum class DxWrite { accumulate, overwrite };
void matmul_backward(float* dx, float* dw, Operand dout, Operand x, Operand w, int64_t T,
                     int64_t in_dim, int64_t out_dim, const Arithmetic& arith = {},
                     DxWrite dx_write = DxWrite::accumulate);
// Every product above is one span on the trace's product track (model/trace.h), so a
// timeline splits each phase into products and everything else.

// out[T, C] = table[tokens[t], :]
void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t T,
                       int64_t C);
// The same with out stored as bf16 bits (each value rounded to nearest even)
void embedding_forward(uint16_t* out, const int32_t* tokens, const float* table, int64_t T,
                       int64_t C);
// dtable[tokens[t], :] += dout[t, :]
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t T,
                        int64_t C);

// out = x / sqrt(mean(x^2) + eps) * w ; rstd[T] saved for backward
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t T,
                     int64_t C, float eps);
// The same with out stored as bf16 bits (each value the fp32 result rounded); x may be
// bf16 bits too (a bf16 run's layer input), widened as it is read
void rmsnorm_forward(uint16_t* out, float* rstd, const float* x, const float* w, int64_t T,
                     int64_t C, float eps);
void rmsnorm_forward(uint16_t* out, float* rstd, const uint16_t* x, const float* w, int64_t T,
                     int64_t C, float eps);
// x += residual, then out = rmsnorm(x) as above, in one pass over the rows: the same bits
// as the add and the norm in two passes (the residual add fused with the next norm)
void add_rmsnorm_forward(float* out, float* rstd, float* x, const float* residual, const float* w,
                         int64_t T, int64_t C, float eps);
void add_rmsnorm_forward(uint16_t* out, float* rstd, float* x, const float* residual, const float* w,
                         int64_t T, int64_t C, float eps);
void add_rmsnorm_forward(uint16_t* out, float* rstd, float* x, const uint16_t* residual, const float* w,
                         int64_t T, int64_t C, float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int64_t T, int64_t C);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const uint16_t* x, const float* w,
                      const float* rstd, int64_t T, int64_t C);

// The SwiGLU on the fused gate and up product: gate_up[T, 2I] holds row t's gate in
// columns [0, I) and its up in [I, 2I) (one product of h and [Wgate; Wup]).
// out[T, I] = silu(gate) * up, in one pass; bf16 runs read gate_up and write out as bf16
// bits (computed in fp32 from the stored values, then rounded).
void swiglu_forward(float* out, const float* gate_up, int64_t T, int64_t I);
void swiglu_forward(uint16_t* out, const uint16_t* gate_up, int64_t T, int64_t I);
// writes dgate_up[T, 2I] (dgate | dup per row) from dout[T, I]; bf16 runs write it as
// bf16 bits, the rounding the products it feeds would apply, in the same pass
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t T, int64_t I);
void swiglu_backward(uint16_t* dgate_up, const float* dout, const uint16_t* gate_up, int64_t T, int64_t I);

struct CrossEntropyStats {
  double loss_sum = 0.0;    // sum of -log p(target) over rows with a target
  int64_t targets = 0;      // rows with a target
  int64_t answers = 0;      // rows flagged in answer_mask with a target
  int64_t answers_correct = 0;  // ... whose argmax equals the target
};
// logits[n, V] are replaced by grad_scale * d(sum of losses)/d(logits) when
// compute_grad is set (rows without a target get zero gradient). targets[n] are -1
// for "no target". Adds into stats; row_loss_out (optional, [n]) gets each row's loss
// (0 for rows without a target) and row_correct_out (optional, [n]) 1 where the argmax
// is the target.
void cross_entropy_forward_backward(float* logits, const int32_t* targets,
                                    const uint8_t* answer_mask, int64_t n, int64_t V,
                                    bool compute_grad, float grad_scale, CrossEntropyStats& stats,
                                    double* row_loss_out = nullptr, uint8_t* row_correct_out = nullptr);

}  // namespace lct
