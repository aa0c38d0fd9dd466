// Hugging Face Llama folders: config.json and the weights in safetensors (one
// model.safetensors, or shards listed by model.safetensors.index.json), written from and
// read into lct's model. lct's tensor names are already Hugging Face's
// (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight
// unless tied), weights [out, in], and its RoPE is Hugging Face's rotate_half layout, so
// a tensor crosses unchanged; no permutation is applied either way.
//
// config.json carries what transformers' LlamaConfig reads: the shape, rms_norm_eps,
// rope_theta, rope_scaling (linear, dynamic, yarn; null for none) and the newer
// rope_parameters, max_position_embeddings, tie_word_embeddings, hidden_act "silu",
// attention_bias and mlp_bias false, torch_dtype. What transformers has no key for, the
// attention kernel (DCA's chunk and local size, mscale) and the attention mask, goes in
// the "lct" object of config.json and in the safetensors "__metadata__" as "lct.*" keys;
// transformers ignores both: it runs such a model with causal attention over every key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/llama.h"
#include "src/io/safetensors.h"

namespace lct {

// What a Hugging Face folder or file path names: its config.json and weight files.
struct HfModelFiles {
  std::string config;                 // .../config.json
  std::vector<std::string> weights;   // the safetensors files, in the index's order
  std::string index;                  // model.safetensors.index.json, or ""
  std::map<std::string, std::string> weight_map;  // the index's tensor -> weight file path
};

// A folder holding config.json, or a *.safetensors file with config.json beside it.
bool is_hf_model_path(const std::string& path);
// What a command reading the model at `path` (--checkpoint, train.init_from) reads, as
// refuse_aliasing compares inputs: the path (a folder counts as its files), and for a
// *.safetensors file also the config.json beside it.
std::vector<std::pair<std::string, std::string>> model_inputs(const std::string& what, const std::string& path);
// Finds config.json and the weights (model.safetensors, or the index and its shards);
// throws std::runtime_error naming the path and what is missing.
HfModelFiles find_hf_model_files(const std::string& path);
// The max_position_embeddings of the model's config.json (a positive JSON integer), or 0
// when it has none: what a re-export writes back.
int64_t hf_max_position_embeddings(const std::string& path);

// The model config.json describes, with the "lct" object's attention settings (or
// causal); throws std::runtime_error "<file>: <key>: ..." for anything lct's Llama
// cannot represent: another model_type or architecture, biases, an activation other
// than silu, mixture-of-experts keys, head_dim other than hidden_size /
// num_attention_heads, an unknown rope_scaling type or parameters lct does not apply.
LlamaConfig read_hf_config(const std::string& config_json_path);

// Reads every tensor of `table` from the weight files into the arena (F32, BF16 and F16
// widened to float32), after checking that every name is present once with its shape and
// that no tensor lct's model lacks is there (a bias, an expert); a tied model's lm_head
// may be absent. Throws std::runtime_error naming the file and the tensor.
void read_hf_params(const HfModelFiles& files, const LlamaConfig& config, const TensorTable& table, float* arena);
// The same checks without reading a tensor (every header, name and shape): a run refuses
// a bad folder before it starts.
void check_hf_params(const HfModelFiles& files, const LlamaConfig& config, const TensorTable& table);

// config.json's text for `config`; trained_length is the length the model was trained at
// (max_position_embeddings; with RoPE scaling the scaled length).
std::string hf_config_json(const LlamaConfig& config, int64_t trained_length, SafetensorsDtype dtype);

// Writes out_dir/model.safetensors and out_dir/config.json (each atomically; the folder
// is created). Returns the lines to print: what was written and what transformers
// ignores.
std::vector<std::string> write_hf_model(const std::string& out_dir, const LlamaConfig& config, const TensorTable& table,
                                        const float* arena, int64_t trained_length, SafetensorsDtype dtype);

}  // namespace lct
