// lct bench: the ceilings section (the same run's GEMM and peak-loop figures every other
// section is set against) and the gemm section (the linear layers' products).
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/bf16_tiles.h"
#include "compute/gemm.h"
#include "src/cli/bench_common.h"
#include "src/cli/bench_loops.h"
#include "src/io/json_file.h"
#include "src/tune/gemm_choice.h"

namespace lct::bench {
namespace {

double sgemm_gflops(const BenchOptions& o, int64_t n) {
  std::vector<float> a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n));
  for (int64_t i = 0; i < n * n; ++i) a[size_t(i)] = float(i % 7) * 0.1f, b[size_t(i)] = float(i % 5) * 0.1f;
  const auto runs = repeat_timed(o, [&] {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a.data(),
                int(n), b.data(), int(n), 0.0f, c.data(), int(n));
    return std::vector<double>{seconds_since(t0)};
  });
  return 2.0 * double(n) * n * n / mean(column(runs, 0)) / 1e9;
}

// oneDNN's f32 matmul on the same n^3 product (the other fp32 library lct can call)
double onednn_f32_gflops(const BenchOptions& o, int64_t n) {
  std::vector<float> a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n));
  for (int64_t i = 0; i < n * n; ++i) a[size_t(i)] = float(i % 7) * 0.1f, b[size_t(i)] = float(i % 5) * 0.1f;
  const auto runs = repeat_timed(o, [&] {
    const auto t0 = Clock::now();
    gemm_fp32_onednn(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    return std::vector<double>{seconds_since(t0)};
  });
  return 2.0 * double(n) * n * n / mean(column(runs, 0)) / 1e9;
}

// lct's attention microkernel (compute/bf16_tiles.h) as a linear layer's product: A
// dense bf16 rows, B packed into pair words once (a weight would be packed once per step),
// the rows split between the threads in blocks of 64, GFLOP/s. Products with a
// transposed A (the weight gradient) would pack A on every call: not measured (0).
double lct_tiles_rate(const BenchOptions& o, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const std::vector<uint16_t>& A, const std::vector<uint16_t>& B) {
  if (ta || !bf16_tiles::available() || K % 2 != 0) return 0;
  const int64_t kp = K / 2;
  std::vector<uint32_t> packed(size_t(kp * N));
  if (tb) bf16_tiles::transpose_pairs(B.data(), N, K, K, packed.data(), N);  // B stored [N, K]
  else bf16_tiles::interleave_rows(B.data(), K, N, N, packed.data(), N);     // B stored [K, N]
  std::vector<float> C(size_t(M * N));
  const int64_t block = 64, blocks = (M + block - 1) / block;
  const auto runs = repeat_timed(o, [&] {
    const auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = b * block, rows = std::min(block, M - r0);
      bf16_tiles::gemm(rows, N, kp, 1.0f, A.data() + r0 * K, K, packed.data(), N, false, C.data() + r0 * N, N);
    }
    return std::vector<double>{seconds_since(t0)};
  });
  return 2.0 * double(M) * double(N) * double(K) / mean(column(runs, 0)) / 1e9;
}

GemmRow gemm_row(const BenchOptions& o, const std::string& name, bool ta, bool tb, int64_t M, int64_t N,
                 int64_t K) {
  GemmRow r{name, ta, tb, M, N, K};
  std::vector<float> a(size_t(M * K)), b(size_t(K * N)), c(size_t(M * N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) * 0.1f - 0.3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) * 0.1f - 0.2f;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const auto rate = [&](const std::function<void()>& run) {
    const auto runs = repeat_timed(o, [&] {
      const auto t0 = Clock::now();
      run();
      return std::vector<double>{seconds_since(t0)};
    });
    return flops / mean(column(runs, 0)) / 1e9;
  };
  r.fp32 = rate([&] { cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M),
                                  int(N), int(K), 1.0f, a.data(), int(lda), b.data(), int(ldb), 0.0f, c.data(), int(N)); });
  r.fp32_onednn = rate([&] { gemm_fp32_onednn(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N); });
  r.bf16 = rate([&] { gemm({.precision = Precision::bf16}, ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N); });
  r.bf16_fallback = rate([&] {
    gemm({Precision::bf16, Fp32Library::openblas, Bf16Kernel::rounded}, ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(),
         ldb, 0.0f, c.data(), N);
  });
  if (bf16_support().instructions) {
    std::vector<uint16_t> ab(a.size()), bb(b.size());
    for (size_t i = 0; i < a.size(); ++i) ab[i] = bf16_bits(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bb[i] = bf16_bits(b[i]);
    r.bf16_kernel = rate([&] { gemm_bf16_operands(ta, tb, M, N, K, 1.0f, ab.data(), bb.data(), 0.0f, c.data(), N); });
    r.lct_tiles = lct_tiles_rate(o, ta, tb, M, N, K, ab, bb);
  }
  return r;
}

