// Which library runs the fp32 products of the linear layers (train.fp32_gemm):
//   "auto"      (default) the faster of OpenBLAS SGEMM and oneDNN's f32 matmul on this
//               model's products at the run's sequence length, by wall clock: oneDNN
//               must be at least 10 % faster to be chosen (two libraries within noise
//               of each other would otherwise flip from run to run). Measured once per
//               setup (shapes, threads, CPU, BLAS) and cached like the CAD cost model
//               (src/util/machine.h cache_folder()), so every run on a machine, and
//               every rank of a run (rank 0 decides), uses the same library;
//   "openblas", "onednn"   that library.
// bf16 runs have no fp32 products in the linear layers; they skip the measurement.
#pragma once

#include <cstdint>
#include <string>

#include "attention/gemm.h"
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

}  // namespace lct
