#include "compute/gemm.h"

#include "compute/bf16_tiles.h"
#include "compute/parallel_for.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <type_traits>
#include <vector>

namespace lct {

namespace {

using dnnl::memory;

// rows x cols of a row-major matrix with leading dimension ld, densely into out: rounded
// to bf16 from fp32 (as bits, or as the floats they stand for), or copied / widened
// from bf16 bits (exact)
template <typename From, typename To>
void dense_copy(const From* src, int64_t rows, int64_t cols, int64_t ld, To* out) {
  parallel_for(rows, rows * cols, [&](int64_t r) {
    for (int64_t c = 0; c < cols; ++c) {
      const From x = src[r * ld + c];
      if constexpr (std::is_same_v<From, float> && std::is_same_v<To, uint16_t>) out[r * cols + c] = bf16_bits(x);
      else if constexpr (std::is_same_v<From, float>) out[r * cols + c] = round_to_bf16(x);
      else if constexpr (std::is_same_v<To, uint16_t>) out[r * cols + c] = x;
      else out[r * cols + c] = bf16_value(x);
    }
  });
}

// One oneDNN matmul per shape (operand and output types, M, N, K, transposes, alpha,
// beta, leading dimensions), created on first use and reused. bf16: operands are dense
// bf16 copies; f32: the operands in place. The output (fp32, or bf16 bits) in place.
// Executed through the C API with an argument array built once: the C++ wrapper's
// execute() builds a vector of the arguments on every call, an allocation in lct's own
// code (tests/model/step_alloc_test.cpp).
struct OneDnnMatmul {
  dnnl::matmul primitive;
  memory a, b, c;
  std::array<dnnl_exec_arg_t, 3> args{};
};

class OneDnn {
 public:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  // The implementation oneDNN picks for a bf16 matmul ("" when it has none, or only its
  // reference code, which is no bf16 hardware).
  std::string probe() {
    try {
      const memory::desc a({64, 64}, memory::data_type::bf16, {64, 1});
      const memory::desc c({64, 64}, memory::data_type::f32, {64, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine_);
      const std::string impl = pd.impl_info_str();
      return impl.find("ref") != std::string::npos ? "" : impl;
    } catch (const dnnl::error&) {
      return "";
    }
  }

  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
           const uint16_t* B, float beta, float* C, int64_t ldc) {
    // dense bf16 copies: lda = ta ? M : K, ldb = tb ? K : N
    execute(memory::data_type::bf16, memory::data_type::f32, ta, tb, M, N, K, alpha, A, ta ? M : K, B,
            tb ? K : N, beta, C, ldc);
  }
  // the same with C written as bf16 bits (beta 0)
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* B, uint16_t* C,
           int64_t ldc) {
    execute(memory::data_type::bf16, memory::data_type::bf16, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B,
            tb ? K : N, 0.0f, C, ldc);
  }
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    execute(memory::data_type::f32, memory::data_type::f32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

 private:
  void execute(memory::data_type type, memory::data_type dst, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
               float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
               int64_t ldc) {
    const auto key = std::make_tuple(int(type), int(dst), ta, tb, M, N, K, alpha, beta, lda, ldb, ldc);
    auto it = cache_.find(key);
    if (it == cache_.end())
      it = cache_.emplace(key, create(type, dst, ta, tb, M, N, K, alpha, beta, lda, ldb, ldc)).first;
    OneDnnMatmul& m = *it->second;
    m.a.set_data_handle(const_cast<void*>(A));
    m.b.set_data_handle(const_cast<void*>(B));
    m.c.set_data_handle(C);
    dnnl::error::wrap_c_api(dnnl_primitive_execute(m.primitive.get(), stream_.get(), int(m.args.size()), m.args.data()),
                            "could not execute a oneDNN matmul");
    stream_.wait();
  }

  std::unique_ptr<OneDnnMatmul> create(memory::data_type type, memory::data_type dst, bool ta, bool tb,
                                       int64_t M, int64_t N, int64_t K, float alpha, float beta, int64_t lda,
                                       int64_t ldb, int64_t ldc) {
    // A is M x K stored as (ta ? K x M : M x K) with leading dimension lda; B likewise
    const memory::desc a({M, K}, type, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
    const memory::desc b({K, N}, type, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    const memory::desc c({M, N}, dst, {ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
    auto m = std::make_unique<OneDnnMatmul>();
    m->primitive = dnnl::matmul(pd);
    m->a = memory(a, engine_, nullptr);
    m->b = memory(b, engine_, nullptr);
    m->c = memory(c, engine_, nullptr);
    m->args = {{{DNNL_ARG_SRC, m->a.get()}, {DNNL_ARG_WEIGHTS, m->b.get()}, {DNNL_ARG_DST, m->c.get()}}};
    return m;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, float, float, int64_t, int64_t, int64_t>,
           std::unique_ptr<OneDnnMatmul>>
      cache_;
};

OneDnn& onednn() {
  static OneDnn instance;
  return instance;
}

// Scratch for the rounded operands: grown to the largest product, then reused.
template <typename T>
T* scratch(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// A stored rows x cols operand (leading dimension ld) as the dense bf16 bits oneDNN
// takes: itself when it is bf16 and dense, else a copy in buf (rounded from fp32).
const uint16_t* dense_bf16(Operand x, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& buf) {
  if (x.bf16 && ld == cols) return static_cast<const uint16_t*>(x.data);
  uint16_t* out = scratch(buf, rows * cols);
  if (x.bf16) dense_copy(static_cast<const uint16_t*>(x.data), rows, cols, ld, out);
  else dense_copy(static_cast<const float*>(x.data), rows, cols, ld, out);
  return out;
}

// The same as floats for SGEMM: fp32 in place when `round` is off, else the operand's
// bf16 values (rounded from fp32, or widened from bf16) densely in buf. *ld_out is the
// leading dimension of the result.
const float* sgemm_operand(Operand x, bool round, int64_t rows, int64_t cols, int64_t ld,
                           std::vector<float>& buf, int64_t* ld_out) {
  *ld_out = ld;
  if (!x.bf16 && !round) return static_cast<const float*>(x.data);
  float* out = scratch(buf, rows * cols);
  if (x.bf16) dense_copy(static_cast<const uint16_t*>(x.data), rows, cols, ld, out);
  else dense_copy(static_cast<const float*>(x.data), rows, cols, ld, out);
  *ld_out = cols;
  return out;
}

}  // namespace

namespace {
// dst[i] = convert(src[i]) for i < n, in chunks of 4,096 values over the threads, each
// chunk a vectorized loop
template <typename From, typename To, typename Convert>
void convert_chunks(const From* src, int64_t n, To* dst, Convert convert) {
  constexpr int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n, [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * chunk);
#pragma omp simd
    for (int64_t i = c * chunk; i < end; ++i) dst[i] = convert(src[i]);
  });
}
}  // namespace

void to_bf16_bits(const float* src, int64_t n, uint16_t* dst) {
  convert_chunks(src, n, dst, [](float x) { return bf16_bits(x); });
}

void from_bf16_bits(const uint16_t* src, int64_t n, float* dst) {
  convert_chunks(src, n, dst, [](uint16_t x) { return bf16_value(x); });
}

const Bf16Support& bf16_support() {
  static const Bf16Support support = [] {
    Bf16Support s;
    const std::string impl = onednn().probe();
    s.instructions = !impl.empty();
    s.attention = bf16_tiles::available() ? "lct's AVX512-BF16 tile kernel" : "OpenBLAS SGEMM on bf16-rounded tiles";
    s.kernel = s.instructions ? "oneDNN bf16 matmul (" + impl + ")" : "fp32 GEMM (train.fp32_gemm) on bf16-rounded operands";
    return s;
  }();
  return support;
}

namespace {

void gemm_bf16(Bf16Kernel kernel, Fp32Library fp32, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               Operand A, int64_t lda, Operand B, int64_t ldb, float beta, float* C, int64_t ldc);

void gemm_fp32(Fp32Library library, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Operand A,
               int64_t lda, Operand B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (library == Fp32Library::automatic)
    throw std::invalid_argument("fp32 product: library auto is resolved by measurement first");
  // bf16 operands are widened (exactly); fp32 ones are used in place
  static thread_local std::vector<float> sa, sb;
  const float* a = sgemm_operand(A, false, ta ? K : M, ta ? M : K, lda, sa, &lda);
  const float* b = sgemm_operand(B, false, tb ? N : K, tb ? K : N, ldb, sb, &ldb);
  if (library == Fp32Library::onednn && K > 0) {
    gemm_fp32_onednn(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
  } else if (M == 1 && K > 0) {
    // One row (a decoding step of lct generate, a query tile of one row): OpenBLAS's
    // matrix-vector product. Its sgemm packs the whole of B for a single row, a copy of
    // every weight per token (measured: half of a decoding step's time). C's row is
    // cleared first when beta is 0, so that nothing stale in it can come through.
    if (beta == 0.0f) std::fill(C, C + N, 0.0f);
    const int incx = ta ? int(lda) : 1;  // op(A)'s one row: A's row, or a column of A^T
    if (tb)  // B [N, K]: C = B a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(N), int(K), alpha, b, int(ldb), a, incx, beta, C, 1);
    else  // B [K, N]: C = B^T a
      cblas_sgemv(CblasRowMajor, CblasTrans, int(K), int(N), alpha, b, int(ldb), a, incx, beta, C, 1);
  } else {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N),
                int(K), alpha, a, int(lda), b, int(ldb), beta, C, int(ldc));
  }
}

}  // namespace

Bf16Kernel bf16_kernel_of(const Arithmetic& arith) {
  if (arith.bf16_kernel != Bf16Kernel::automatic) return arith.bf16_kernel;
  return bf16_support().instructions ? Bf16Kernel::native : Bf16Kernel::rounded;
}

void gemm(const Arithmetic& arith, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Operand A,
          int64_t lda, Operand B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (arith.precision == Precision::bf16)
    gemm_bf16(bf16_kernel_of(arith), arith.fp32_library, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    gemm_fp32(arith.fp32_library, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_fp32_onednn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  onednn().run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16_operands(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                        const uint16_t* B, float beta, float* C, int64_t ldc) {
  if (!bf16_support().instructions)
    throw std::runtime_error("bf16 product on oneDNN: this CPU has no bf16 instructions (AVX512-BF16 or AMX-BF16)");
  onednn().run(ta, tb, M, N, K, alpha, A, B, beta, C, ldc);
}

void gemm_to_bf16(const Arithmetic& arith, bool ta, bool tb, int64_t M, int64_t N, int64_t K, Operand A, int64_t lda,
                  Operand B, int64_t ldb, uint16_t* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const Bf16Kernel kernel = bf16_kernel_of(arith);
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  if (kernel == Bf16Kernel::native && K > 0) {
    if (!bf16_support().instructions)
      throw std::runtime_error("bf16 product on oneDNN: this CPU has no bf16 instructions (AVX512-BF16 or AMX-BF16)");
    static thread_local std::vector<uint16_t> sa, sb;
    onednn().run(ta, tb, M, N, K, dense_bf16(A, a_rows, a_cols, lda, sa), dense_bf16(B, b_rows, b_cols, ldb, sb), C,
                 ldc);
    return;
  }
  // the fp32 sums in grow-only scratch, then rounded (what oneDNN's bf16 output does)
  static thread_local std::vector<float> sums;
  float* out = scratch(sums, M * N);
  gemm_bf16(kernel, arith.fp32_library, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, out, N);
  parallel_for(M, M * N, [&](int64_t r) {
    for (int64_t c = 0; c < N; ++c) C[r * ldc + c] = bf16_bits(out[r * N + c]);
  });
}

namespace {

void gemm_bf16(Bf16Kernel kernel, Fp32Library fp32, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               Operand A, int64_t lda, Operand B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  // stored shapes: A is (ta ? K x M : M x K), B is (tb ? N x K : K x N)
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  if (K == 0) {  // C = beta C: no operand is read
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (kernel == Bf16Kernel::native) {
    static thread_local std::vector<uint16_t> sa, sb;
    gemm_bf16_operands(ta, tb, M, N, K, alpha, dense_bf16(A, a_rows, a_cols, lda, sa),
                       dense_bf16(B, b_rows, b_cols, ldb, sb), beta, C, ldc);
  } else {  // the rounded values through the fp32 library (train.fp32_gemm)
    static thread_local std::vector<float> sa, sb;
    int64_t la = 0, lb = 0;
    const float* a = sgemm_operand(A, true, a_rows, a_cols, lda, sa, &la);
    const float* b = sgemm_operand(B, true, b_rows, b_cols, ldb, sb, &lb);
    gemm_fp32(fp32, ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc);
  }
}

}  // namespace

}  // namespace lct
