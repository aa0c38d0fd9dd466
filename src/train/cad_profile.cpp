#include "src/train/cad_profile.h"

#include <omp.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "data/files.h"
#include "model/ops.h"
#include "model/rope.h"
#include "src/util/log.h"
#include "src/train/machine_cache.h"
#include "src/util/machine.h"

namespace lct {

namespace {

// What a cost model measured here and now would record (its times are not filled in).
CaCostModel this_setup(const LlamaConfig& m) {
  CaCostModel s;
  s.cpu = cpu_model_name();
  s.blas = blas_description();
  s.threads = omp_get_max_threads();
  s.kernel = attention_kernel_name(m.attention_kernel);
  s.heads = m.num_attention_heads;
  s.kv_heads = m.num_key_value_heads;
  s.head_dim = int(m.head_dim());
  return s;
}

std::string cache_file(const CaCostModel& s) {
  char name[192];
  std::snprintf(name, sizeof name, "cad_profile-%s-h%d-kv%d-d%d-t%d-%016zx.txt", s.kernel.c_str(),
                s.heads, s.kv_heads, s.head_dim, s.threads,
                std::hash<std::string>{}(s.cpu + "|" + s.blas));
  return name;
}

CaCostModel measure(const LlamaConfig& m, const CaCostModel& setup) {
  AttentionParams p = attention_params_of(m);
  // time per attention pair, measured on causal tasks whatever the model's mask (the
  // cache file is per kernel and shape, not per mask)
  p.mask = {};
  // DCA's keys rotate by remapped positions, all below the chunk size
  const RopeTable rope = build_rope_table(m.dca_chunk_size + 1, m.head_dim(), m.rope_theta);
  p.dca.rope_cos = rope.cos.data();
  p.dca.rope_sin = rope.sin.data();
  p.dca.rope_positions = rope.max_positions;
  return measure_cost_model(p, setup.cpu, setup.blas, setup.threads);
}

std::optional<CaCostModel> parse_quietly(const std::string& text, const std::string& origin) {
  try {
    return CaCostModel::parse(text, origin);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

CadCostChoice from_model(CaCostModel m, std::string description) {
  CadCostChoice c;
  c.text = m.to_text();
  c.model = std::move(m);
  c.description = std::move(description);
  return c;
}

CadCostChoice from_file(const std::string& path, const LlamaConfig& m) {
  std::string text;
  try {  // a FIFO or device is refused, never read
    text = read_regular_file(path, "attention.cad_profile");
  } catch (const std::runtime_error& e) {
    const bool missing = !std::filesystem::exists(path);
    throw ConfigError(missing ? "attention.cad_profile: cannot open '" + path + "'" : std::string(e.what()));
  }
  CaCostModel p;
  try {
    p = CaCostModel::parse(text, path);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("attention.cad_profile: ") + e.what());
  }
  const CaCostModel here = this_setup(m);
  if (p.heads != here.heads || p.kv_heads != here.kv_heads || p.head_dim != here.head_dim ||
      p.kernel != here.kernel)
    throw ConfigError("attention.cad_profile '" + path + "' was measured for " + p.kernel +
                      " attention with heads " + std::to_string(p.heads) + "/" +
                      std::to_string(p.kv_heads) + ", head dim " + std::to_string(p.head_dim) +
                      ", but this model runs " + here.kernel + " with heads " +
                      std::to_string(here.heads) + "/" + std::to_string(here.kv_heads) +
                      ", head dim " + std::to_string(here.head_dim) +
                      "; measure it again (lct bench --sections profile)");
  if (p.blas != here.blas || p.threads != here.threads)
    log_warn("attention.cad_profile '" + path + "' was measured with " + p.blas + ", " +
             std::to_string(p.threads) + " threads on " + p.cpu + "; this run uses " + here.blas +
             ", " + std::to_string(here.threads) + " threads: its times may not fit this machine");
  return from_model(std::move(p), "measured kernel time (" + path + ")");
}

}  // namespace

CadCostChoice resolve_cad_cost(const CadProfile& setting, const LlamaConfig& m) {
  if (setting.kind == CadProfile::Kind::pairs) return {std::nullopt, "", "attention pairs"};
  if (setting.kind == CadProfile::Kind::file) return from_file(setting.path, m);
  const CaCostModel setup = this_setup(m);
  const CachedMeasurement c = measured_once(
      cache_file(setup),
      [&](const std::string& text) {
        const std::optional<CaCostModel> cached = parse_quietly(text, "the cached CAD cost model");
        return cached && cached->same_setup(setup);
      },
      [&] { return measure(m, setup).to_text(); });
  return from_model(CaCostModel::parse(c.text, "the CAD cost model"), "measured kernel time (" + c.where + ")");
}

CadCostChoice cad_cost_from_text(const std::string& text, const std::string& description) {
  if (text.empty()) return {std::nullopt, "", description};
  return from_model(CaCostModel::parse(text, "the first rank's CAD cost model"), description);
}

}  // namespace lct