// The linear layers' products at T tokens as the model runs them (Q, K, V fused into one
// product, gate and up into one: model/decoder_layer.h): forward x W^T, backward
// dx = dout W and dW = dout^T x, and a square product.
std::vector<GemmRow> gemm_rows(const BenchOptions& o, const LlamaConfig& m, int64_t T) {
  const int64_t C = m.hidden_size, I = m.intermediate_size;
  const int64_t qkv = (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim(),
                qdim = m.num_attention_heads * m.head_dim();
  return {gemm_row(o, "fwd x Wqkv^T", false, true, T, qkv, C),       gemm_row(o, "fwd x Wo^T", false, true, T, C, qdim),
          gemm_row(o, "fwd x Wgate_up^T", false, true, T, 2 * I, C), gemm_row(o, "fwd x Wdown^T", false, true, T, C, I),
          gemm_row(o, "bwd dx = d Wgate_up", false, false, T, C, 2 * I),
          gemm_row(o, "bwd dW = d^T x", true, false, 2 * I, C, T),
          gemm_row(o, "square 2048^3", false, false, 2048, 2048, 2048)};
}

// oneDNN's bf16 matmul alone on n^3 operands already in bf16 (0 on a CPU without bf16
// instructions): the bf16 GEMM ceiling.
double bf16_gemm_gflops(const BenchOptions& o, int64_t n) {
  if (!bf16_support().instructions) return 0.0;
  std::vector<uint16_t> a(size_t(n * n)), b(size_t(n * n));
  std::vector<float> c(size_t(n * n));
  for (int64_t i = 0; i < n * n; ++i) a[size_t(i)] = bf16_bits(float(i % 7) * 0.1f), b[size_t(i)] = bf16_bits(float(i % 5) * 0.1f);
  const auto runs = repeat_timed(o, [&] {
    const auto t0 = Clock::now();
    gemm_bf16_operands(false, false, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data(), n);
    return std::vector<double>{seconds_since(t0)};
  });
  return 2.0 * double(n) * n * n / mean(column(runs, 0)) / 1e9;
}

double bf16_dot_peak_gflops(const BenchOptions& o) {
  if (bf16_dot_loop(1 << 22) == 0.0) return 0.0;  // (also wakes the cores)
  const auto runs = repeat_timed(o, [] { return std::vector<double>{1.0 / bf16_dot_loop(1 << 25)}; });
  return 1.0 / mean(column(runs, 0));
}

double fma_peak_gflops(const BenchOptions& o) {
  fma_loop(1 << 22);  // wake the cores
  // each run does the same FLOPs, so FLOPs over total time is the rates' harmonic mean
  const auto runs = repeat_timed(o, [] { return std::vector<double>{1.0 / fma_loop(1 << 25)}; });
  return 1.0 / mean(column(runs, 0));
}

}  // namespace

