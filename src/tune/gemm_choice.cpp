#include "src/tune/gemm_choice.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <sstream>
#include <vector>

#include "src/config/config_text.h"
#include "src/config/sections.h"
#include "src/tune/machine_cache.h"
#include "src/util/machine.h"

namespace lct {

namespace {

struct Product {
  bool ta, tb;
  int64_t M, N, K;
};

// The linear layers' products at T tokens as the model runs them: forward x W^T,
// backward dx = d W and dW = d^T x, for the fused Q/K/V, the output projection, the
// fused gate/up and the down projection (model/decoder_layer.h).
std::vector<Product> model_products(const LlamaConfig& m, int64_t T) {
  const int64_t C = m.hidden_size, I = m.intermediate_size, q = m.num_attention_heads * m.head_dim();
  const int64_t qkv = q + 2 * m.num_key_value_heads * m.head_dim();
  std::vector<Product> p;
  for (auto [in, out] : {std::pair{C, qkv}, std::pair{q, C}, std::pair{C, 2 * I}, std::pair{I, C}}) {
    p.push_back({false, true, T, out, in});   // forward
    p.push_back({false, false, T, in, out});  // dx
    p.push_back({true, false, out, in, T});   // dW
  }
  return p;
}

// The ways a product can run here.
enum class Way { openblas, onednn_f32, bf16_native, bf16_rounded };

// Seconds for one pass over the products run `way`, best of `repeats` after a warm-up
// (bf16: operands stored in bf16, as the model stores them; bf16_rounded on `fp32`).
double seconds_per_pass(const std::vector<Product>& products, Way way, int repeats,
                        Fp32Library fp32 = Fp32Library::openblas) {
  int64_t most = 0;
  for (const Product& p : products) most = std::max({most, p.M * p.K, p.K * p.N, p.M * p.N});
  const bool bf16 = way == Way::bf16_native || way == Way::bf16_rounded;
  std::vector<float> a(bf16 ? 0 : size_t(most), 0.01f), b(bf16 ? 0 : size_t(most), 0.02f), c(size_t(most), 0.0f);
  std::vector<uint16_t> a16(bf16 ? size_t(most) : 0, bf16_bits(0.01f)), b16(bf16 ? size_t(most) : 0, bf16_bits(0.02f));
  const auto pass = [&] {
    for (const Product& p : products) {
      const int64_t lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
      switch (way) {
        case Way::onednn_f32:
          gemm_fp32_onednn(p.ta, p.tb, p.M, p.N, p.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), p.N);
          break;
        case Way::openblas:
          cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, int(p.M),
                      int(p.N), int(p.K), 1.0f, a.data(), int(lda), b.data(), int(ldb), 0.0f, c.data(), int(p.N));
          break;
        case Way::bf16_native:
        case Way::bf16_rounded:
          gemm({Precision::bf16, fp32, way == Way::bf16_native ? Bf16Kernel::native : Bf16Kernel::rounded}, p.ta, p.tb,
               p.M, p.N, p.K, 1.0f, a16.data(), lda, b16.data(), ldb, 0.0f, c.data(), p.N);
          break;
      }
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

std::string gemm_cache_file(const LlamaConfig& m, int64_t T) {
  // (kv names the fused products' shapes: a measurement of the unfused ones is not reused)
  return fmt::format("fp32_gemm-c{}-i{}-q{}-kv{}-t{}-th{}-{:016x}.toml", m.hidden_size, m.intermediate_size,
                     m.num_attention_heads * m.head_dim(), m.num_key_value_heads * m.head_dim(), T,
                     omp_get_max_threads(), std::hash<std::string>{}(cpu_model_name() + "|" + blas_description()));
}

std::string describe(Fp32Library library, const Fp32GemmRates& r, int64_t T, const std::string& where) {
  return fmt::format("{} (the model's linear products at {} tokens: oneDNN f32 {:.0f} GFLOP/s, OpenBLAS {:.0f} GFLOP/s; {})",
                     library == Fp32Library::onednn ? "oneDNN f32 matmul" : "OpenBLAS SGEMM", T, r.onednn, r.openblas,
                     where);
}

// A cached choice's text (TOML): its name under `name` and two measured rates (GFLOP/s)
// under `a` and `b`, for the fp32 library and the bf16 kernel alike.
struct ChoiceKeys {
  const char* what;  // (in a message) which cache
  const char* name;
  const char* a;
  const char* b;
};
constexpr ChoiceKeys kFp32Keys{"the fp32 GEMM cache", "library", "openblas_gflops", "onednn_gflops"};
constexpr ChoiceKeys kBf16Keys{"the bf16 kernel cache", "kernel", "native_gflops", "rounded_gflops"};

std::string choice_text(const ChoiceKeys& k, const char* name, double a, double b) {
  const toml::table t{{k.name, name}, {k.a, a}, {k.b, b}};
  std::ostringstream out;
  out << t << "\n";
  return out.str();
}

// The choice (E's name, not automatic) and its two rates; false when the text is not
// that (then it is measured again): rates are measured times, so a cache holding nan,
// inf or <= 0 was not written by lct.
template <typename E>
bool parse_choice(const std::string& text, const ChoiceKeys& k, E (*parse)(const std::string&), E& choice, double& a,
                  double& b) {
  try {
    check_toml_nesting(text, k.what);
    const toml::table t = toml::parse(text, std::string_view(k.what));
    const std::optional<std::string> name = t[k.name].value<std::string>();
    const std::optional<double> ra = t[k.a].value<double>(), rb = t[k.b].value<double>();
    if (!name || !ra || !rb || !std::isfinite(*ra) || !std::isfinite(*rb) || *ra <= 0 || *rb <= 0) return false;
    choice = parse(*name);  // throws on an unknown name
    a = *ra, b = *rb;
    return choice != E::automatic;
  } catch (const std::exception&) {  // toml::parse_error, a ConfigError, an unknown name
    return false;
  }
}

// A cache text `Parse` reads (what measured_once and cached_text keep or measure again)
template <typename Choice, typename Rates, bool (*Parse)(const std::string&, Choice&, Rates&)>
bool usable(const std::string& text) {
  Choice choice;
  Rates rates;
  return Parse(text, choice, rates);
}

bool parse_fp32_cache(const std::string& text, Fp32Library& library, Fp32GemmRates& r) {
  return parse_choice(text, kFp32Keys, parse_fp32_library, library, r.openblas, r.onednn);
}
constexpr auto usable_fp32_cache = usable<Fp32Library, Fp32GemmRates, parse_fp32_cache>;

}  // namespace

Fp32GemmRates measure_fp32_gemm(const LlamaConfig& m, int64_t tokens) {
  const std::vector<Product> products = model_products(m, tokens);
  double flops = 0;
  for (const Product& p : products) flops += 2.0 * double(p.M) * double(p.N) * double(p.K);
  // alternate the libraries so that a slow moment of the machine hits both
  double blas = 1e300, dnn = 1e300;
  for (int round = 0; round < 2; ++round) {
    blas = std::min(blas, seconds_per_pass(products, Way::openblas, 2));
    dnn = std::min(dnn, seconds_per_pass(products, Way::onednn_f32, 2));
  }
  return {flops / blas / 1e9, flops / dnn / 1e9};
}

Fp32Library faster_fp32_library(const Fp32GemmRates& r) {
  return r.onednn >= 1.1 * r.openblas ? Fp32Library::onednn : Fp32Library::openblas;
}

Fp32GemmChoice resolve_fp32_gemm(Fp32Library setting, const LlamaConfig& m, int64_t tokens) {
  if (setting == Fp32Library::openblas) return {setting, "OpenBLAS SGEMM (train.fp32_gemm = openblas)"};
  if (setting == Fp32Library::onednn) return {setting, "oneDNN f32 matmul (train.fp32_gemm = onednn)"};
  const CachedMeasurement c = measured_once(
      gemm_cache_file(m, tokens), usable_fp32_cache,
      [&] {
        const Fp32GemmRates r = measure_fp32_gemm(m, tokens);
        return choice_text(kFp32Keys, fp32_library_name(faster_fp32_library(r)), r.openblas, r.onednn);
      });
  Fp32Library library = Fp32Library::openblas;
  Fp32GemmRates r;
  if (!parse_fp32_cache(c.text, library, r)) throw std::logic_error("train.fp32_gemm: unreadable measurement text");
  return {library, describe(library, r, tokens, c.where)};
}

Bf16KernelRates measure_bf16_kernels(const LlamaConfig& m, int64_t tokens, Fp32Library fp32) {
  const std::vector<Product> products = model_products(m, tokens);
  double flops = 0;
  for (const Product& p : products) flops += 2.0 * double(p.M) * double(p.N) * double(p.K);
  double native = 1e300, rounded = 1e300;
  // alternating, as above, and three rounds: the two are often within 10 % of each
  // other, and a cached choice stays. The rounded kernel runs on `fp32`.
  for (int round = 0; round < 3; ++round) {
    if (bf16_support().instructions) native = std::min(native, seconds_per_pass(products, Way::bf16_native, 3));
    rounded = std::min(rounded, seconds_per_pass(products, Way::bf16_rounded, 3, fp32));
  }
  return {bf16_support().instructions ? flops / native / 1e9 : 0.0, flops / rounded / 1e9};
}

Bf16Kernel faster_bf16_kernel(const Bf16KernelRates& r) {
  return r.native > 0 && r.rounded < 1.1 * r.native ? Bf16Kernel::native : Bf16Kernel::rounded;
}

namespace {
std::string bf16_cache_file(const LlamaConfig& m, int64_t T, Fp32Library fp32) {
  return fmt::format("bf16_kernel-c{}-i{}-q{}-kv{}-t{}-th{}-{}-{:016x}.toml", m.hidden_size, m.intermediate_size,
                     m.num_attention_heads * m.head_dim(), m.num_key_value_heads * m.head_dim(), T,
                     omp_get_max_threads(), fp32_library_name(fp32),
                     std::hash<std::string>{}(cpu_model_name() + "|" + blas_description()));
}

// "native: oneDNN bf16 matmul (...), attention in ... (the model's bf16 products at T
// tokens: native N GFLOP/s, rounded R; why)"
std::string describe(Bf16Kernel kernel, const Bf16KernelRates& r, int64_t T, const std::string& why) {
  const std::string what = kernel == Bf16Kernel::native
                               ? "native: " + bf16_support().kernel + ", attention in " + bf16_support().attention
                               : std::string("rounded: operands rounded to bf16 and multiplied on the fp32 library, "
                                             "attention in fp32 tiles of rounded values");
  if (r.rounded <= 0) return what + " (" + why + ")";
  return what + fmt::format(" (the model's bf16 products at {} tokens: native {:.0f} GFLOP/s, rounded {:.0f}; ", T,
                            r.native, r.rounded) +
         why + ")";
}

bool parse_bf16_cache(const std::string& text, Bf16Kernel& kernel, Bf16KernelRates& r) {
  return parse_choice(text, kBf16Keys, parse_bf16_kernel, kernel, r.native, r.rounded);
}
constexpr auto usable_bf16_cache = usable<Bf16Kernel, Bf16KernelRates, parse_bf16_cache>;
}  // namespace

Bf16KernelChoice resolve_bf16_kernel(Bf16Kernel setting, const LlamaConfig& m, int64_t tokens, Fp32Library fp32) {
  if (setting == Bf16Kernel::native) {
    if (!bf16_support().instructions)
      throw ConfigError("train.bf16_kernel = native: this CPU has no bf16 instructions (AVX512-BF16 or AMX-BF16); "
                        "use auto or rounded");
    return {setting, describe(setting, {}, tokens, "train.bf16_kernel = native")};
  }
  if (setting == Bf16Kernel::rounded) return {setting, describe(setting, {}, tokens, "train.bf16_kernel = rounded")};
  if (!bf16_support().instructions)
    return {Bf16Kernel::rounded, describe(Bf16Kernel::rounded, {}, tokens, "this CPU has no bf16 instructions")};
  const CachedMeasurement c = measured_once(
      bf16_cache_file(m, tokens, fp32), usable_bf16_cache,
      [&] {
        const Bf16KernelRates r = measure_bf16_kernels(m, tokens, fp32);
        return choice_text(kBf16Keys, bf16_kernel_name(faster_bf16_kernel(r)), r.native, r.rounded);
      });
  Bf16Kernel kernel = Bf16Kernel::native;
  Bf16KernelRates r;
  if (!parse_bf16_cache(c.text, kernel, r)) throw std::logic_error("train.bf16_kernel: unreadable measurement text");
  return {kernel, describe(kernel, r, tokens, c.where)};
}

std::optional<Bf16Kernel> known_bf16_kernel(Bf16Kernel setting, Fp32Library fp32_setting, const LlamaConfig& m,
                                            int64_t tokens) {
  if (setting != Bf16Kernel::automatic) return setting;
  if (!bf16_support().instructions) return Bf16Kernel::rounded;
  Fp32Library fp32 = fp32_setting;
  Fp32GemmRates fr;
  if (fp32 == Fp32Library::automatic) {
    const std::optional<std::string> text = cached_text(gemm_cache_file(m, tokens), usable_fp32_cache);
    if (!text) return std::nullopt;
    parse_fp32_cache(*text, fp32, fr);
  }
  const std::optional<std::string> text = cached_text(bf16_cache_file(m, tokens, fp32), usable_bf16_cache);
  if (!text) return std::nullopt;
  Bf16Kernel kernel = Bf16Kernel::rounded;
  Bf16KernelRates r;
  parse_bf16_cache(*text, kernel, r);
  return kernel;
}

}  // namespace lct
