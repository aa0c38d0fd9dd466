#include "src/cli/bench.h"
#include "src/cli/bench_loops.h"
#include "src/cli/command.h"
#include "src/tune/cad_profile.h"
#include "src/util/json.h"

#include <cblas.h>
#include <immintrin.h>
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "compute/bf16_tiles.h"
#include "attention/core_attention.h"
#include "data/rng.h"
#include "model/ops.h"
#include "model/rope.h"
#include "model/trace.h"
#include "parallel/cad_cost.h"
#include "parallel/cad_plan.h"
#include "data/context_shards.h"
#include "src/train/flops.h"
#include "src/train/memory_budget.h"
#include "src/tune/gemm_choice.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"
#include "src/util/log.h"
#include "src/util/machine.h"
#include "src/train/trainer.h"

namespace lct {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Every figure is work over wall-clock time: the total work of the measured runs over
// their total time. A run repeats the same work, so that is the work of one run over
// the mean of the runs' times (never a median, which would drop the slow runs).
double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

// Runs `once` (which returns one or more timings) until `repeats` timed runs are
// collected or the budget is used up. A first warm-up run is discarded unless it
// alone took a quarter of the budget (long shapes, where warm-up effects vanish).
std::vector<std::vector<double>> repeat_timed(const BenchOptions& o,
                                              const std::function<std::vector<double>()>& once) {
  std::vector<std::vector<double>> runs;
  const auto t0 = Clock::now();
  const std::vector<double> warm = once();
  if (seconds_since(t0) > o.budget_seconds / 4) runs.push_back(warm);
  while (int(runs.size()) < o.repeats && (runs.empty() || seconds_since(t0) < o.budget_seconds))
    runs.push_back(once());
  return runs;
}

std::vector<double> column(const std::vector<std::vector<double>>& runs, size_t i) {
  std::vector<double> c;
  for (const auto& r : runs) c.push_back(r[i]);
  return c;
}

// ---- ceilings ------------------------------------------------------------------

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

// ---- attention -----------------------------------------------------------------

struct AttentionRow {
  std::string layout, kernel, precision;
  double ceiling = 0;         // GFLOP/s of this precision's GEMM ceiling (best fp32 GEMM or bf16 GEMM)
  double time_vs_causal = 0;  // DCA rows: (fwd+bwd time) / causal's on the same input
  int64_t tokens = 0, documents = 0, pairs = 0;
  double fwd_s = 0, bwd_s = 0, fwd_gflops = 0, bwd_gflops = 0, total_gflops = 0;
  int runs = 0;
};

// `batch`'s documents, with their prefixes or segments under prefix_lm / shared_question.
AttentionRow bench_attention(const BenchOptions& o, const AttentionParams& p,
                             const std::string& layout, const PackedBatch& batch) {
  const std::span<const int32_t> cu = batch.cu_seqlens;
  const std::vector<AttentionTask> tasks = tasks_for_documents(cu, {batch.prefix_lens, batch.segment_ids});
  const int64_t T = cu.back(), qn = T * p.num_heads * p.head_dim,
                kn = T * p.num_kv_heads * p.head_dim;
  const size_t qs = size_t(qn), ks = size_t(kn);
  std::vector<float> q(qs), k(ks), v(ks), out(qs), lse(size_t(T) * p.num_heads), dout(qs),
      dq(qs), dk(ks), dv(ks);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < qn; ++i) {
    q[size_t(i)] = float(normal_at(1, 0, uint64_t(i)));
    dout[size_t(i)] = float(normal_at(1, 3, uint64_t(i)));
    if (i < kn) {
      k[size_t(i)] = float(normal_at(1, 1, uint64_t(i)));
      v[size_t(i)] = float(normal_at(1, 2, uint64_t(i)));
    }
  }
  const auto runs = repeat_timed(o, [&] {
    const auto t0 = Clock::now();
    attention_forward(p, tasks, q.data(), k.data(), v.data(), out.data(), lse.data());
    const double fwd = seconds_since(t0);
    const auto t1 = Clock::now();
    attention_backward(p, tasks, q.data(), k.data(), v.data(), out.data(), lse.data(),
                       dout.data(), dq.data(), dk.data(), dv.data());
    return std::vector<double>{fwd, seconds_since(t1)};
  });
  AttentionRow r;
  r.layout = layout;
  r.kernel = attention_kernel_name(p.kernel);
  if (!p.mask.causal()) r.kernel += ", mask " + p.mask.describe();
  r.precision = precision_name(p.precision);
  r.tokens = T;
  r.documents = int64_t(cu.size()) - 1;
  r.pairs = attention_pairs(tasks, p.mask);  // unmasked pairs only (LongCA-bench's mask-aware FLOPs)
  r.runs = int(runs.size());
  r.fwd_s = mean(column(runs, 0));
  r.bwd_s = mean(column(runs, 1));
  std::vector<double> sum;
  for (const auto& run : runs) sum.push_back(run[0] + run[1]);
  const double fwd_flops = 4.0 * p.num_heads * p.head_dim * double(r.pairs);
  r.fwd_gflops = fwd_flops / r.fwd_s / 1e9;
  r.bwd_gflops = 2.5 * fwd_flops / r.bwd_s / 1e9;
  r.total_gflops = 3.5 * fwd_flops / mean(sum) / 1e9;
  return r;
}

