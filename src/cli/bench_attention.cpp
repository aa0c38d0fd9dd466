// lct bench: the attention section, the core attention kernel alone.
#include <fmt/format.h>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "attention/core_attention.h"
#include "compute/gemm.h"
#include "data/rng.h"
#include "src/cli/bench_common.h"
#include "src/train/run_objects.h"

namespace lct::bench {
namespace {

// The documents of one document of L tokens (no tokens), with its prefix or segments.
PackedBatch one_document(const Config& config, int64_t L) {
  PackedBatch b;
  b.cu_seqlens = {0, int32_t(L)};
  doc_structure_of(config.data, config.model.attention_mask.kind).append_piece(b, L, 0, L);
  return b;
}

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

}  // namespace

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
          const std::string ratio = r.time_vs_causal > 0 ? fmt::format("{:.2f}x", r.time_vs_causal) : "";
          say(o, "  {:<8} {:<7} {:<13} {:7} {:5} {:>9.1f} {:>9.1f} {:>9.1f} {:>7.2f} {:>9.1f} {:>9} {:5}\n", r.layout,
              r.kernel, r.precision, r.tokens, r.documents, r.fwd_gflops, r.bwd_gflops, r.total_gflops,
              r.total_gflops / r.ceiling, 1e3 * (r.fwd_s + r.bwd_s), ratio, r.runs);
        }
      }
    }
    attention_release_workspace();
  }
}

}  // namespace lct::bench
