#include "src/io/hf_model.h"
#include "src/io/params_io.h"
#include "src/util/printable.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include "data/files.h"
#include "src/config/config_text.h"
#include "src/config/sections.h"
#include "src/io/json_file.h"
#include "src/io/output_files.h"
#include "src/util/json.h"

namespace lct {
namespace fs = std::filesystem;

namespace {

// A JSON value as the text a config key parses ("true", "12", "1e-05", "yarn").
std::string value_text(const Json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    return fmt::format("{:.17g}", v.get<double>());
  }
  if (v.is_string()) return v.get<std::string>();
  return v.dump();  // an object, list or null: the key's parser refuses it by name
}

const char* kLctNote =
    "lct's attention settings: transformers ignores this object (and the lct.* keys of the safetensors "
    "metadata) and runs the model with causal attention over every key";

}  // namespace

bool is_hf_model_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "config.json", ec);
  return fs::path(path).extension() == ".safetensors";
}

std::vector<std::pair<std::string, std::string>> model_inputs(const std::string& what, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> in = {{what, path}};
  std::error_code ec;
  if (!path.empty() && fs::path(path).extension() == ".safetensors" && !fs::is_directory(path, ec)) {
    const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
    in.emplace_back(what + "'s config.json", (dir / "config.json").string());
  }
  return in;
}

HfModelFiles find_hf_model_files(const std::string& path) {
  std::error_code ec;
  HfModelFiles files;
  if (!fs::exists(path, ec)) throw std::runtime_error(path + ": no such file or folder");
  const bool folder = fs::is_directory(path, ec);
  const fs::path dir = folder ? fs::path(path) : fs::path(path).parent_path().empty() ? fs::path(".")
                                                                                       : fs::path(path).parent_path();
  files.config = (dir / "config.json").string();
  if (const fs::file_status st = fs::status(files.config, ec); fs::exists(st) && !fs::is_regular_file(st))
    throw std::runtime_error(files.config + ": not a regular file (" +
                             (fs::is_directory(st) ? "a folder" : fs::is_fifo(st) ? "a FIFO" : "a device or socket") +
                             "): config.json must be the model's JSON file");
  if (!fs::is_regular_file(files.config, ec))
    throw std::runtime_error(path + ": no config.json " + (folder ? "in the folder" : "beside the file") +
                             " (a Hugging Face model folder holds config.json and model.safetensors)");
  if (!folder) {
    files.weights = {path};
    return files;
  }
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    files.weights = {single.string()};
    return files;
  }
  if (!fs::exists(index, ec))
    throw std::runtime_error(path + ": neither model.safetensors nor model.safetensors.index.json in the folder "
                                    "(lct reads safetensors weights, not pytorch_model.bin)");
  files.index = index.string();
  const Json j = read_json_file(files.index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw std::runtime_error(files.index + ": no weight_map object");
  std::set<std::string> seen;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw std::runtime_error(files.index + ": weight_map." + printable(it.key()) + " is not a file name");
    const std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      throw std::runtime_error(files.index + ": weight_map." + printable(it.key()) + " = '" + printable(shard) +
                               "' is not a file name in the folder");
    if (seen.insert(shard).second) files.weights.push_back((dir / shard).string());
    files.weight_map[it.key()] = (dir / shard).string();
  }
  if (files.weights.empty()) throw std::runtime_error(files.index + ": the weight_map lists no tensors");
  return files;
}

int64_t hf_max_position_embeddings(const std::string& path) {
  const std::string config = find_hf_model_files(path).config;
  const Json j = read_json_file(config);
  if (!j.is_object() || !j.contains("max_position_embeddings") || j["max_position_embeddings"].is_null()) return 0;
  const Json& v = j["max_position_embeddings"];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    throw std::runtime_error(config + ": max_position_embeddings: " + v.dump() + " is not a positive integer");
  return v.get<int64_t>();
}

