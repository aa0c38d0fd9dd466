#include "src/io/params_io.h"

#include <cmath>

#include "src/config/config_text.h"
#include "src/config/sections.h"

#include <fmt/format.h>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace lct {

namespace {
std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
}  // namespace

void write_model_attrs(H5File& f, const LlamaConfig& c) {
  f.set_attr("/model", "vocab_size", int64_t(c.vocab_size));
  f.set_attr("/model", "hidden_size", int64_t(c.hidden_size));
  f.set_attr("/model", "intermediate_size", int64_t(c.intermediate_size));
  f.set_attr("/model", "num_hidden_layers", int64_t(c.num_hidden_layers));
  f.set_attr("/model", "num_attention_heads", int64_t(c.num_attention_heads));
  f.set_attr("/model", "num_key_value_heads", int64_t(c.num_key_value_heads));
  f.set_attr("/model", "head_dim", int64_t(c.head_dim()));
  f.set_attr("/model", "rope_theta", c.rope_theta);
  if (c.rope_scaling != RopeScaling::none) {
    f.set_attr("/model", "rope_scaling", std::string(rope_scaling_name(c.rope_scaling)));
    f.set_attr("/model", "rope_scaling_factor", c.rope_scaling_factor);
    f.set_attr("/model", "rope_original_length", c.rope_original_length);
  }
  f.set_attr("/model", "rms_norm_eps", c.rms_norm_eps);
  f.set_attr("/model", "tie_word_embeddings", int64_t(c.tie_word_embeddings ? 1 : 0));
  f.set_attr("/model", "attention_kernel", std::string(attention_kernel_name(c.attention_kernel)));
  f.set_attr("/model", "attention_mask", std::string(mask_kind_name(c.attention_mask.kind)));
  f.set_attr("/model", "attention_window", int64_t(c.attention_mask.window));
  f.set_attr("/model", "attention_sink_tokens", int64_t(c.attention_mask.sink_tokens));
  f.set_attr("/model", "attention_block_size", int64_t(c.attention_mask.block_size));
  if (c.attention_mask.kind == MaskKind::block_sparse)  // absent: the key's default (before block_sparse)
    f.set_attr("/model", "attention_top_blocks", int64_t(c.attention_mask.top_blocks));
  if (c.attention_kernel == AttentionKernel::dca) {
    f.set_attr("/model", "dca_chunk_size", c.dca_chunk_size);
    f.set_attr("/model", "dca_local_size", c.dca_local_size);
    f.set_attr("/model", "dca_mscale", c.dca_mscale);
    f.set_attr("/model", "dca_mscale_original_length", c.dca_mscale_original_length);
  }
  if (c.logit_scaling.on()) {  // absent: none (files before the key, and every run without it)
    f.set_attr("/model", "logit_scaling", std::string(logit_scaling_name(c.logit_scaling.kind)));
    f.set_attr("/model", "logit_scaling_length", c.logit_scaling.length);
  }
}

