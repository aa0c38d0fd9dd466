// Every matrix product of the linear layers: C = alpha op(A) op(B) + beta C, row-major,
// fp32 in memory, in one of two precisions.
//
//   fp32  OpenBLAS SGEMM, or oneDNN's f32 matmul where that is faster (below).
//   bf16  both operands rounded to bfloat16 (round to nearest even), products summed
//         in fp32 (mixed precision as Megatron-LM and torchtitan train: fp32 master
//         weights, bf16 matmul inputs, fp32 accumulation and output), by one of two
//         kernels (Bf16Kernel below): oneDNN's bf16 matmul (created once per shape and
//         reused) on a CPU with bf16 instructions (AVX512-BF16 or AMX-BF16), or the
//         rounded operands through the fp32 library, the same numbers up to fp32
//         summation order (bf16_support() says what the CPU has).
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "compute/enum_names.h"

namespace lct {

enum class Precision { fp32, bf16 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"},
    {Precision::bf16, "bf16", "linear layers' products in bf16 with fp32 sums; fp32 weights, gradients and optimizer"},
};
inline Precision parse_precision(const std::string& name) { return parse_enum(kPrecisionNames, name, "precision"); }
inline const char* precision_name(Precision value) { return enum_name(kPrecisionNames, value); }

// A matrix operand in memory: fp32, or bf16 bits already rounded (a bf16 run's saved
// activations and weight copies). A bf16 product takes bf16 operands as they are, so
// the rounding pass is paid once, where the values are written; an fp32 product widens
// them (exactly).
struct Operand {
  const void* data = nullptr;
  bool bf16 = false;
  Operand(const float* p) : data(p) {}
  Operand(const uint16_t* p) : data(p), bf16(true) {}
};

// The library of an fp32 product (train.fp32_gemm): OpenBLAS SGEMM or oneDNN's f32
// matmul (primitives created once per shape). automatic is a setting only (the run plan
// measures and resolves one of the two; src/tune/gemm_choice.h). Both sum in fp32 in
// their own order, so results differ in the last bits between them.
enum class Fp32Library { automatic, openblas, onednn };
inline constexpr EnumName<Fp32Library> kFp32LibraryNames[] = {
    {Fp32Library::automatic, "auto", "the faster here, measured once and cached"},
    {Fp32Library::openblas, "openblas"},
    {Fp32Library::onednn, "onednn"},
};
inline Fp32Library parse_fp32_library(const std::string& name) { return parse_enum(kFp32LibraryNames, name, "fp32 GEMM library"); }
inline const char* fp32_library_name(Fp32Library value) { return enum_name(kFp32LibraryNames, value); }
// The oneDNN f32 product by name (tests check it, the trainer and lct bench time it).
void gemm_fp32_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The two ways of a bf16 product (train.bf16_kernel), callable by name (tests check
// both; lct bench times both):
//   native   oneDNN's bf16 matmul (the attention kernel: lct's AVX512-BF16 tiles); needs
//            bf16 instructions
//   rounded  the operands rounded to bf16 and multiplied in fp32, on the fp32 library
//            (train.fp32_gemm; the attention kernel: fp32 tiles of rounded values): the
//            same numbers up to fp32 summation order, on any CPU
// automatic as a setting is measured (src/tune/gemm_choice.h); in an Arithmetic it is
// the CPU's default: native where it has bf16 instructions, else rounded. Where a CPU's bf16 instructions are slower than its fp32 FMAs (seen: an Intel Xeon of family
// 6, model 207, without AMX, whose VDPBF16PS loop runs at 0.67x its FMA loop), rounded
// is the faster of the two.
enum class Bf16Kernel { automatic, native, rounded };
inline constexpr EnumName<Bf16Kernel> kBf16KernelNames[] = {
    {Bf16Kernel::automatic, "auto", "native where this CPU has bf16 instructions and they are faster here, measured once and cached"},
    {Bf16Kernel::native, "native", "the CPU's bf16 instructions: oneDNN's bf16 matmul, lct's AVX512-BF16 attention tiles"},
    {Bf16Kernel::rounded, "rounded", "operands rounded to bf16, multiplied in fp32 (any CPU)"},
};
inline Bf16Kernel parse_bf16_kernel(const std::string& name) { return parse_enum(kBf16KernelNames, name, "bf16 kernel"); }
inline const char* bf16_kernel_name(Bf16Kernel value) { return enum_name(kBf16KernelNames, value); }

// How a model's products run: their precision and this machine's kernels for it. A value,
// not process state: the run plan resolves one (src/train/machine_choices.h) and it
// travels to the model's linear layers and the attention kernel (AttentionParams), so
// two models in one process may differ. The attention kernel reads precision and
// bf16_kernel (its fp32 tiles are OpenBLAS SGEMM whatever the library).
struct Arithmetic {
  Precision precision = Precision::fp32;
  Fp32Library fp32_library = Fp32Library::openblas;  // fp32 products, and bf16's rounded kernel
  Bf16Kernel bf16_kernel = Bf16Kernel::automatic;    // bf16 products; automatic: the CPU's default
  bool operator==(const Arithmetic&) const = default;
};
// The bf16 kernel an Arithmetic runs: automatic resolved to the CPU's default.
Bf16Kernel bf16_kernel_of(const Arithmetic& arith);

// C = alpha op(A) op(B) + beta C in arith's precision, on its kernel. Fp32Library::
// automatic throws std::invalid_argument; native on a CPU without bf16 instructions,
// std::runtime_error.
void gemm(const Arithmetic& arith, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          Operand A, int64_t lda, Operand B, int64_t ldb, float beta, float* C, int64_t ldc);

// A bf16 product written as bf16 bits, C = op(A) op(B) (alpha 1, beta 0; each value its
// fp32 sum rounded to nearest even), on arith's bf16 kernel whatever its precision: a bf16
// run's products whose output only feeds other products and elementwise steps (the
// MLP's gate and up), so no fp32 copy is written and rounded in a second pass. oneDNN
// writes bf16 itself; the rounded kernel rounds the fp32 library's sums.
void gemm_to_bf16(const Arithmetic& arith, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Operand A,
                  int64_t lda, Operand B, int64_t ldb, uint16_t* C, int64_t ldc);

// The oneDNN bf16 product of operands already in bf16 (dense: lda = ta ? M : K, ldb =
// tb ? K : N), fp32 C: the kernel alone, without rounding passes (lct bench's bf16
// ceiling). Throws std::runtime_error on a CPU without bf16 instructions.
void gemm_bf16_operands(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const uint16_t* A, const uint16_t* B, float beta, float* C, int64_t ldc);

// What runs a bf16 product on this CPU.
struct Bf16Support {
  bool instructions = false;  // the CPU has AVX512-BF16 or AMX-BF16 and oneDNN uses them
  std::string kernel;         // "oneDNN bf16 (avx512_core_bf16)" or the fallback's name
  std::string attention;      // what runs the attention kernel's bf16 tiles
};
const Bf16Support& bf16_support();

// Rounds to the nearest bfloat16 (ties to even; a NaN stays a quiet NaN), as its 16
// bits / as the float it stands for. Inline and branch-free, so loops over them vectorize.
inline uint16_t bf16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline float bf16_value(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }
inline float round_to_bf16(float x) { return bf16_value(bf16_bits(x)); }
// A value stored as T (float, or bf16 bits as uint16_t) read as a float, and a float
// stored as T (rounded to bf16 for uint16_t): for loops written once for both storages.
template <typename T>
inline float stored_value(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return bf16_value(x);
}
template <typename T>
inline T store_as(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return bf16_bits(x);
}
// n values rounded to bf16 bits, and n bf16 bits widened back to floats (OpenMP threads
// over long arrays)
void to_bf16_bits(const float* src, int64_t n, uint16_t* dst);
void from_bf16_bits(const uint16_t* src, int64_t n, float* dst);

}  // namespace lct