namespace {

// config.json read the way transformers reads it: each part of LlamaConfig from its own
// fields, each field with the JSON type transformers builds the model from, and every
// field lct would apply otherwise than transformers refused in one line naming it.
class HfConfigReader {
 public:
  HfConfigReader(const Json& j, const std::string& path) : j_(j), path_(path) {}
  LlamaConfig read() {
    if (!j_.is_object()) throw std::runtime_error(path_ + ": not a JSON object");
    refuse_other_architectures();
    read_shape();
    read_rope();
    read_head_dim();
    read_lct_attention();
    if (const std::string err = c_.validate(); !err.empty()) throw std::runtime_error(path_ + ": " + err);
    return c_;
  }

 private:
  std::runtime_error fail(const std::string& key, const std::string& why) const {
    return std::runtime_error(path_ + ": " + key + ": " + why);
  }
  // a string where a number or a boolean belongs ("64", "false") would build another
  // model there, or none
  void set(const std::string& json_key, const std::string& lct_key, const Json& v, JsonKind kind) {
    if (const char* want = json_kind_mismatch(v, kind)) throw fail(json_key, v.dump() + " is not " + want);
    try {
      set_model_key(c_, lct_key, value_text(v));
    } catch (const ConfigError& e) {
      throw fail(json_key, e.what());
    }
  }

