// lct export: a checkpoint (or parameter file) as a Hugging Face Llama folder,
// model.safetensors + config.json (src/io/hf_model.h), that transformers' Llama loads and
// train.init_from and lct eval read back.
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "src/cli/command.h"
#include "src/cli/eval.h"
#include "src/config/config.h"
#include "src/io/hf_model.h"
#include "src/io/paths.h"
#include "src/util/log.h"

namespace lct {
namespace {

// The length the model was trained at: the checkpoint's data.seq_len (its /config), a
// Hugging Face folder's max_position_embeddings (what lct read, it writes back), or with
// RoPE scaling the length it refers to; a file with none of them gives 2048 (said in the
// output).
int64_t trained_length(const std::string& path, const std::string& config_toml, const LlamaConfig& m,
                       std::string& note) {
  if (!config_toml.empty()) {
    Config c;
    apply_toml_text(c, config_toml, path + ":/config");
    return c.data.seq_len;
  }
  if (is_hf_model_path(path))
    if (const int64_t n = hf_max_position_embeddings(path); n > 0) return n;
  if (m.rope_original_length > 0) return m.rope_original_length;
  note = "max_position_embeddings: the trained length is not in " + path + "; 2048 written";
  return 2048;
}

}  // namespace

Command add_export_command(CLI::App& lct) {
  struct Options {
    std::string checkpoint, out, dtype = "fp32";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = lct.add_subcommand(
      "export", "write a checkpoint as a Hugging Face Llama folder (model.safetensors + config.json)");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint or parameter file (.h5)")->required();
  cmd->add_option("--out", o->out, "the folder to write (made if missing)")->required();
  cmd->add_option("--dtype", o->dtype, "fp32 | bf16: the tensors' dtype in model.safetensors")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  return {cmd, [o] {
            // the files it writes too: none may be a file the model is read from
            refuse_aliasing({{"--out", o->out},
                             {"--out's model.safetensors", (std::filesystem::path(o->out) / "model.safetensors").string()},
                             {"--out's config.json", (std::filesystem::path(o->out) / "config.json").string()}},
                            model_inputs("--checkpoint", o->checkpoint));
            std::string config_toml, note;
            const LlamaModel model = load_model(o->checkpoint, {}, &config_toml);
            const int64_t length = trained_length(o->checkpoint, config_toml, model.config(), note);
            const SafetensorsDtype dtype = o->dtype == "bf16" ? SafetensorsDtype::bf16 : SafetensorsDtype::f32;
            for (const std::string& line :
                 write_hf_model(o->out, model.config(), model.table(), model.params.data(), length, dtype))
              print_out("{}\n", line);
            if (!note.empty()) print_out("note: {}\n", note);
            return 0;
          }};
}

}  // namespace lct