LlamaConfig read_model_attrs(const H5File& f) {
  if (!f.exists("/model")) throw std::runtime_error(f.path() + ": missing group /model");
  // Every value goes through the config key a user would type it as, with the same
  // checks (ranges before narrowing, float32's range, known names): a crafted file gets
  // no value a config file could not give.
  LlamaConfig typed;
  const auto set = [&](const char* attr, const char* key, const std::string& text) {
    try {
      set_model_key(typed, key, text);
    } catch (const ConfigError& e) {
      throw std::runtime_error(f.path() + ": /model@" + attr + ": " + e.what());
    }
  };
  const auto missing = [&](const char* attr) {
    return std::runtime_error(f.path() + ": missing attribute /model@" + attr);
  };
  const auto int_attr = [&](const char* attr, const char* key) {
    const auto v = f.attr_int("/model", attr);
    if (!v) throw missing(attr);
    set(attr, key, std::to_string(*v));
  };
  const auto number_attr = [&](const char* attr, const char* key) {
    const auto v = f.attr_double("/model", attr);
    if (!v) throw missing(attr);
    set(attr, key, fmt::format("{:.17g}", *v));  // round-trips; inf and nan as such
  };
  const auto string_attr = [&](const char* attr, const char* key) {
    const auto v = f.attr_string("/model", attr);
    if (!v) throw missing(attr);
    set(attr, key, *v);
  };
  int_attr("vocab_size", "model.vocab_size");
  int_attr("hidden_size", "model.hidden_size");
  int_attr("intermediate_size", "model.intermediate_size");
  int_attr("num_hidden_layers", "model.num_hidden_layers");
  int_attr("num_attention_heads", "model.num_attention_heads");
  int_attr("num_key_value_heads", "model.num_key_value_heads");
  number_attr("rope_theta", "model.rope_theta");
  if (f.attr_string("/model", "rope_scaling")) {  // absent: none
    string_attr("rope_scaling", "model.rope_scaling");
    number_attr("rope_scaling_factor", "model.rope_scaling_factor");
    int_attr("rope_original_length", "model.rope_original_length");
  }
  number_attr("rms_norm_eps", "model.rms_norm_eps");
  {
    const auto tie = f.attr_int("/model", "tie_word_embeddings");
    if (!tie) throw missing("tie_word_embeddings");
    set("tie_word_embeddings", "model.tie_word_embeddings", *tie == 0 ? "false" : *tie == 1 ? "true" : std::to_string(*tie));
  }
  string_attr("attention_kernel", "attention.kernel");
  if (typed.attention_kernel == AttentionKernel::dca) {
    int_attr("dca_chunk_size", "attention.dca_chunk_size");
    int_attr("dca_local_size", "attention.dca_local_size");
    number_attr("dca_mscale", "attention.dca_mscale");
    int_attr("dca_mscale_original_length", "attention.dca_mscale_original_length");
  }
  if (f.attr_string("/model", "logit_scaling")) {  // absent: none
    string_attr("logit_scaling", "attention.logit_scaling");
    int_attr("logit_scaling_length", "attention.logit_scaling_length");
  }
  if (f.attr_string("/model", "attention_mask")) {  // absent: causal (before masks)
    string_attr("attention_mask", "attention.mask");
    int_attr("attention_window", "attention.window");
    int_attr("attention_sink_tokens", "attention.sink_tokens");
    int_attr("attention_block_size", "attention.block_size");
    if (f.attr_int("/model", "attention_top_blocks")) int_attr("attention_top_blocks", "attention.top_blocks");
  }
  const LlamaConfig c = typed;
  const std::string err = c.validate();
  if (!err.empty()) throw std::runtime_error(f.path() + ": /model attributes: " + err);
  if (auto hd = f.attr_int("/model", "head_dim"); hd && *hd != c.head_dim())
    throw std::runtime_error(f.path() + ": /model@head_dim " + std::to_string(*hd) +
                             " != hidden_size / num_attention_heads");
  return c;
}

void write_tensors(H5File& f, const std::string& root, const TensorTable& table,
                   const float* arena) {
  for (const TensorSpec& s : table.specs()) {
    const std::string ds = root + "/" + hf_name_to_path(s.name);
    f.write_f32(ds, s.shape, arena + s.offset);
    f.set_attr(ds, "checksum", checksum_text(arena + s.offset, size_t(s.numel) * sizeof(float)));
  }
}

void check_tensors(const H5File& f, const std::string& root, const TensorTable& table) {
  for (const TensorSpec& s : table.specs()) {
    const std::string ds = root + "/" + hf_name_to_path(s.name);
    if (!f.exists(ds)) throw std::runtime_error(f.path() + ": missing tensor " + ds);
    const std::vector<int64_t> shape = f.shape(ds);
    if (shape != s.shape)
      throw std::runtime_error(f.path() + ": tensor " + ds + " has shape " + shape_text(shape) +
                               ", expected " + shape_text(s.shape));
    if (const std::string dt = f.dtype(ds); dt != "float32")
      throw std::runtime_error(f.path() + ": tensor " + ds + " has dtype " + dt + ", expected float32");
  }
}

void read_tensors(const H5File& f, const std::string& root, const TensorTable& table,
                  float* arena) {
  check_tensors(f, root, table);
  for (const TensorSpec& s : table.specs()) {
    const std::string ds = root + "/" + hf_name_to_path(s.name);
    const std::vector<float> v = f.read_f32(ds);
    // tensors written by lct carry a checksum of their bytes; files from other tools may not
    if (const auto sum = f.attr_string(ds, "checksum")) {
      const std::string actual = checksum_text(v.data(), v.size() * sizeof(float));
      if (actual != *sum)
        throw std::runtime_error(f.path() + ": tensor " + ds + " is corrupt (checksum " + actual +
                                 ", stored " + *sum + ")");
    }
    std::copy(v.begin(), v.end(), arena + s.offset);
  }
}

const TensorSpec* first_non_finite(const TensorTable& table, const float* arena, int64_t& element) {
  for (const TensorSpec& spec : table.specs())
    for (int64_t i = 0; i < spec.numel; ++i)
      if (!std::isfinite(arena[spec.offset + i])) {
        element = i;
        return &spec;
      }
  return nullptr;
}

void refuse_non_finite_params(const TensorTable& table, const float* arena, const std::string& path) {
  int64_t i = 0;
  if (const TensorSpec* spec = first_non_finite(table, arena, i))
    throw std::runtime_error(path + ": tensor " + spec->name + " holds a non-finite value (" +
                             std::to_string(arena[spec->offset + i]) + " at element " + std::to_string(i) +
                             "): a diverged or damaged model");
}

}  // namespace lct