// ---- training step -------------------------------------------------------------

struct StepRow {
  int64_t seq_len = 0, documents = 0;
  std::string precision;
  double ms = 0, tokens_per_s = 0, gflops = 0;
  double gemm_ceiling = 0, peak_ceiling = 0;  // the precision's ceilings (MFU denominators)
  int64_t peak_rss = 0, activation_bytes = 0;
  int runs = 0;
};

Config config_at_length(const Config& base, int64_t L) {
  Config c = base;
  c.data.seq_len = L;
  c.data.max_doc_len = L;
  c.train.micro_batches = 1;
  c.train.steps = 1 << 20;  // the schedule is irrelevant; keep lr in warmup
  return c;
}

// The first packed sequence of length L from the config's data: its documents, and their
// prefixes or segments under a per-document mask.
PackedBatch first_sequence(const Config& base, int64_t L) {
  DocumentStream stream(make_run_plan(config_at_length(base, L), 1));
  return stream.sequence(0);
}

// The documents of one document of L tokens (no tokens), with its prefix or segments.
PackedBatch one_document(const Config& config, int64_t L) {
  PackedBatch b;
  b.cu_seqlens = {0, int32_t(L)};
  doc_structure_of(config.data, config.model.attention_mask.kind).append_piece(b, L, 0, L);
  return b;
}

StepRow bench_step(const BenchOptions& o, const Config& base, int64_t L, Precision precision) {
  attention_release_workspace();
  malloc_trim(0);
  reset_peak_rss();
  StepRow r;
  r.seq_len = L;
  r.precision = precision_name(precision);
  {
    Config c = config_at_length(base, L);
    c.train.precision = precision;
    Trainer trainer(make_run_plan(c, 1));
    const auto runs = repeat_timed(o, [&] {
      const StepRecord s = trainer.train_step();
      return std::vector<double>{s.ms, double(s.tokens), s.gflops * s.ms};  // GFLOP/s x ms
    });
    r.runs = int(runs.size());
    // total tokens (FLOPs) over the total time of the measured steps
    const double ms = mean(column(runs, 0));
    r.ms = ms;
    r.tokens_per_s = mean(column(runs, 1)) / (ms / 1e3);
    r.gflops = mean(column(runs, 2)) / ms;
    r.activation_bytes = trainer.model().activation_bytes();
    r.documents = first_sequence(base, L).num_docs();
    r.peak_rss = peak_rss_bytes();
  }
  attention_release_workspace();
  malloc_trim(0);
  return r;
}

// Where a step's time goes (the profile section): each phase's time per step over traced
// steps after two warm-up steps, split into the linear layers' products (the trace's
// product track) and everything else the phase does.
struct PhaseRow {
  std::string precision;
  int64_t seq_len = 0;
  int steps = 0;
  double step_ms = 0;                     // wall clock per step
  std::map<std::string, PhaseTime> phases;  // totals over the traced steps
};

PhaseRow profile_step(const BenchOptions& o, const Config& base, int64_t L, Precision precision) {
  PhaseRow r;
  r.precision = precision_name(precision);
  r.seq_len = L;
  r.steps = std::max(3, o.repeats);
  Config c = config_at_length(base, L);
  c.train.precision = precision;
  Trainer trainer(make_run_plan(c, 1));
  for (int i = 0; i < 2; ++i) trainer.train_step();  // warm-up (allocations, primitives)
  Trace trace(TraceClock::now());
  Trace::activate(&trace);
  try {
    const auto t0 = Clock::now();
    for (int i = 0; i < r.steps; ++i) trainer.train_step();
    r.step_ms = 1e3 * seconds_since(t0) / r.steps;
  } catch (...) {
    Trace::activate(nullptr);
    throw;
  }
  Trace::activate(nullptr);
  r.phases = phase_times(trace.spans());
  return r;
}

// Per-rank attention pairs (data/context_shards.h) of each split over a stream's
// sequences: max/mean per sequence, averaged, and the worst sequence's.
struct BalanceRow {
  int64_t cp = 0;
  std::string split;
  double mean_max_over_mean = 0, worst_max_over_mean = 0;
};

std::vector<BalanceRow> cp_balance(const RunPlan& plan, const BenchOptions& o) {
  DocumentStream stream(plan);
  std::vector<PackedBatch> sequences;
  for (int64_t k = 0; k < o.balance_sequences; ++k) sequences.push_back(stream.sequence(k));
  std::vector<BalanceRow> rows;
  for (int64_t cp : o.cp_degrees)
    for (CpSplit split : {CpSplit::zigzag, CpSplit::contiguous}) {
      BalanceRow r{cp, cp_split_name(split), 0, 0};
      for (const PackedBatch& b : sequences) {
        double max_pairs = 0, sum_pairs = 0;
        for (int64_t rank = 0; rank < cp; ++rank) {
          const double p = double(shard_sequence(b, int(cp), int(rank), split, plan.cp_split_work).attention_pairs(plan.model.attention_mask));
          max_pairs = std::max(max_pairs, p);
          sum_pairs += p;
        }
        const double ratio = max_pairs / (sum_pairs / double(cp));
        r.mean_max_over_mean += ratio / double(sequences.size());
        r.worst_max_over_mean = std::max(r.worst_max_over_mean, ratio);
      }
      rows.push_back(r);
    }
  return rows;
}