  void refuse_other_architectures() const {
    if (j_.contains("model_type") && j_["model_type"] != "llama")
      throw fail("model_type", j_["model_type"].dump() + ", lct reads Llama models (model_type \"llama\")");
    if (j_.contains("architectures")) {
      bool llama = false;
      if (j_["architectures"].is_array())
        for (const Json& a : j_["architectures"]) llama = llama || a == "LlamaForCausalLM";
      if (!llama) throw fail("architectures", j_["architectures"].dump() + " does not list LlamaForCausalLM");
    }
    for (const char* moe : {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok"})
      if (j_.contains(moe) && !j_[moe].is_null())
        throw fail(moe, "a mixture of experts; lct's Llama has one MLP per layer");
    if (j_.contains("hidden_act") && j_["hidden_act"] != "silu")
      throw fail("hidden_act", j_["hidden_act"].dump() + ", lct's MLP is SwiGLU (silu)");
    for (const char* bias : {"attention_bias", "mlp_bias"})
      if (j_.contains(bias) && j_[bias] != false) throw fail(bias, j_[bias].dump() + ", lct's Llama has no biases");
    if (j_.contains("pretraining_tp") && j_["pretraining_tp"] != 1)
      throw fail("pretraining_tp", j_["pretraining_tp"].dump() + ": split projections are not supported");
  }

  void read_shape() {
    for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
      if (!j_.contains(key)) throw fail(key, "missing");
      set(key, std::string("model.") + key, j_[key], JsonKind::integer);
    }
    set("num_key_value_heads", "model.num_key_value_heads",
        j_.contains("num_key_value_heads") && !j_["num_key_value_heads"].is_null() ? j_["num_key_value_heads"]
                                                                                   : j_["num_attention_heads"],
        JsonKind::integer);
    set("rms_norm_eps", "model.rms_norm_eps", j_.value("rms_norm_eps", Json(1e-6)), JsonKind::number);  // LlamaConfig's
    set("tie_word_embeddings", "model.tie_word_embeddings", j_.value("tie_word_embeddings", Json(false)),
        JsonKind::boolean);
  }

  // RoPE: rope_parameters (newer transformers) or rope_theta + rope_scaling
  void read_rope() {
    Json rope = Json::object();
    std::string rope_key = "rope_scaling";
    double theta = 10000.0;
    if (j_.contains("rope_theta")) {
      if (!j_["rope_theta"].is_number()) throw fail("rope_theta", "not a number");
      theta = j_["rope_theta"].get<double>();
    }
    if (j_.contains("rope_parameters") && !j_["rope_parameters"].is_null()) {
      rope_key = "rope_parameters";
      if (!j_["rope_parameters"].is_object()) throw fail(rope_key, "not an object");
      rope = j_["rope_parameters"];
      if (rope.contains("rope_theta")) {
        if (!rope["rope_theta"].is_number()) throw fail("rope_parameters.rope_theta", "not a number");
        theta = rope["rope_theta"].get<double>();
      }
    } else if (j_.contains("rope_scaling") && !j_["rope_scaling"].is_null()) {
      if (!j_["rope_scaling"].is_object()) throw fail(rope_key, "not an object");
      rope = j_["rope_scaling"];
    }
    set("rope_theta", "model.rope_theta", Json(theta), JsonKind::number);
    std::string type = "default";
    // rope_type, else the older type (transformers reads rope_type first)
    for (const char* k : {"type", "rope_type"})
      if (rope.contains(k)) {
        if (!rope[k].is_string()) throw fail(rope_key + "." + k, rope[k].dump() + " is not a string");
        type = rope[k].get<std::string>();
      }
    const std::map<std::string, std::set<std::string>> allowed = {
        {"default", {}},
        {"linear", {"factor"}},
        {"dynamic", {"factor", "original_max_position_embeddings"}},
        {"yarn", {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate"}}};
    const auto kind = allowed.find(type);
    if (kind == allowed.end())
      throw fail(rope_key, "rope type '" + type + "' (lct applies default, linear, dynamic and yarn)");
    for (auto it = rope.begin(); it != rope.end(); ++it) {
      const std::string& k = it.key();
      if (k == "rope_type" || k == "type" || k == "rope_theta" || kind->second.count(k)) continue;
      throw fail(rope_key + "." + k, "not applied by lct's " + type + " RoPE");
    }
    if (type != "default") read_rope_scaling(rope, rope_key, type);
  }

  void read_rope_scaling(const Json& rope, const std::string& rope_key, const std::string& type) {
    set(rope_key + ".rope_type", "model.rope_scaling", Json(type), JsonKind::string);
    if (!rope.contains("factor")) throw fail(rope_key + ".factor", "missing");
    set(rope_key + ".factor", "model.rope_scaling_factor", rope["factor"], JsonKind::number);
    // the trained length: original_max_position_embeddings, else max_position_embeddings
    // (as transformers reads it for dynamic and yarn)
    const Json original = rope.contains("original_max_position_embeddings") ? rope["original_max_position_embeddings"]
                          : j_.contains("max_position_embeddings")          ? j_["max_position_embeddings"]
                                                                            : Json(0);
    if (type != "linear")
      set(rope.contains("original_max_position_embeddings") ? rope_key + ".original_max_position_embeddings"
                                                            : "max_position_embeddings",
          "model.rope_original_length", original, JsonKind::integer);
    if (type != "yarn") return;
    const auto check = [&](const char* k, double want) {
      if (rope.contains(k) && !(rope[k].is_number() && std::fabs(rope[k].get<double>() - want) <= 1e-9 * want))
        throw fail(rope_key + "." + k, rope[k].dump() + ", lct's yarn applies " + value_text(Json(want)));
    };
    check("beta_fast", 32.0);
    check("beta_slow", 1.0);
    check("attention_factor", 0.1 * std::log(c_.rope_scaling_factor) + 1.0);
    if (rope.contains("truncate") && rope["truncate"] != true)
      throw fail(rope_key + ".truncate", rope["truncate"].dump() + ", lct's yarn rounds the ramp's ends");
  }

  void read_head_dim() const {
    if (j_.contains("head_dim") && !j_["head_dim"].is_null() &&
        !(j_["head_dim"].is_number_integer() && j_["head_dim"].get<int64_t>() == c_.hidden_size / c_.num_attention_heads))
      throw fail("head_dim", j_["head_dim"].dump() + ", lct's head_dim is hidden_size / num_attention_heads = " +
                                 std::to_string(c_.hidden_size / std::max(1, c_.num_attention_heads)));
  }

  // lct's own attention settings (an lct export), else causal
  void read_lct_attention() {
    if (!j_.contains("lct")) return;
    const Json& l = j_["lct"];
    if (!l.is_object()) throw fail("lct", "not an object");
    struct Key {
      const char* lct_key;
      JsonKind kind;
    };
    const std::map<std::string, Key> keys = {
        {"attention_kernel", {"attention.kernel", JsonKind::string}},
        {"dca_chunk_size", {"attention.dca_chunk_size", JsonKind::integer}},
        {"dca_local_size", {"attention.dca_local_size", JsonKind::integer}},
        {"dca_mscale", {"attention.dca_mscale", JsonKind::number}},
        {"dca_mscale_original_length", {"attention.dca_mscale_original_length", JsonKind::integer}},
        {"attention_mask", {"attention.mask", JsonKind::string}},
        {"attention_window", {"attention.window", JsonKind::integer}},
        {"attention_sink_tokens", {"attention.sink_tokens", JsonKind::integer}},
        {"attention_block_size", {"attention.block_size", JsonKind::integer}},
        {"attention_top_blocks", {"attention.top_blocks", JsonKind::integer}},
        {"logit_scaling", {"attention.logit_scaling", JsonKind::string}},
        {"logit_scaling_length", {"attention.logit_scaling_length", JsonKind::integer}}};
    for (auto it = l.begin(); it != l.end(); ++it) {
      if (it.key() == "note" || it.key() == "format") continue;
      const auto k = keys.find(it.key());
      if (k == keys.end()) throw fail("lct." + it.key(), "not an lct attention setting");
      set("lct." + it.key(), k->second.lct_key, it.value(), k->second.kind);
    }
  }

  const Json& j_;
  const std::string& path_;
  LlamaConfig c_;
};

}  // namespace

LlamaConfig read_hf_config(const std::string& path) {
  const Json j = read_json_file(path);
  return HfConfigReader(j, path).read();
}

namespace {

// Every tensor of `table` located in the weight files, once each, with its shape; no
// tensor lct's model lacks (a tied model's lm_head aside).
struct LocatedTensors {
  std::vector<std::unique_ptr<SafetensorsFile>> open;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> where;
};

LocatedTensors locate_tensors(const HfModelFiles& files, const LlamaConfig& config, const TensorTable& table) {
  LocatedTensors t;
  for (const std::string& w : files.weights) {
    t.open.push_back(std::make_unique<SafetensorsFile>(w));
    for (const SafetensorsEntry& e : t.open.back()->entries()) {
      if (const auto it = t.where.find(e.name); it != t.where.end())
        throw std::runtime_error(w + ": tensor '" + printable(e.name) + "' is also in " + it->second.first->path());
      t.where[e.name] = {t.open.back().get(), &e};
    }
  }
  // a sharded folder's index names each tensor's file: it must be where the index says
  for (const auto& [name, at] : t.where)
    if (!files.weight_map.empty()) {
      const auto listed = files.weight_map.find(name);
      if (listed == files.weight_map.end())
        throw std::runtime_error(at.first->path() + ": tensor '" + printable(name) + "' is not in " + files.index);
      if (listed->second != at.first->path())
        throw std::runtime_error(files.index + ": tensor '" + printable(name) + "' is listed in " + printable(listed->second) +
                                 " but is in " + at.first->path());
    }
  for (const auto& [name, file] : files.weight_map)
    if (!t.where.count(name)) throw std::runtime_error(files.index + ": tensor '" + printable(name) + "' is in no shard");
  std::set<std::string> wanted;
  for (const TensorSpec& s : table.specs()) wanted.insert(s.name);
  for (const auto& [name, at] : t.where) {
    if (wanted.count(name)) continue;
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // older exports keep RoPE's table; lct computes it
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // checked when read
    const std::string why = name.ends_with(".bias") ? "a bias (lct's Llama has none)"
                                                    : "not a tensor of lct's Llama with this config.json";
    throw std::runtime_error(at.first->path() + ": tensor '" + printable(name) + "': " + why);
  }
  for (const TensorSpec& s : table.specs()) {
    const auto it = t.where.find(s.name);
    if (it == t.where.end())
      throw std::runtime_error((files.index.empty() ? files.weights[0] : files.index) + ": no tensor '" + s.name + "'");
    const SafetensorsEntry& e = *it->second.second;
    if (e.shape != s.shape) {
      std::string got, want;
      for (const int64_t d : e.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      for (const int64_t d : s.shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      throw std::runtime_error(it->second.first->path() + ": tensor '" + s.name + "' has shape [" + got +
                               "], config.json's model needs [" + want + "]");
    }
  }
  return t;
}

}  // namespace

void check_hf_params(const HfModelFiles& files, const LlamaConfig& config, const TensorTable& table) {
  locate_tensors(files, config, table);
}

void read_hf_params(const HfModelFiles& files, const LlamaConfig& config, const TensorTable& table, float* arena) {
  const LocatedTensors located = locate_tensors(files, config, table);
  const auto& where = located.where;
  for (const TensorSpec& s : table.specs()) {
    const auto& [file, entry] = where.at(s.name);
    file->read_f32(*entry, arena + s.offset);
  }
  refuse_non_finite_params(table, arena, files.weights.size() == 1 ? files.weights[0] : files.index);
  // a tied model's lm_head, when a file carries it, must be the embedding
  if (const auto it = where.find("lm_head.weight"); it != where.end() && config.tie_word_embeddings) {
    const TensorSpec& emb = table.get("model.embed_tokens.weight");
    const SafetensorsEntry& e = *it->second.second;
    std::vector<float> head(size_t(e.numel()));
    if (e.shape != emb.shape) throw std::runtime_error(it->second.first->path() + ": lm_head.weight's shape is not the embedding's");
    it->second.first->read_f32(e, head.data());
    if (std::memcmp(head.data(), arena + emb.offset, head.size() * sizeof(float)) != 0)
      throw std::runtime_error(it->second.first->path() +
                               ": lm_head.weight differs from model.embed_tokens.weight but config.json ties them");
  }
}

std::string hf_config_json(const LlamaConfig& c, int64_t trained_length, SafetensorsDtype dtype) {
  // max_position_embeddings: the length the model runs at; with dynamic scaling the
  // trained one (transformers scales beyond it), with linear and yarn the scaled one
  int64_t max_positions = trained_length;
  Json scaling = nullptr;
  Json parameters = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  if (c.rope_scaling != RopeScaling::none) {
    const std::string type = rope_scaling_name(c.rope_scaling);
    scaling = {{"rope_type", type}, {"type", type}, {"factor", c.rope_scaling_factor}};
    parameters = {{"rope_type", type}, {"rope_theta", c.rope_theta}, {"factor", c.rope_scaling_factor}};
    if (c.rope_scaling != RopeScaling::linear) {
      scaling["original_max_position_embeddings"] = c.rope_original_length;
      parameters["original_max_position_embeddings"] = c.rope_original_length;
    }
    if (c.rope_scaling == RopeScaling::dynamic) max_positions = c.rope_original_length;
    if (c.rope_scaling == RopeScaling::yarn || (c.rope_scaling == RopeScaling::linear && c.rope_original_length > 0))
      max_positions = int64_t(std::llround(double(c.rope_original_length) * c.rope_scaling_factor));
  }
  Json lct = {{"note", kLctNote}, {"attention_kernel", attention_kernel_name(c.attention_kernel)}};
  if (c.attention_kernel == AttentionKernel::dca) {
    lct["dca_chunk_size"] = c.dca_chunk_size;
    lct["dca_local_size"] = c.dca_local_size;
    lct["dca_mscale"] = c.dca_mscale;
    lct["dca_mscale_original_length"] = c.dca_mscale_original_length;
  }
  if (c.logit_scaling.on()) {
    lct["logit_scaling"] = logit_scaling_name(c.logit_scaling.kind);
    lct["logit_scaling_length"] = c.logit_scaling.length;
  }
  lct["attention_mask"] = mask_kind_name(c.attention_mask.kind);
  if (c.attention_mask.kind != MaskKind::causal) {
    lct["attention_window"] = c.attention_mask.window;
    lct["attention_sink_tokens"] = c.attention_mask.sink_tokens;
    lct["attention_block_size"] = c.attention_mask.block_size;
    if (c.attention_mask.kind == MaskKind::block_sparse) lct["attention_top_blocks"] = c.attention_mask.top_blocks;
  }
  const Json j = {{"architectures", {"LlamaForCausalLM"}},
                  {"model_type", "llama"},
                  {"vocab_size", c.vocab_size},
                  {"hidden_size", c.hidden_size},
                  {"intermediate_size", c.intermediate_size},
                  {"num_hidden_layers", c.num_hidden_layers},
                  {"num_attention_heads", c.num_attention_heads},
                  {"num_key_value_heads", c.num_key_value_heads},
                  {"head_dim", c.head_dim()},
                  {"hidden_act", "silu"},
                  {"rms_norm_eps", c.rms_norm_eps},
                  {"rope_theta", c.rope_theta},
                  {"rope_scaling", scaling},
                  {"rope_parameters", parameters},
                  {"max_position_embeddings", max_positions},
                  {"tie_word_embeddings", c.tie_word_embeddings},
                  {"attention_bias", false},
                  {"mlp_bias", false},
                  {"attention_dropout", 0.0},
                  {"torch_dtype", dtype == SafetensorsDtype::bf16 ? "bfloat16" : "float32"},
                  {"lct", lct}};
  return j.dump(2) + "\n";
}

std::vector<std::string> write_hf_model(const std::string& out_dir, const LlamaConfig& config, const TensorTable& table,
                                        const float* arena, int64_t trained_length, SafetensorsDtype dtype) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir))
    throw std::runtime_error("--out " + out_dir + ": cannot make the folder" + (ec ? " (" + ec.message() + ")" : ""));
  std::vector<SafetensorsTensor> tensors;
  for (const TensorSpec& s : table.specs()) tensors.push_back({s.name, s.shape, arena + s.offset});
  // the metadata: transformers requires format "pt"; lct's attention settings beside it
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const Json lct = Json::parse(hf_config_json(config, trained_length, dtype))["lct"];
  for (auto it = lct.begin(); it != lct.end(); ++it)
    metadata["lct." + it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  const std::string weights = (fs::path(out_dir) / "model.safetensors").string();
  const std::string cfg = (fs::path(out_dir) / "config.json").string();
  const std::string bytes = safetensors_bytes(tensors, dtype, metadata), text = hf_config_json(config, trained_length, dtype);
  // both written whole before either replaces anything (an existing export of another
  // model stays whole until the two renames)
  for (const std::string& target : {weights, cfg}) require_replaceable_output(target, "--out");
  TempFile weights_file(weights), config_file(cfg);
  weights_file.write_all_and_close(bytes.data(), bytes.size());
  config_file.write_all_and_close(text.data(), text.size());
  // renamed under one block of the signals, so an interrupted export never pairs a new
  // model.safetensors with an old config.json
  TempFile::commit_all({&weights_file, &config_file});
  std::vector<std::string> out = {fmt::format("{}: {} tensors, {}, {:.1f} MiB", weights, tensors.size(),
                                              safetensors_dtype_name(dtype), double(bytes.size()) / 1048576.0), cfg + ": LlamaForCausalLM, " + describe_attention(config)};
  if (config.attention_kernel != AttentionKernel::causal || config.attention_mask.kind != MaskKind::causal ||
      config.logit_scaling.on())
    out.push_back("note: transformers ignores lct's attention settings (config.json \"lct\", the lct.* metadata): "
                  "it runs this model with causal attention over every key and unscaled logits, not " +
                  describe_attention(config));
  return out;
}

}  // namespace lct
