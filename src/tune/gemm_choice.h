// The kernels of the linear layers' products, chosen by measurement on this machine.
//
// Which library runs the fp32 products of the linear layers (train.fp32_gemm):
//   "auto"      (default) the faster of OpenBLAS SGEMM and oneDNN's f32 matmul on this
//               model's products at the run's sequence length, by wall clock: oneDNN
//               must be at least 10 % faster to be chosen (two libraries within noise
//               of each other would otherwise flip from run to run). Measured once per
//               setup (shapes, threads, CPU, BLAS) and cached like the CAD cost model
//               (src/util/machine.h cache_folder()), so every run on a machine, and
//               every rank of a run (rank 0 decides), uses the same library;
//   "openblas", "onednn"   that library.
// bf16 runs resolve it too: their rounded kernel runs on it.
//
// Which kernel runs a bf16 run's products and attention tiles (train.bf16_kernel,
// compute/gemm.h Bf16Kernel):
//   "auto"      (default) rounded on a CPU without bf16 instructions; with them native,
//               unless rounded (on the fp32 library chosen above) runs the model's
//               products at least 10 % faster: bf16 instructions are not always faster
//               than fp32 FMAs (an Intel Xeon of family 6, model 207, without AMX, runs
//               VDPBF16PS at 0.67x its FMA loop). Measured once per setup and cached;
//   "native", "rounded"   that kernel (native needs bf16 instructions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compute/gemm.h"
#include "model/llama_config.h"

namespace lct {

struct Fp32GemmChoice {
  Fp32Library library = Fp32Library::openblas;
  std::string description;  // for the log: the library and why
};

// The linear-layer products' GFLOP/s in each library at `tokens` tokens (a few hundred
// milliseconds), as the choice sees them.
struct Fp32GemmRates {
  double openblas = 0, onednn = 0;
};
Fp32GemmRates measure_fp32_gemm(const LlamaConfig& m, int64_t tokens);
// auto's rule: oneDNN when it is at least 10 % faster, else OpenBLAS.
Fp32Library faster_fp32_library(const Fp32GemmRates& rates);

// Resolves the setting on this process (may measure for auto).
Fp32GemmChoice resolve_fp32_gemm(Fp32Library setting, const LlamaConfig& m, int64_t tokens);

struct Bf16KernelChoice {
  Bf16Kernel kernel = Bf16Kernel::rounded;
  std::string description;  // for the log: the kernel and why
};
// The model's bf16 products' GFLOP/s in each kernel (rounded on `fp32`), operands stored
// in bf16 as the model stores them; native 0 on a CPU without bf16 instructions.
struct Bf16KernelRates {
  double native = 0, rounded = 0;
};
Bf16KernelRates measure_bf16_kernels(const LlamaConfig& m, int64_t tokens, Fp32Library fp32);
// auto's rule: native unless rounded is at least 10 % faster (or there is no native).
Bf16Kernel faster_bf16_kernel(const Bf16KernelRates& rates);
// Resolves the setting on this process (may measure for auto); `fp32` is the resolved
// fp32 library the rounded kernel runs on.
Bf16KernelChoice resolve_bf16_kernel(Bf16Kernel setting, const LlamaConfig& m, int64_t tokens, Fp32Library fp32);
// The kernel resolve_bf16_kernel would give, when that is known without measuring (set,
// no bf16 instructions, or auto with this setup's fp32 and bf16 choices cached);
// nullopt otherwise. For the memory estimate, made before anything is measured.
std::optional<Bf16Kernel> known_bf16_kernel(Bf16Kernel setting, Fp32Library fp32_setting, const LlamaConfig& m,
                                            int64_t tokens);

}  // namespace lct