// The CAD planner alone on the stream: dp ranks each holding one sequence per tick,
// attention pairs max/mean before and after planning, and bytes moved per layer.
struct CadBalanceRow {
  int64_t ranks = 0;
  double before = 0, after = 0, worst_after = 0, mib_per_layer = 0;
};

std::vector<CadBalanceRow> cad_balance(const RunPlan& plan, const BenchOptions& o) {
  DocumentStream stream(plan);
  const CadPlanOptions opt = cad_plan_options(plan.attention, plan.cad.tolerance, nullptr);
  std::vector<CadBalanceRow> rows;
  for (int64_t n : o.cad_ranks) {
    CadBalanceRow r{n, 0, 0, 0, 0};
    const int64_t ticks = std::max<int64_t>(1, o.balance_sequences / n);
    for (int64_t tick = 0; tick < ticks; ++tick) {
      std::vector<CadPiece> docs;
      for (int64_t rank = 0; rank < n; ++rank) {
        int32_t i = 0;  // whole documents (one piece per shared_question segment)
        for (const DocPiece& d : whole_sequence(stream.sequence(tick * n + rank)).pieces)
          docs.push_back({int32_t(rank), i++, d.row, d.len, d.pos, d.prefix_len, d.segment_pos});
      }
      const CadPlan plan = plan_core_attention(docs, int(n), opt);
      const auto ratio = [](const std::vector<int64_t>& v) {
        double mx = 0, sum = 0;
        for (int64_t x : v) mx = std::max(mx, double(x)), sum += double(x);
        return mx / (sum / double(v.size()));
      };
      r.before += ratio(plan.pairs_before) / double(ticks);
      r.after += ratio(plan.pairs_after) / double(ticks);
      r.worst_after = std::max(r.worst_after, ratio(plan.pairs_after));
      r.mib_per_layer += double(plan.bytes_moved) / 1048576.0 / double(ticks);
    }
    rows.push_back(r);
  }
  return rows;
}

bool wants(const BenchOptions& o, const char* section) {
  return std::find(o.sections.begin(), o.sections.end(), section) != o.sections.end();
}

}  // namespace

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
  AttentionParams causal, dca;  // the attention shapes measured
  std::vector<AttentionRow> attention;
  std::vector<StepRow> step;
  std::vector<BalanceRow> cp_balance;
  std::vector<CadBalanceRow> cad_balance;
  std::vector<GemmRow> gemm;
  int64_t gemm_tokens = 0;
  std::vector<PhaseRow> phases;
};

// Prints unless --json.
template <typename... Args>
void say(const BenchOptions& o, const char* fmt, Args... args) {
  if (!o.json) std::printf(fmt, args...), std::fflush(stdout);
}

