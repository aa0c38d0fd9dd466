// lct bench --json: everything one run measured as one JSON document.
#include <cblas.h>

#include "compute/gemm.h"
#include "src/cli/bench_common.h"
#include "src/util/json.h"
#include "src/util/log.h"

namespace lct::bench {
namespace {

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

}  // namespace

// The --json document.
void print_bench_json(const BenchResults& res) {
  Json j;
  j["machine"] = {{"cpu", res.cpu}, {"threads", res.threads}, {"openblas_threads", openblas_get_num_threads()},
                  {"openblas_core", openblas_get_corename()},
                  {"openblas_coretype_env", res.coretype ? Json(res.coretype) : Json(nullptr)},
                  {"blas_warning", res.blas_warning}};
  j["ceilings"] = {{"sgemm_n", res.sgemm_n}, {"sgemm_gflops", res.sgemm}, {"onednn_f32_gflops", res.onednn_f32},
                   {"fp32_gemm_gflops", res.fp32_gemm}, {"fp32_gemm_library", res.fp32_gemm_library}, {"fma_gflops", res.fma},
                   {"bf16_gemm_gflops", res.bf16_gemm}, {"bf16_dot_gflops", res.bf16_dot},
                   {"stream_copy_gbps", res.stream_copy}, {"stream_triad_gbps", res.stream_triad},
                   {"stream_array_bytes", res.stream_array_bytes},
                   {"from", res.ceilings_from.empty() ? Json(nullptr) : Json(res.ceilings_from)}};
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
    const StepSplit sp = step_split(r);
    const Json split = {{"products_ms", sp.products_ms}, {"products_gflops", sp.products_gflops},
                        {"attention_ms", sp.attention_ms}, {"attention_gflops", sp.attention_gflops},
                        {"other_ms", sp.other_ms}, {"other_ns_per_token", sp.other_ns_per_token},
                        {"untraced_ms", sp.untraced_ms}, {"tokens", r.tokens},
                        {"product_flops", r.product_flops}, {"attention_flops", r.attention_flops}};
    j["profile"].push_back({{"precision", r.precision}, {"tokens", r.seq_len}, {"steps", r.steps},
                            {"step_ms", r.step_ms}, {"phases", phases}, {"split", split}});
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
  print_out("{}\n", json_text(j));
}

}  // namespace lct::bench
