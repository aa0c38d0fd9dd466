// A model to read: an lct checkpoint or parameter file (.h5, its /model attributes and
// /params), or a Hugging Face Llama folder or safetensors file (src/io/hf_model.h). The
// model's shape comes first and the tensors on demand, so a command can size and check
// its memory before it allocates them.
#pragma once

#include <optional>
#include <string>

#include "model/llama_config.h"
#include "src/io/h5io.h"
#include "src/io/hf_model.h"

namespace lct {

class ModelFile {
 public:
  // Opens the file or folder and reads the model's config (throws std::runtime_error
  // naming the path: missing, corrupt, or a model lct cannot represent).
  explicit ModelFile(const std::string& path);

  const std::string& path() const { return path_; }
  const LlamaConfig& config() const { return config_; }
  // Where the shape was read, for messages: "its config.json" or "its /model attributes".
  const char* config_source() const { return hf_ ? "its config.json" : "its /model attributes"; }
  // A checkpoint's run configuration (/config, TOML); "" for a parameter file or a
  // Hugging Face model.
  std::string run_config() const;
  // Every tensor of `table` is in the file with its shape (headers only): a command
  // checks this before it allocates the parameters a config describes.
  void check_params(const LlamaConfig& config, const TensorTable& table);
  // Reads every tensor of `table` into the arena. `config` is the file's config with any
  // attention or RoPE settings changed (core attention and RoPE have no weights).
  void read_params(const LlamaConfig& config, const TensorTable& table, float* arena);

 private:
  std::string path_;
  bool hf_ = false;
  HfModelFiles files_;
  std::optional<H5File> h5_;
  LlamaConfig config_;
};

}  // namespace lct
