// lct bench's parts (run_bench, src/cli/bench.h): what the sections share. Each section
// measures into BenchResults and prints its table rows as it goes (say: unless --json).
//   bench_ceilings.cpp   ceilings and gemm sections
//   bench_attention.cpp  attention section
//   bench_step.cpp       step and profile sections
//   bench_balance.cpp    cp_balance and cad_balance sections
//   bench_report.cpp     the --json document
//   bench.cpp            run_bench (the order of the sections, the memory check) and the command
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "attention/core_attention.h"
#include "data/packing.h"
#include "model/trace.h"
#include "src/cli/bench.h"
#include "src/train/run_plan.h"
#include "src/util/log.h"

namespace lct::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Every figure is work over wall-clock time: the total work of the measured runs over
// their total time. A run repeats the same work, so that is the work of one run over
// the mean of the runs' times (never a median, which would drop the slow runs).
inline double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

// Runs `once` (which returns one or more timings) until `repeats` timed runs are
// collected or the budget is used up. A first warm-up run is discarded unless it
// alone took a quarter of the budget (long shapes, where warm-up effects vanish).
inline std::vector<std::vector<double>> repeat_timed(const BenchOptions& o,
                                                     const std::function<std::vector<double>()>& once) {
  std::vector<std::vector<double>> runs;
  auto counted = [&] {
    std::vector<double> r = once();
    if (o.progress) o.progress->runs.fetch_add(1, std::memory_order_relaxed);
    return r;
  };
  const auto t0 = Clock::now();
  const std::vector<double> warm = counted();
  if (seconds_since(t0) > o.budget_seconds / 4) runs.push_back(warm);
  while (int(runs.size()) < o.repeats && (runs.empty() || seconds_since(t0) < o.budget_seconds))
    runs.push_back(counted());
  return runs;
}

inline std::vector<double> column(const std::vector<std::vector<double>>& runs, size_t i) {
  std::vector<double> c;
  for (const auto& r : runs) c.push_back(r[i]);
  return c;
}

// ---- ceilings ------------------------------------------------------------------

// One product shape of the linear layers, in each way lct can run it (GFLOP/s; 0 = not
// on this CPU): fp32 OpenBLAS and oneDNN f32 (train.fp32_gemm); bf16 as the model runs
// it (rounding passes included);
// the oneDNN bf16 kernel alone on operands already in bf16 (the bf16 ceiling); and the
// fallback of CPUs without bf16 instructions (OpenBLAS on rounded operands).
struct GemmRow {
  std::string name;
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  double fp32 = 0, fp32_onednn = 0, bf16 = 0, bf16_kernel = 0, bf16_fallback = 0;
  double lct_tiles = 0;  // lct's own AVX512-BF16 microkernel on the same operands, prepacked (0: not run)
};

// ---- attention -----------------------------------------------------------------

struct AttentionRow {
  std::string layout, kernel, precision;
  double ceiling = 0;         // GFLOP/s of this precision's GEMM ceiling (best fp32 GEMM or bf16 GEMM)
  double time_vs_causal = 0;  // DCA rows: (fwd+bwd time) / causal's on the same input
  int64_t tokens = 0, documents = 0, pairs = 0;
  double fwd_s = 0, bwd_s = 0, fwd_gflops = 0, bwd_gflops = 0, total_gflops = 0;
  int runs = 0;
};

// ---- training step -------------------------------------------------------------

struct StepRow {
  int64_t seq_len = 0, documents = 0;
  std::string precision;
  double ms = 0, tokens_per_s = 0, gflops = 0;
  double gemm_ceiling = 0, peak_ceiling = 0;  // the precision's ceilings (MFU denominators)
  int64_t peak_rss = 0, activation_bytes = 0;
  int runs = 0;
};

// Where a step's time goes (the profile section): each phase's time per step over traced
// steps after two warm-up steps, split into the linear layers' products (the trace's
// product track) and everything else the phase does.
struct PhaseRow {
  std::string precision;
  int64_t seq_len = 0;
  int steps = 0;
  double step_ms = 0;                     // wall clock per step
  std::map<std::string, PhaseTime> phases;  // totals over the traced steps
  // Per step, by the FLOP convention (src/train/flops.h): the real tokens, the linear
  // layers' FLOPs (attention pairs 0) and core attention's (the rest of the step's)
  int64_t tokens = 0;
  double product_flops = 0, attention_flops = 0;
};

