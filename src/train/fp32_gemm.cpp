#include "src/train/fp32_gemm.h"

#include <toml++/toml.h>

#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <sstream>
#include <vector>

#include "src/config/config_text.h"
#include "src/train/machine_cache.h"
#include "src/util/machine.h"

namespace lct {

namespace {

struct Product {
  bool ta, tb;
  int64_t M, N, K;
};

// The linear layers' products at T tokens: forward x W^T, backward dx = d W and
// dW = d^T x, for the attention projections and the MLP.
std::vector<Product> model_products(const LlamaConfig& m, int64_t T) {
  const int64_t C = m.hidden_size, I = m.intermediate_size, q = m.num_attention_heads * m.head_dim();
  std::vector<Product> p;
  for (auto [in, out] : {std::pair{C, q}, std::pair{C, I}, std::pair{I, C}}) {
    p.push_back({false, true, T, out, in});   // forward
    p.push_back({false, false, T, in, out});  // dx
    p.push_back({true, false, out, in, T});   // dW
  }
  return p;
}

// Seconds for one pass over the products in `library`, best of `repeats` after a warm-up.
double seconds_per_pass(const std::vector<Product>& products, bool onednn, int repeats) {
  int64_t most = 0;
  for (const Product& p : products) most = std::max({most, p.M * p.K, p.K * p.N, p.M * p.N});
  std::vector<float> a(size_t(most), 0.01f), b(size_t(most), 0.02f), c(size_t(most), 0.0f);
  const auto pass = [&] {
    for (const Product& p : products) {
      const int64_t lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
      if (onednn)
        gemm_fp32_onednn(p.ta, p.tb, p.M, p.N, p.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), p.N);
      else
        cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, int(p.M),
                    int(p.N), int(p.K), 1.0f, a.data(), int(lda), b.data(), int(ldb), 0.0f, c.data(), int(p.N));
    }
  };
  pass();  // warm-up (and oneDNN's primitive creation)
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::string cache_file(const LlamaConfig& m, int64_t T) {
  char name[160];
  std::snprintf(name, sizeof name, "fp32_gemm-c%lld-i%lld-q%lld-t%lld-th%d-%016zx.toml", (long long)m.hidden_size,
                (long long)m.intermediate_size, (long long)(m.num_attention_heads * m.head_dim()), (long long)T,
                omp_get_max_threads(), std::hash<std::string>{}(cpu_model_name() + "|" + blas_description()));
  return name;
}

std::string describe(Fp32Library library, const Fp32GemmRates& r, int64_t T, const std::string& where) {
  char text[256];
  std::snprintf(text, sizeof text, "%s (the model's linear products at %lld tokens: oneDNN f32 %.0f GFLOP/s, "
                "OpenBLAS %.0f GFLOP/s; %s)", library == Fp32Library::onednn ? "oneDNN f32 matmul" : "OpenBLAS SGEMM",
                (long long)T, r.onednn, r.openblas, where.c_str());
  return text;
}

}  // namespace

Fp32GemmRates measure_fp32_gemm(const LlamaConfig& m, int64_t tokens) {
  const std::vector<Product> products = model_products(m, tokens);
  double flops = 0;
  for (const Product& p : products) flops += 2.0 * double(p.M) * double(p.N) * double(p.K);
  // alternate the libraries so that a slow moment of the machine hits both
  double blas = 1e300, dnn = 1e300;
  for (int round = 0; round < 2; ++round) {
    blas = std::min(blas, seconds_per_pass(products, false, 2));
    dnn = std::min(dnn, seconds_per_pass(products, true, 2));
  }
  return {flops / blas / 1e9, flops / dnn / 1e9};
}

Fp32Library faster_fp32_library(const Fp32GemmRates& r) {
  return r.onednn >= 1.1 * r.openblas ? Fp32Library::onednn : Fp32Library::openblas;
}

Fp32GemmChoice resolve_fp32_gemm(Fp32Library setting, const LlamaConfig& m, int64_t tokens) {
  if (setting == Fp32Library::openblas) return {setting, "OpenBLAS SGEMM (train.fp32_gemm = openblas)"};
  if (setting == Fp32Library::onednn) return {setting, "oneDNN f32 matmul (train.fp32_gemm = onednn)"};
  // the cache's text (TOML): library = "openblas" | "onednn", openblas_gflops, onednn_gflops
  const auto parse = [](const std::string& text, Fp32Library& library, Fp32GemmRates& r) {
    try {
      check_toml_nesting(text, "the fp32 GEMM cache");
      const toml::table t = toml::parse(text, std::string("the fp32 GEMM cache"));
      const std::optional<std::string> name = t["library"].value<std::string>();
      const std::optional<double> blas = t["openblas_gflops"].value<double>(), dnn = t["onednn_gflops"].value<double>();
      if (!name || !blas || !dnn) return false;
      library = parse_fp32_library(*name);
      r = {*blas, *dnn};
    } catch (const std::exception&) {  // toml::parse_error, an unknown library, a ConfigError
      return false;
    }
    return library != Fp32Library::automatic;
  };
  const CachedMeasurement c = measured_once(
      cache_file(m, tokens),
      [&](const std::string& text) {
        Fp32Library library;
        Fp32GemmRates r;
        return parse(text, library, r);
      },
      [&] {
        const Fp32GemmRates r = measure_fp32_gemm(m, tokens);
        const toml::table t{{"library", fp32_library_name(faster_fp32_library(r))},
                            {"openblas_gflops", r.openblas},
                            {"onednn_gflops", r.onednn}};
        std::ostringstream out;
        out << t << "\n";
        return out.str();
      });
  Fp32Library library = Fp32Library::openblas;
  Fp32GemmRates r;
  if (!parse(c.text, library, r)) throw std::logic_error("train.fp32_gemm: unreadable measurement text");
  return {library, describe(library, r, tokens, c.where)};
}

}  // namespace lct