// The attention section: causal and DCA, in each precision, on one document and on
// packed documents (with attention.mask other than causal: the masked kernel alone, its
// FLOP/s counting only the pairs the mask lets through). Each row is set against its precision's GEMM ceiling (bf16 on a CPU
// without bf16 instructions: the fp32 one, what it runs on).
void attention_section(const Config& config, const BenchOptions& o, BenchResults& res) {
  // bf16-fallback: bf16 the way a CPU without bf16 instructions runs it (rounded SGEMM)
  const std::vector<std::string>& precisions = o.attention_precisions;
  for (int64_t L : o.attention_lengths) {
    const PackedBatch one_doc = one_document(config, L), packed = first_sequence(config, L);
    for (const auto& [layout, cu] : {std::pair{"one-doc", &one_doc}, std::pair{"packed", &packed}}) {
      std::vector<double> causal_s(precisions.size(), 0.0);
      for (const AttentionParams* base : {&res.causal, &res.dca}) {
        if (base == &res.dca && !res.causal.mask.causal()) continue;  // a masked run: the mask's rows only
        for (size_t pi = 0; pi < precisions.size(); ++pi) {
          AttentionParams params = *base;
          const bool fallback = precisions[pi] == "bf16-fallback";
          params.precision = fallback ? Precision::bf16 : parse_precision(precisions[pi]);
          params.bf16_kernel = fallback ? Bf16Kernel::rounded : Bf16Kernel::automatic;
          AttentionRow r = bench_attention(o, params, layout, *cu);
          r.precision = precisions[pi];
          const bool bf16_kernel = params.precision == Precision::bf16 && !fallback && res.bf16_gemm > 0;
          r.ceiling = bf16_kernel ? res.bf16_gemm : res.fp32_gemm;
          if (base == &res.causal) causal_s[pi] = r.fwd_s + r.bwd_s;
          else r.time_vs_causal = (r.fwd_s + r.bwd_s) / causal_s[pi];
          res.attention.push_back(r);
          char ratio[16] = "";
          if (r.time_vs_causal > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", r.time_vs_causal);
          say(o, "  %-8s %-7s %-13s %7lld %5lld %9.1f %9.1f %9.1f %7.2f %9.1f %9s %5d\n", r.layout.c_str(),
              r.kernel.c_str(), r.precision.c_str(), (long long)r.tokens, (long long)r.documents,
              r.fwd_gflops, r.bwd_gflops, r.total_gflops, r.total_gflops / r.ceiling,
              1e3 * (r.fwd_s + r.bwd_s), ratio, r.runs);
        }
      }
    }
    attention_release_workspace();
  }
}

// The profile section's first part: per precision (--step-precisions), at the config's
// sequence length (data.seq_len: the length the run trains at; not --step-lengths, so
// that writing a CAD cost model with --profile-out stays cheap), each phase's ms per
// step, split into the linear products and the rest.
void phase_profile(const Config& config, const BenchOptions& o, BenchResults& res) {
  say(o, "\nprofile  where a step goes: ms per step of each phase (the spans trace.path records), split into the "
      "linear layers' products and everything else (norms, RoPE, SwiGLU, residual adds, rounding, copies)\n");
  std::vector<Precision> precisions;
  for (const std::string& name : o.step_precisions) precisions.push_back(parse_precision(name));
  if (precisions.empty()) precisions.push_back(config.train.precision);
  const int64_t L = config.data.seq_len;
  for (const Precision precision : precisions) {
    const PhaseRow r = profile_step(o, config, L, precision);
    res.phases.push_back(r);
    say(o, "  %s, %lld tokens, %d steps after 2 warm-up: %.1f ms per step\n", r.precision.c_str(), (long long)L,
        r.steps, r.step_ms);
    say(o, "    %-28s %9s %9s %9s\n", "phase", "ms/step", "products", "other");
    PhaseTime all;
    for (const auto& [name, t] : r.phases) {
      say(o, "    %-28s %9.2f %9.2f %9.2f\n", name.c_str(), 1e3 * t.seconds / r.steps,
          1e3 * t.product_seconds / r.steps, 1e3 * (t.seconds - t.product_seconds) / r.steps);
      if (name.rfind("recompute", 0) != 0) {  // (recompute spans enclose phases counted themselves)
        all.seconds += t.seconds;
        all.product_seconds += t.product_seconds;
      }
    }
    say(o, "    %-28s %9.2f %9.2f %9.2f   (untraced: %.2f)\n", "all phases", 1e3 * all.seconds / r.steps,
        1e3 * all.product_seconds / r.steps, 1e3 * (all.seconds - all.product_seconds) / r.steps,
        r.step_ms - 1e3 * all.seconds / r.steps);
  }
}

// The profile section: where a step goes, and the CAD cost model of this machine (and --profile-out).
void profile_section(const Config& config, const LlamaConfig& model, const BenchOptions& o, BenchResults& res) {
  phase_profile(config, o, res);
  const AttentionParams& pp = model.attention_kernel == AttentionKernel::dca ? res.dca : res.causal;
  const CadCostModel m = measure_cost_model(pp, res.cpu, blas_description(), omp_get_max_threads());
  say(o, "\nprofile  CAD cost model: attention fwd+bwd ns per pair, %s kernel, H %d, KV %d, hd %d "
      "(rows: query rows q; columns: key rows kv)\n", m.kernel.c_str(), m.heads, m.kv_heads, m.head_dim);
  say(o, "  %6s", "q \\ kv");
  for (int64_t kv : m.kv_grid) say(o, " %8lld", (long long)kv);
  say(o, "\n");
  for (size_t i = 0; i < m.q_grid.size(); ++i) {
    say(o, "  %6lld", (long long)m.q_grid[i]);
    for (size_t j = 0; j < m.kv_grid.size(); ++j) say(o, " %8.3f", 1e9 * m.seconds_per_pair[i * m.kv_grid.size() + j]);
    say(o, "\n");
  }
  if (!o.profile_out.empty()) {
    write_text_atomically(o.profile_out, cad_cost_toml(m));
    say(o, "  written to %s (attention.cad_profile)\n", o.profile_out.c_str());
  }
}

Json attention_rows_json(const BenchResults& res) {
  Json attention = Json::array();
  for (const AttentionRow& r : res.attention) {
    Json row = {{"layout", r.layout}, {"kernel", r.kernel}, {"precision", r.precision}, {"tokens", r.tokens},
                {"documents", r.documents}, {"pairs", r.pairs}, {"fwd_ms", 1e3 * r.fwd_s}, {"bwd_ms", 1e3 * r.bwd_s},
                {"fwd_gflops", r.fwd_gflops}, {"bwd_gflops", r.bwd_gflops}, {"fwd_bwd_gflops", r.total_gflops},
                {"fwd_bwd_vs_sgemm", r.total_gflops / res.sgemm}, {"fwd_bwd_vs_fp32_gemm", r.total_gflops / res.fp32_gemm},
                {"fwd_bwd_vs_fma", r.total_gflops / res.fma}, {"fwd_bwd_vs_ceiling", r.total_gflops / r.ceiling}};
    if (r.time_vs_causal > 0) row["time_vs_causal"] = r.time_vs_causal;
    row["runs"] = r.runs;
    attention.push_back(row);
  }
  return attention;
}

// The --json document.
void print_bench_json(const BenchResults& res) {
  Json j;
  j["machine"] = {{"cpu", res.cpu}, {"threads", res.threads}, {"openblas_threads", openblas_get_num_threads()},
                  {"openblas_core", openblas_get_corename()},
                  {"openblas_coretype_env", res.coretype ? Json(res.coretype) : Json(nullptr)},
                  {"blas_warning", res.blas_warning}};
  j["ceilings"] = {{"sgemm_n", res.sgemm_n}, {"sgemm_gflops", res.sgemm}, {"onednn_f32_gflops", res.onednn_f32},
                   {"fp32_gemm_gflops", res.fp32_gemm}, {"fp32_gemm_library", res.fp32_gemm_library}, {"fma_gflops", res.fma},
                   {"bf16_gemm_gflops", res.bf16_gemm}, {"bf16_dot_gflops", res.bf16_dot}};
  Json gemm = Json::array();
  for (const GemmRow& r : res.gemm)
    gemm.push_back({{"product", r.name}, {"m", r.M}, {"n", r.N}, {"k", r.K}, {"fp32_gflops", r.fp32},
                    {"fp32_onednn_gflops", r.fp32_onednn}, {"bf16_gflops", r.bf16},
                    {"bf16_kernel_gflops", r.bf16_kernel}, {"bf16_fallback_gflops", r.bf16_fallback},
                    {"lct_tiles_gflops", r.lct_tiles}});
  j["gemm"] = {{"tokens", res.gemm_tokens}, {"bf16_kernel", bf16_support().kernel},
               {"bf16_instructions", bf16_support().instructions}, {"rows", gemm}};
  const Json attention = attention_rows_json(res);
  j["attention"] = {{"dca_chunk_size", res.dca.dca.chunk_size}, {"dca_local_size", res.dca.dca.local_size},
                    {"heads", res.causal.num_heads}, {"kv_heads", res.causal.num_kv_heads},
                    {"head_dim", res.causal.head_dim}, {"rows", attention}};
  j["step"] = Json::array();
  for (const StepRow& r : res.step)
    j["step"].push_back({{"tokens", r.seq_len}, {"documents", r.documents}, {"precision", r.precision}, {"ms", r.ms},
                         {"tokens_per_s", r.tokens_per_s}, {"gflops", r.gflops},
                         {"gemm_ceiling_gflops", r.gemm_ceiling}, {"peak_ceiling_gflops", r.peak_ceiling},
                         {"mfu_vs_gemm", r.gflops / r.gemm_ceiling}, {"mfu_vs_peak", r.gflops / r.peak_ceiling},
                         {"peak_rss_bytes", r.peak_rss}, {"activation_bytes", r.activation_bytes}, {"runs", r.runs}});
  j["profile"] = Json::array();
  for (const PhaseRow& r : res.phases) {
    Json phases = Json::object();
    for (const auto& [name, t] : r.phases)
      phases[name] = {{"ms_per_step", 1e3 * t.seconds / r.steps}, {"product_ms_per_step", 1e3 * t.product_seconds / r.steps},
                      {"spans", t.count}};
    j["profile"].push_back({{"precision", r.precision}, {"tokens", r.seq_len}, {"steps", r.steps},
                            {"step_ms", r.step_ms}, {"phases", phases}});
  }
  j["cp_balance"] = Json::array();
  for (const BalanceRow& r : res.cp_balance)
    j["cp_balance"].push_back({{"cp", r.cp}, {"split", r.split}, {"mean_max_over_mean", r.mean_max_over_mean},
                               {"worst_max_over_mean", r.worst_max_over_mean}});
  j["cad_balance"] = Json::array();
  for (const CadBalanceRow& r : res.cad_balance)
    j["cad_balance"].push_back({{"ranks", r.ranks}, {"colocated_max_over_mean", r.before},
                                {"cad_max_over_mean", r.after}, {"cad_worst_max_over_mean", r.worst_after},
                                {"mib_moved_per_layer", r.mib_per_layer}});
  std::printf("%s\n", json_text(j).c_str());
}

// What the sections will allocate, before any of them runs: a training step of the
// config, and the attention kernel's Q, K, V, O, LSE, their gradients and its scratch at
// the longest --attention-lengths.
void check_bench_memory(const RunPlan& plan, const BenchOptions& o) {
  const AttentionParams& ap = plan.attention;
  if (wants(o, "step") || wants(o, "profile")) {
    const std::string no = check_memory_budget(estimate_rank_memory(plan), available_memory(1));
    if (!no.empty()) throw std::invalid_argument("lct bench --sections step: " + no);
  }
  if (wants(o, "attention") && !o.attention_lengths.empty()) {
    const int64_t L = *std::max_element(o.attention_lengths.begin(), o.attention_lengths.end());
    const double per_row = 4.0 * (2 * double(ap.num_heads) * ap.head_dim + 2 * double(ap.num_kv_heads) * ap.head_dim +
                                  ap.num_heads) * 2;  // fp32 values and gradients
    const double bytes = per_row * double(L) + double(attention_workspace_bytes(ap, L, omp_get_max_threads()));
    const std::string no = check_command_memory("lct bench --attention-lengths " + std::to_string(L), bytes,
                                                "Q, K, V, O, LSE, their gradients and the kernel's scratch",
                                                "give shorter --attention-lengths");
    if (!no.empty()) throw std::invalid_argument(no);
  }
}

// The same run's ceilings: the fp32 GEMM of both libraries (the faster is the fp32 ceiling)
// and the FMA loop, oneDNN's bf16 GEMM and the bf16 dot loop.
void ceilings_section(const BenchOptions& o, BenchResults& res) {
  double &sgemm = res.sgemm, &fma = res.fma;
  const int64_t sgemm_n = res.sgemm_n;
  sgemm = sgemm_gflops(o, sgemm_n);
  res.onednn_f32 = onednn_f32_gflops(o, sgemm_n);
  res.fp32_gemm = std::max(sgemm, res.onednn_f32);
  res.fp32_gemm_library = res.onednn_f32 > sgemm ? "oneDNN f32" : "OpenBLAS";
  fma = fma_peak_gflops(o);
  say(o, "\nceilings  fp32 GEMM %lld^3: OpenBLAS %.1f, oneDNN f32 %.1f GFLOP/s (the fp32 ceiling: %s) | FMA loop: "
      "%.1f GFLOP/s (best GEMM = %.0f%% of FMA)\n",
      (long long)sgemm_n, sgemm, res.onednn_f32, res.fp32_gemm_library, fma, 100.0 * res.fp32_gemm / fma);
  res.bf16_gemm = bf16_gemm_gflops(o, sgemm_n);
  res.bf16_dot = bf16_dot_peak_gflops(o);
  if (res.bf16_gemm > 0 || res.bf16_dot > 0)
    say(o, "          bf16 GEMM %lld^3 (oneDNN, bf16 operands): %.1f GFLOP/s | bf16 dot loop (VDPBF16PS): %.1f GFLOP/s\n",
        (long long)sgemm_n, res.bf16_gemm, res.bf16_dot);
  else
    say(o, "          bf16: this CPU has no bf16 instructions; bf16 runs as fp32 on rounded operands "
           "(its ceilings are the fp32 ones)\n");
}

// The linear layers' products in each library and precision.
void gemm_section(const LlamaConfig& model, int64_t tokens, const BenchOptions& o, BenchResults& res) {
  res.gemm_tokens = tokens;
  say(o, "\ngemm  the linear layers' products at %lld tokens (hidden %lld, mlp %lld) | GFLOP/s; bf16 runs on: %s\n",
      (long long)res.gemm_tokens, (long long)model.hidden_size, (long long)model.intermediate_size,
      bf16_support().kernel.c_str());
  say(o, "  fp32: OpenBLAS; fp32 dnnl: oneDNN f32 (train.fp32_gemm); bf16: as the model runs it (oneDNN, rounding "
         "included); bf16 kernel: oneDNN alone on bf16 operands; lct tiles: lct's AVX512-BF16 microkernel alone, "
         "B prepacked; bf16/fp32: bf16 over the faster fp32\n");
  say(o, "  %-20s %17s %9s %10s %9s %11s %9s %12s %9s\n", "product", "M x N x K", "fp32", "fp32 dnnl", "bf16",
      "bf16 kernel", "lct tiles", "bf16 fallback", "bf16/fp32");
  res.gemm = gemm_rows(o, model, res.gemm_tokens);
  const auto cell = [](double v) { return v > 0 ? std::to_string(int(v + 0.5)) : std::string("-"); };
  for (const GemmRow& r : res.gemm) {
    const std::string shape = std::to_string(r.M) + "x" + std::to_string(r.N) + "x" + std::to_string(r.K);
    say(o, "  %-20s %17s %9.1f %10.1f %9.1f %11s %9s %12.1f %9.2f\n", r.name.c_str(), shape.c_str(), r.fp32,
        r.fp32_onednn, r.bf16, cell(r.bf16_kernel).c_str(), cell(r.lct_tiles).c_str(), r.bf16_fallback,
        r.bf16 / std::max(r.fp32, r.fp32_onednn));
  }
  {
    const Fp32GemmRates rates = measure_fp32_gemm(model, res.gemm_tokens);
    say(o, "  train.fp32_gemm = auto here: %s (all the model's linear products: oneDNN f32 %.0f, OpenBLAS %.0f "
           "GFLOP/s; oneDNN needs a 10%% lead)\n", fp32_library_name(faster_fp32_library(rates)), rates.onednn, rates.openblas);
  }
}

// Whole training steps at each --step-lengths and precision, against the ceilings.
void step_section(const Config& config, const LlamaConfig& model, const BenchOptions& o, BenchResults& res) {
  const double fp32_gemm = res.fp32_gemm, fma = res.fma;
  say(o, "\nstep  %d layers, hidden %lld, heads %d/%d (hd %lld), mlp %lld, vocab %lld, %s "
      "documents | model GFLOP/s (src/train/flops.h), MFU vs the precision's GEMM ceiling and peak loop "
      "(fp32: the faster fp32 GEMM library, FMA; bf16: oneDNN bf16 GEMM, VDPBF16PS, or the fp32 ones where bf16 "
      "runs as fp32)\n",
      model.num_hidden_layers, (long long)model.hidden_size, model.num_attention_heads,
      model.num_key_value_heads, (long long)model.head_dim(), (long long)model.intermediate_size,
      (long long)model.vocab_size, doc_length_dist_name(config.data.doc_lengths));
  say(o, "  %-9s %7s %5s %9s %9s %9s %8s %8s %10s %10s %5s\n", "precision", "tokens", "docs", "ms", "tokens/s",
      "GFLOP/s", "xGEMM", "xPEAK", "peak MiB", "acts MiB", "runs");
  std::vector<Precision> precisions;
  for (const std::string& name : o.step_precisions) precisions.push_back(parse_precision(name));
  if (precisions.empty()) precisions.push_back(config.train.precision);
  for (const Precision precision : precisions)
    for (int64_t L : o.step_lengths) {
      StepRow r = bench_step(o, config, L, precision);
      const bool bf16_ceilings = precision == Precision::bf16 && res.bf16_gemm > 0 && res.bf16_dot > 0;
      r.gemm_ceiling = bf16_ceilings ? res.bf16_gemm : fp32_gemm;
      r.peak_ceiling = bf16_ceilings ? res.bf16_dot : fma;
      res.step.push_back(r);
      say(o, "  %-9s %7lld %5lld %9.1f %9.0f %9.1f %8.2f %8.2f %10.0f %10.0f %5d\n", r.precision.c_str(),
          (long long)r.seq_len, (long long)r.documents, r.ms, r.tokens_per_s, r.gflops, r.gflops / r.gemm_ceiling,
          r.gflops / r.peak_ceiling, double(r.peak_rss) / 1048576.0, double(r.activation_bytes) / 1048576.0,
          r.runs);
    }
}

void cp_balance_section(const RunPlan& plan, const BenchOptions& o, BenchResults& res) {
  say(o, "\ncp_balance  attention pairs per context-parallel rank, max/mean, over %lld sequences of "
      "%lld tokens (%s documents)\n",
      (long long)o.balance_sequences, (long long)plan.data.seq_len,
      doc_length_dist_name(plan.data.doc_lengths));
  say(o, "  %4s %-11s %10s %10s\n", "cp", "split", "mean", "worst");
  res.cp_balance = cp_balance(plan, o);
  for (const BalanceRow& r : res.cp_balance)
    say(o, "  %4lld %-11s %10.3f %10.3f\n", (long long)r.cp, r.split.c_str(), r.mean_max_over_mean,
        r.worst_max_over_mean);
}

void cad_balance_section(const RunPlan& plan, const BenchOptions& o, BenchResults& res) {
  say(o, "\ncad_balance  CAD planner on the stream (one %lld-token sequence per rank and tick, %s "
      "documents, tolerance %.3g): attention pairs max/mean per rank\n",
      (long long)plan.data.seq_len, doc_length_dist_name(plan.data.doc_lengths), plan.cad.tolerance);
  say(o, "  %6s %10s %10s %12s %24s\n", "ranks", "colocated", "cad", "cad worst", "MiB moved/layer, all");
  res.cad_balance = cad_balance(plan, o);
  for (const CadBalanceRow& r : res.cad_balance)
    say(o, "  %6lld %10.3f %10.3f %12.3f %24.2f\n", (long long)r.ranks, r.before, r.after,
        r.worst_after, r.mib_per_layer);
}

int run_bench(const Config& config, const BenchOptions& o) {
  const RunPlan plan = make_run_plan(config, 1);  // one process: the config's model and kernel
  const LlamaConfig& model = plan.model;
  AttentionParams ap = plan.attention;
  check_bench_memory(plan, o);
  // DCA beside causal on the same shapes: [attention] dca_* keys of the config, with a
  // RoPE table covering positions 0..C
  const RopeTable dca_rope =
      build_rope_table(model.dca_chunk_size + 1, model.head_dim(), model.rope_theta);
  AttentionParams dca_ap = ap;
  dca_ap.kernel = AttentionKernel::dca;
  dca_ap.mask = {};  // DCA is causal only
  dca_ap.dca.rope_cos = dca_rope.cos.data();
  dca_ap.dca.rope_sin = dca_rope.sin.data();
  dca_ap.dca.rope_positions = dca_rope.max_positions;
  ap.kernel = AttentionKernel::causal;

  BenchResults res;
  res.threads = omp_get_max_threads();
  res.coretype = std::getenv("OPENBLAS_CORETYPE");
  res.cpu = cpu_model_name();
  res.blas_warning = blas_capability_warning();
  res.causal = ap;
  res.dca = dca_ap;
  const int threads = res.threads;
  const std::string& cpu = res.cpu;
  const std::string& blas_warning = res.blas_warning;

  say(o, "lct bench | %s | %d threads (OpenMP %d, OpenBLAS %d) | %s\n", cpu.c_str(), threads,
      omp_get_max_threads(), openblas_get_num_threads(), blas_description().c_str());
  if (!blas_warning.empty() && !o.json) log_warn(blas_warning);
  say(o, "each figure: total work over total wall-clock time of up to %d runs (first run a warm-up; %.0f s budget each)\n", o.repeats, o.budget_seconds);

  if (wants(o, "ceilings") || wants(o, "attention") || wants(o, "step")) ceilings_section(o, res);

  if (wants(o, "gemm")) gemm_section(model, config.data.seq_len, o, res);

  if (wants(o, "attention")) {
    say(o, "\nattention  H %d, KV %d, hd %d; dca: C %d, w %d (chunks of %d) | GFLOP/s, "
        "FlashAttention convention (fwd 4*H*hd*pairs, bwd 2.5x)\n",
        ap.num_heads, ap.num_kv_heads, ap.head_dim, dca_ap.dca.chunk_size, dca_ap.dca.local_size,
        dca_ap.dca.chunk_len());
    say(o, "  xceil: fwd+bwd over the precision's GEMM ceiling (fp32 and bf16-fallback: the faster fp32 GEMM; bf16: bf16 GEMM)\n");
    say(o, "  %-8s %-7s %-13s %7s %5s %9s %9s %9s %7s %9s %9s %5s\n", "layout", "kernel", "precision", "tokens",
        "docs", "fwd", "bwd", "fwd+bwd", "xceil", "f+b ms", "t/causal", "runs");
    attention_section(config, o, res);
  }

  if (wants(o, "step")) step_section(config, model, o, res);

  if (wants(o, "cp_balance")) cp_balance_section(plan, o, res);

  if (wants(o, "profile")) profile_section(config, model, o, res);

  if (wants(o, "cad_balance")) cad_balance_section(plan, o, res);

  if (o.json) print_bench_json(res);
  return 0;
}

}  // namespace lct