// The same run's ceilings: the fp32 GEMM of both libraries (the faster is the fp32 ceiling)
// and the FMA loop, oneDNN's bf16 GEMM and the bf16 dot loop, and the memory bandwidth.
void ceilings_section(const BenchOptions& o, BenchResults& res) {
  double &sgemm = res.sgemm, &fma = res.fma;
  const int64_t sgemm_n = res.sgemm_n;
  sgemm = sgemm_gflops(o, sgemm_n);
  res.onednn_f32 = onednn_f32_gflops(o, sgemm_n);
  res.fp32_gemm = std::max(sgemm, res.onednn_f32);
  res.fp32_gemm_library = res.onednn_f32 > sgemm ? "oneDNN f32" : "OpenBLAS";
  fma = fma_peak_gflops(o);
  say(o, "\nceilings  fp32 GEMM {}^3: OpenBLAS {:.1f}, oneDNN f32 {:.1f} GFLOP/s (the fp32 ceiling: {}) | FMA loop: "
      "{:.1f} GFLOP/s (best GEMM = {:.0f}% of FMA)\n",
      sgemm_n, sgemm, res.onednn_f32, res.fp32_gemm_library, fma, 100.0 * res.fp32_gemm / fma);
  res.bf16_gemm = bf16_gemm_gflops(o, sgemm_n);
  res.bf16_dot = bf16_dot_peak_gflops(o);
  if (res.bf16_gemm > 0 || res.bf16_dot > 0)
    say(o, "          bf16 GEMM {}^3 (oneDNN, bf16 operands): {:.1f} GFLOP/s | bf16 dot loop (VDPBF16PS): {:.1f} GFLOP/s\n",
        sgemm_n, res.bf16_gemm, res.bf16_dot);
  else
    say(o, "          bf16: this CPU has no bf16 instructions; bf16 runs as fp32 on rounded operands "
           "(its ceilings are the fp32 ones)\n");
  const StreamRates stream = stream_rates(int64_t(128) << 20, std::max(3, o.repeats));
  res.stream_copy = stream.copy_gbps;
  res.stream_triad = stream.triad_gbps;
  res.stream_array_bytes = stream.array_bytes;
  say(o, "          memory (STREAM, 3 arrays of {} MiB, best pass): copy {:.1f} GB/s, triad {:.1f} GB/s\n",
      stream.array_bytes >> 20, stream.copy_gbps, stream.triad_gbps);
}

// The ceilings of an earlier lct bench --json (--ceilings-from), refused in one line
// naming the file when it was measured on another CPU, thread count or OpenBLAS core, or
// when a ceiling is missing, of the wrong type or was not measured (0).
void ceilings_from_file(const std::string& path, BenchResults& res) {
  const std::string where = "--ceilings-from " + path;
  Json j;
  try {
    j = read_json_file(path);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--ceilings-from ") + e.what());  // e.what() names the file
  }
  const auto field = [&](const char* section, const char* key, JsonKind kind) -> const Json& {
    const bool has = j.is_object() && j.contains(section) && j[section].is_object() && j[section].contains(key);
    const char* want = has ? json_kind_mismatch(j[section][key], kind) : "present";
    if (want) throw std::runtime_error(fmt::format("{}: {}.{} must be {} (the file is not an lct bench --json)", where,
                                                   section, key, want));
    return j[section][key];
  };
  const std::string cpu = field("machine", "cpu", JsonKind::string).get<std::string>();
  const int64_t threads = field("machine", "threads", JsonKind::integer).get<int64_t>();
  const std::string core = field("machine", "openblas_core", JsonKind::string).get<std::string>();
  if (cpu != res.cpu || threads != res.threads || core != openblas_get_corename())
    throw std::runtime_error(fmt::format("{}: measured on '{}' with {} threads and OpenBLAS core {}; this run is '{}' "
                                         "with {} threads and core {}", where, cpu, threads, core, res.cpu, res.threads,
                                         openblas_get_corename()));
  const auto ceiling = [&](const char* key, bool may_be_zero = false) {
    const double v = field("ceilings", key, JsonKind::number).get<double>();
    // a rate a real CPU can show, 1 MFLOP/s to 1 EFLOP/s (a crafted 1e-320 gives inf fractions)
    if (!(v >= 1e-3 && v <= 1e9) && !(may_be_zero && v == 0))
      throw std::runtime_error(fmt::format("{}: ceilings.{} is {}, not a measured ceiling (was the ceilings section "
                                           "run?)", where, key, v));
    return v;
  };
  res.sgemm_n = field("ceilings", "sgemm_n", JsonKind::integer).get<int64_t>();
  if (res.sgemm_n <= 0) throw std::runtime_error(fmt::format("{}: ceilings.sgemm_n is {}, not a size", where, res.sgemm_n));
  res.sgemm = ceiling("sgemm_gflops");
  res.onednn_f32 = ceiling("onednn_f32_gflops");
  res.fp32_gemm = std::max(res.sgemm, res.onednn_f32);
  res.fp32_gemm_library = res.onednn_f32 > res.sgemm ? "oneDNN f32" : "OpenBLAS";
  res.fma = ceiling("fma_gflops");
  // (0 on a CPU without bf16 instructions)
  res.bf16_gemm = ceiling("bf16_gemm_gflops", !bf16_support().instructions);
  res.bf16_dot = ceiling("bf16_dot_gflops", !bf16_support().instructions);
  res.stream_copy = ceiling("stream_copy_gbps");
  res.stream_triad = ceiling("stream_triad_gbps");
  res.stream_array_bytes = field("ceilings", "stream_array_bytes", JsonKind::integer).get<int64_t>();
  res.ceilings_from = path;
}

