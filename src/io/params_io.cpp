#include "src/io/params_io.h"

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
  if (c.attention_kernel == AttentionKernel::dca) {
    f.set_attr("/model", "dca_chunk_size", c.dca_chunk_size);
    f.set_attr("/model", "dca_local_size", c.dca_local_size);
    f.set_attr("/model", "dca_mscale", c.dca_mscale);
    f.set_attr("/model", "dca_mscale_original_length", c.dca_mscale_original_length);
  }
}

LlamaConfig read_model_attrs(const H5File& f) {
  if (!f.exists("/model")) throw std::runtime_error(f.path() + ": missing group /model");
  auto need_int = [&](const char* name) {
    auto v = f.attr_int("/model", name);
    if (!v) throw std::runtime_error(f.path() + ": missing attribute /model@" + name);
    return *v;
  };
  auto need_double = [&](const char* name) {
    auto v = f.attr_double("/model", name);
    if (!v) throw std::runtime_error(f.path() + ": missing attribute /model@" + name);
    return *v;
  };
  // an int field: range-checked before narrowing (a crafted 2^32 + 1 is not 1)
  auto need_small_int = [&](const char* name) {
    const int64_t v = need_int(name);
    if (v < 0 || v > std::numeric_limits<int>::max())
      throw std::runtime_error(f.path() + ": /model@" + name + " = " + std::to_string(v) +
                               " is out of range [0, " + std::to_string(std::numeric_limits<int>::max()) + "]");
    return int(v);
  };
  LlamaConfig c;
  c.vocab_size = need_int("vocab_size");
  c.hidden_size = need_int("hidden_size");
  c.intermediate_size = need_int("intermediate_size");
  c.num_hidden_layers = need_small_int("num_hidden_layers");
  c.num_attention_heads = need_small_int("num_attention_heads");
  c.num_key_value_heads = need_small_int("num_key_value_heads");
  c.rope_theta = need_double("rope_theta");
  if (const auto scaling = f.attr_string("/model", "rope_scaling")) {  // absent: none
    try {
      c.rope_scaling = parse_rope_scaling(*scaling);
    } catch (const std::exception& e) {
      throw std::runtime_error(f.path() + ": /model@rope_scaling: " + e.what());
    }
    c.rope_scaling_factor = need_double("rope_scaling_factor");
    c.rope_original_length = need_int("rope_original_length");
  }
  c.rms_norm_eps = need_double("rms_norm_eps");
  c.tie_word_embeddings = need_int("tie_word_embeddings") != 0;
  const auto kernel = f.attr_string("/model", "attention_kernel");
  if (!kernel) throw std::runtime_error(f.path() + ": missing attribute /model@attention_kernel");
  try {
    c.attention_kernel = parse_attention_kernel(*kernel);
  } catch (const std::exception& e) {
    throw std::runtime_error(f.path() + ": /model@attention_kernel: " + e.what());
  }
  if (c.attention_kernel == AttentionKernel::dca) {
    c.dca_chunk_size = need_int("dca_chunk_size");
    c.dca_local_size = need_int("dca_local_size");
    c.dca_mscale = need_double("dca_mscale");
    c.dca_mscale_original_length = need_int("dca_mscale_original_length");
  }
  if (const auto mask = f.attr_string("/model", "attention_mask")) {  // absent: causal (before masks)
    try {
      c.attention_mask.kind = parse_mask_kind(*mask);
    } catch (const std::exception& e) {
      throw std::runtime_error(f.path() + ": /model@attention_mask: " + e.what());
    }
    c.attention_mask.window = need_small_int("attention_window");
    c.attention_mask.sink_tokens = need_small_int("attention_sink_tokens");
    c.attention_mask.block_size = need_small_int("attention_block_size");
  }
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

void read_tensors(const H5File& f, const std::string& root, const TensorTable& table,
                  float* arena) {
  for (const TensorSpec& s : table.specs()) {
    const std::string ds = root + "/" + hf_name_to_path(s.name);
    if (!f.exists(ds)) throw std::runtime_error(f.path() + ": missing tensor " + ds);
    const std::vector<int64_t> shape = f.shape(ds);
    if (shape != s.shape)
      throw std::runtime_error(f.path() + ": tensor " + ds + " has shape " + shape_text(shape) +
                               ", expected " + shape_text(s.shape));
    if (const std::string dt = f.dtype(ds); dt != "float32")
      throw std::runtime_error(f.path() + ": tensor " + ds + " has dtype " + dt + ", expected float32");
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

}  // namespace lct
