#include "src/tune/cad_profile.h"

#include "src/util/printable.h"

#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "data/files.h"
#include "model/ops.h"
#include "model/rope.h"
#include "src/config/config_text.h"
#include "src/util/log.h"
#include "src/tune/machine_cache.h"
#include "src/util/machine.h"

namespace lct {

std::string cad_cost_toml(const CadCostModel& m) {
  toml::table t{{"cpu", m.cpu},         {"blas", m.blas},         {"threads", m.threads},
                {"kernel", m.kernel},   {"heads", m.heads},       {"kv_heads", m.kv_heads},
                {"head_dim", m.head_dim}};
  toml::array q, kv, rows;
  for (int64_t v : m.q_grid) q.push_back(v);
  for (int64_t v : m.kv_grid) kv.push_back(v);
  for (size_t i = 0; i < m.q_grid.size(); ++i) {
    toml::array row;
    for (size_t j = 0; j < m.kv_grid.size(); ++j) row.push_back(m.seconds_per_pair[i * m.kv_grid.size() + j]);
    rows.push_back(std::move(row));
  }
  t.insert("q_grid", std::move(q));
  t.insert("kv_grid", std::move(kv));
  t.insert("seconds_per_pair", std::move(rows));
  std::ostringstream out;
  out << t << "\n";
  return out.str();
}

CadCostModel parse_cad_cost_toml(const std::string& text, const std::string& origin) {
  const auto fail = [&](const std::string& why) -> CadCostModel {
    throw std::invalid_argument("CAD profile '" + origin + "': " + why);
  };
  toml::table t;
  try {
    check_toml_nesting(text, origin);
    t = toml::parse(text, origin);
  } catch (const std::exception& e) {
    return fail(std::string("not a TOML cost model (") + e.what() + "); measure it again with lct bench --sections profile");
  }
  CadCostModel m;
  const auto text_of = [&](const char* key, std::string& v) {
    if (!t.contains(key)) return;
    if (!t[key].is_string()) fail(std::string(key) + " must be a string");
    v = t[key].value<std::string>().value();
  };
  const auto int_of = [&](const char* key, int& v) {
    if (!t.contains(key)) return;
    const std::optional<int64_t> x = t[key].value<int64_t>();
    if (!t[key].is_integer() || !x || *x < 0 || *x > (int64_t(1) << 30)) fail(std::string(key) + " must be an integer");
    v = int(*x);
  };
  const auto numbers = [&](const toml::node* node, const std::string& key, auto push) {
    const toml::array* a = node ? node->as_array() : nullptr;
    if (!a) fail(key + " must be an array of numbers");
    for (const toml::node& e : *a) {
      if (!e.is_number()) fail(key + " must be an array of numbers");
      push(e);
    }
  };
  for (auto&& [key, value] : t) {
    const std::string k(key.str());
    if (k != "cpu" && k != "blas" && k != "kernel" && k != "threads" && k != "heads" && k != "kv_heads" &&
        k != "head_dim" && k != "q_grid" && k != "kv_grid" && k != "seconds_per_pair")
      fail("unknown key '" + printable(k) + "'");
  }
  text_of("cpu", m.cpu);
  text_of("blas", m.blas);
  text_of("kernel", m.kernel);
  int_of("threads", m.threads);
  int_of("heads", m.heads);
  int_of("kv_heads", m.kv_heads);
  int_of("head_dim", m.head_dim);
  for (const char* key : {"q_grid", "kv_grid"}) {
    std::vector<int64_t>& g = std::string(key) == "q_grid" ? m.q_grid : m.kv_grid;
    if (t.contains(key))
      numbers(t.get(key), key, [&](const toml::node& e) {
        if (!e.is_integer()) fail(std::string(key) + " must hold integers");
        g.push_back(e.value<int64_t>().value());
      });
  }
  if (t.contains("seconds_per_pair")) {
    const toml::array* rows = t.get("seconds_per_pair")->as_array();
    if (!rows) fail("seconds_per_pair must be an array of rows");
    for (const toml::node& row : *rows) {
      size_t n = 0;
      numbers(&row, "seconds_per_pair", [&](const toml::node& e) {
        m.seconds_per_pair.push_back(e.value<double>().value());
        ++n;
      });
      if (n != m.kv_grid.size()) fail("a seconds_per_pair row needs one value per kv_grid entry");
    }
  }
  if (const std::string p = m.problem(); !p.empty()) fail(p);
  return m;
}

namespace {

// What a cost model measured here and now would record (its times are not filled in).
CadCostModel this_setup(const LlamaConfig& m) {
  CadCostModel s;
  s.cpu = cpu_model_name();
  s.blas = blas_description();
  s.threads = omp_get_max_threads();
  s.kernel = attention_kernel_name(m.attention_kernel);
  s.heads = m.num_attention_heads;
  s.kv_heads = m.num_key_value_heads;
  s.head_dim = int(m.head_dim());
  return s;
}

std::string cad_cache_file(const CadCostModel& s) {
  return fmt::format("cad_profile-{}-h{}-kv{}-d{}-t{}-{:016x}.toml", s.kernel, s.heads, s.kv_heads, s.head_dim,
                     s.threads, std::hash<std::string>{}(s.cpu + "|" + s.blas));
}

CadCostModel measure(const LlamaConfig& m, const CadCostModel& setup, int64_t longest) {
  AttentionParams p = attention_params_of(m);
  // time per attention pair, measured on causal tasks whatever the model's mask (the
  // cache file is per kernel and shape, not per mask)
  p.mask = {};
  // DCA's keys rotate by remapped positions, all below the chunk size
  const RopeTable rope = build_rope_table(m.dca_chunk_size + 1, m.head_dim(), m.rope_theta);
  p.dca.rope_cos = rope.cos.data();
  p.dca.rope_sin = rope.sin.data();
  p.dca.rope_positions = rope.max_positions;
  return measure_cost_model(p, setup.cpu, setup.blas, setup.threads, longest);
}

std::optional<CadCostModel> parse_quietly(const std::string& text, const std::string& origin) {
  try {
    return parse_cad_cost_toml(text, origin);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

CadCostChoice from_model(CadCostModel m, std::string description) {
  CadCostChoice c;
  c.text = cad_cost_toml(m);
  c.model = std::move(m);
  c.description = std::move(description);
  return c;
}

CadCostChoice from_file(const std::string& path, const LlamaConfig& m, int64_t longest) {
  std::string text;
  try {  // a FIFO or device is refused, never read
    text = read_document_file(path, "attention.cad_profile");
  } catch (const std::runtime_error& e) {
    const bool missing = !std::filesystem::exists(path);
    throw ConfigError(missing ? "attention.cad_profile: cannot open '" + path + "'" : std::string(e.what()));
  }
  CadCostModel p;
  try {
    p = parse_cad_cost_toml(text, path);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("attention.cad_profile: ") + e.what());
  }
  const CadCostModel here = this_setup(m);
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
  if (!p.reaches(longest))
    log_warn("attention.cad_profile '" + path + "' was measured for tasks of up to " +
             std::to_string(std::min(p.q_grid.back(), p.kv_grid.back())) + " rows; this run's documents reach " +
             std::to_string(longest) + " rows, which take the grid's last per-pair time");
  return from_model(std::move(p), "measured kernel time (" + path + ")");
}

}  // namespace

CadCostChoice resolve_cad_cost(const CadProfile& setting, const LlamaConfig& m, int64_t longest) {
  if (setting.kind == CadProfile::Kind::pairs) return {std::nullopt, "", "attention pairs"};
  if (setting.kind == CadProfile::Kind::file) return from_file(setting.path, m, longest);
  const CadCostModel setup = this_setup(m);
  const CachedMeasurement c = measured_once(
      cad_cache_file(setup),
      [&](const std::string& text) {
        const std::optional<CadCostModel> cached = parse_quietly(text, "the cached CAD cost model");
        return cached && cached->same_setup(setup) && cached->reaches(longest);
      },
      [&] { return cad_cost_toml(measure(m, setup, longest)); });
  return from_model(parse_cad_cost_toml(c.text, "the CAD cost model"), "measured kernel time (" + c.where + ")");
}

CadCostChoice cad_cost_from_text(const std::string& text, const std::string& description) {
  if (text.empty()) return {std::nullopt, "", description};
  return from_model(parse_cad_cost_toml(text, "the first rank's CAD cost model"), description);
}

}  // namespace lct