void say_ceilings_from(const BenchOptions& o, const BenchResults& res) {
  say(o, "\nceilings  from {} (not measured again): fp32 GEMM {:.1f} GFLOP/s ({}) | FMA loop {:.1f} | bf16 GEMM {:.1f}, "
      "dot loop {:.1f} | STREAM copy {:.1f} GB/s, triad {:.1f} GB/s\n",
      res.ceilings_from, res.fp32_gemm, res.fp32_gemm_library, res.fma, res.bf16_gemm, res.bf16_dot, res.stream_copy,
      res.stream_triad);
}

// The linear layers' products in each library and precision.
void gemm_section(const LlamaConfig& model, int64_t tokens, const BenchOptions& o, BenchResults& res) {
  res.gemm_tokens = tokens;
  say(o, "\ngemm  the linear layers' products at {} tokens (hidden {}, mlp {}) | GFLOP/s; bf16 runs on: {}\n",
      res.gemm_tokens, model.hidden_size, model.intermediate_size, bf16_support().kernel);
  say(o, "  fp32: OpenBLAS; fp32 dnnl: oneDNN f32 (train.fp32_gemm); bf16: as the model runs it (oneDNN, rounding "
         "included); bf16 kernel: oneDNN alone on bf16 operands; lct tiles: lct's AVX512-BF16 microkernel alone, "
         "B prepacked; bf16/fp32: bf16 over the faster fp32\n");
  say(o, "  {:<20} {:>17} {:>9} {:>10} {:>9} {:>11} {:>9} {:>12} {:>9}\n", "product", "M x N x K", "fp32", "fp32 dnnl",
      "bf16", "bf16 kernel", "lct tiles", "bf16 fallback", "bf16/fp32");
  res.gemm = gemm_rows(o, model, res.gemm_tokens);
  const auto cell = [](double v) { return v > 0 ? std::to_string(int(v + 0.5)) : std::string("-"); };
  for (const GemmRow& r : res.gemm) {
    const std::string shape = std::to_string(r.M) + "x" + std::to_string(r.N) + "x" + std::to_string(r.K);
    say(o, "  {:<20} {:>17} {:>9.1f} {:>10.1f} {:>9.1f} {:>11} {:>9} {:>12.1f} {:>9.2f}\n", r.name, shape, r.fp32,
        r.fp32_onednn, r.bf16, cell(r.bf16_kernel), cell(r.lct_tiles), r.bf16_fallback,
        r.bf16 / std::max(r.fp32, r.fp32_onednn));
  }
  {
    const Fp32GemmRates rates = measure_fp32_gemm(model, res.gemm_tokens);
    say(o, "  train.fp32_gemm = auto here: {} (all the model's linear products: oneDNN f32 {:.0f}, OpenBLAS {:.0f} "
           "GFLOP/s; oneDNN needs a 10% lead)\n", fp32_library_name(faster_fp32_library(rates)), rates.onednn, rates.openblas);
  }
}

}  // namespace lct::bench