namespace lct {

Command add_bench_command(CLI::App& lct) {
  struct Options {
    ConfigOptions config;
    BenchOptions bench;
  };
  auto o = std::make_shared<Options>();
  // sequence lengths: token rows and positions are int32 inside the kernels, and 16M
  // tokens already need tens of GiB
  const CLI::Range length(int64_t(1), int64_t(1) << 24);
  CLI::App* bench = lct.add_subcommand(
      "bench", "throughput of attention and training steps against same-run GEMM and FMA ceilings");
  BenchOptions& b = o->bench;
  bench->add_option("--attention-precisions", b.attention_precisions,
                    "precisions of the attention kernel (bf16-fallback: bf16 as CPUs without bf16 instructions run it)")
      ->check(CLI::IsMember({"fp32", "bf16", "bf16-fallback"}))
      ->delimiter(',');
  bench->add_option("--attention-lengths", b.attention_lengths, "sequence lengths for the attention kernel")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(length)
      ->capture_default_str();
  bench->add_option("--step-lengths", b.step_lengths, "sequence lengths for full training steps")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(length)
      ->capture_default_str();
  bench->add_option("--step-precisions", b.step_precisions,
                    "precisions of the step section (default: the config's train.precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->delimiter(',');
  bench->add_option("--sections", b.sections, "what to measure")
      ->delimiter(',')
      ->check(CLI::IsMember({"ceilings", "gemm", "attention", "step", "cp_balance", "cad_balance", "profile"}))
      ->capture_default_str();
  bench->add_option("--cp-degrees", b.cp_degrees, "context-parallel degrees for the cp_balance section")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(1), int64_t(1024)))
      ->capture_default_str();
  bench->add_option("--cad-ranks", b.cad_ranks, "data-parallel rank counts for the cad_balance section")
      ->delimiter(',')
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  bench->add_option("--balance-sequences", b.balance_sequences,
                    "sequences of the stream for the cp_balance and cad_balance sections")
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(1), int64_t(100000)))
      ->capture_default_str();
  bench->add_option("--profile-out", b.profile_out,
                    "profile section: write the CAD cost model here (for attention.cad_profile)");
  bench->add_option("--repeats", b.repeats, "timed runs per figure, after a discarded warm-up run (the figure: their total work over total time)")
      ->check(whole_integer())
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench->add_option("--budget", b.budget_seconds, "seconds after which a figure stops repeating (at least one run)")
      ->check(positive())
      ->capture_default_str();
  bench->add_flag("--json", b.json, "print one JSON document instead of tables");
  add_config_options(bench, o->config);
  return {bench, [o] {
            const Config config = resolve_config(o->config);
            // outputs are checked before the work, not after it (a folder, a device)
            if (!o->bench.profile_out.empty()) require_writable_output(o->bench.profile_out, "--profile-out");
            configure_threads(config.train.threads);
            return run_bench(config, o->bench);
          }};
}

}  // namespace lct