// A profiled step split into the linear layers' products (every product span), core
// attention (its phases, model/trace.h is_core_attention_phase) and everything else
// the traced phases did (norms, RoPE, SwiGLU, residual adds, roundings, loss, optimizer,
// weight copies), plus the step's time outside every phase; each at its ceiling: the
// products and attention in model GFLOP/s against the precision's GEMM ceiling, the
// rest in ns per token (its ceiling is memory bandwidth, the ceilings section's STREAM).
struct StepSplit {
  double products_ms = 0, attention_ms = 0, other_ms = 0, untraced_ms = 0;  // per step
  double products_gflops = 0, attention_gflops = 0, other_ns_per_token = 0;
};
StepSplit step_split(const PhaseRow& r);

// ---- balance -------------------------------------------------------------------

// Per-rank attention pairs (data/context_shards.h) of each split over a stream's
// sequences: max/mean per sequence, averaged, and the worst sequence's.
struct BalanceRow {
  int64_t cp = 0;
  std::string split;
  double mean_max_over_mean = 0, worst_max_over_mean = 0;
};

// The CAD planner alone on the stream: dp ranks each holding one sequence per tick,
// attention pairs max/mean before and after planning, and bytes moved per layer.
struct CadBalanceRow {
  int64_t ranks = 0;
  double before = 0, after = 0, worst_after = 0, mib_per_layer = 0;
};

// Everything one lct bench run measured, for the tables and the JSON document.
struct BenchResults {
  std::string cpu, blas_warning;
  const char* coretype = nullptr;  // OPENBLAS_CORETYPE, if set
  int threads = 0;
  int64_t sgemm_n = 2048;
  double sgemm = 0, fma = 0;  // OpenBLAS SGEMM, the FMA loop
  double onednn_f32 = 0;      // oneDNN's f32 matmul, the same product
  // The fp32 GEMM ceiling: the faster of the two fp32 libraries lct can call here (fp32
  // figures are set against it, so that a slow BLAS does not flatter them)
  double fp32_gemm = 0;
  const char* fp32_gemm_library = "OpenBLAS";
  double bf16_gemm = 0, bf16_dot = 0;  // 0: this CPU has no bf16 instructions
  // Memory bandwidth (STREAM copy and triad, src/cli/bench_loops.h): the ceiling of the
  // passes that are not products
  double stream_copy = 0, stream_triad = 0;
  int64_t stream_array_bytes = 0;
  std::string ceilings_from;  // --ceilings-from: the file the ceilings were read from (empty: measured here)
  AttentionParams causal, dca;  // the attention shapes measured
  std::vector<AttentionRow> attention;
  std::vector<StepRow> step;
  std::vector<BalanceRow> cp_balance;
  std::vector<CadBalanceRow> cad_balance;
  std::vector<GemmRow> gemm;
  int64_t gemm_tokens = 0;
  std::vector<PhaseRow> phases;
};

// A precision's ceilings for whole steps (the step section's MFU, the profile's split):
// oneDNN's bf16 GEMM and the VDPBF16PS loop for bf16 on a CPU with bf16 instructions,
// else the fp32 GEMM ceiling and the FMA loop (bf16 then runs as fp32 on rounded operands).
struct StepCeilings {
  double gemm = 0, peak = 0;
};
inline StepCeilings step_ceilings(const BenchResults& res, Precision precision) {
  const bool bf16 = precision == Precision::bf16 && res.bf16_gemm > 0 && res.bf16_dot > 0;
  return {bf16 ? res.bf16_gemm : res.fp32_gemm, bf16 ? res.bf16_dot : res.fma};
}

// Prints unless --json.
template <typename... Args>
void say(const BenchOptions& o, fmt::format_string<Args...> f, Args&&... args) {
  if (!o.json) print_out(f, std::forward<Args>(args)...), std::fflush(stdout);
}

// bench_ceilings.cpp
void ceilings_section(const BenchOptions& o, BenchResults& res);
// --ceilings-from: reads the file into res (before anything is printed), and its line
void ceilings_from_file(const std::string& path, BenchResults& res);
void say_ceilings_from(const BenchOptions& o, const BenchResults& res);
void gemm_section(const LlamaConfig& model, int64_t tokens, const BenchOptions& o, BenchResults& res);

// bench_attention.cpp
void attention_section(const Config& config, const BenchOptions& o, BenchResults& res);

// bench_step.cpp
PackedBatch first_sequence(const Config& base, int64_t L);
void step_section(const Config& config, const LlamaConfig& model, const BenchOptions& o, BenchResults& res);
void profile_section(const Config& config, const LlamaConfig& model, const BenchOptions& o, BenchResults& res);

// bench_balance.cpp
void cp_balance_section(const RunPlan& plan, const BenchOptions& o, BenchResults& res);
void cad_balance_section(const RunPlan& plan, const BenchOptions& o, BenchResults& res);

// bench_report.cpp
void print_bench_json(const BenchResults& res);

}  // namespace lct::bench
