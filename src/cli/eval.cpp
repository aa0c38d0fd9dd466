#include "src/cli/eval.h"

#include <cmath>
#include "src/cli/command.h"
#include "src/io/hf_model.h"
#include "src/io/paths.h"
#include "src/train/memory_budget.h"

#include <fmt/format.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "src/io/output_files.h"
#include "src/io/batch_file.h"
#include "src/io/h5io.h"
#include "src/io/model_file.h"
#include "src/config/config.h"
#include "src/io/params_io.h"
#include "src/train/run_objects.h"
#include "src/util/log.h"
#include "src/util/machine.h"

namespace lct {

LlamaConfig adjusted_config(const ModelFile& file, const std::function<void(LlamaConfig&)>& adjust) {
  LlamaConfig config = file.config();
  if (adjust) {
    adjust(config);
    const std::string err = config.validate();
    if (!err.empty()) throw std::invalid_argument(err);
  }
  return config;
}

LlamaModel load_model(const std::string& checkpoint_path,
                      const std::function<void(LlamaConfig&)>& adjust, std::string* config_toml) {
  ModelFile file(checkpoint_path);
  const LlamaConfig config = adjusted_config(file, adjust);
  if (config_toml) *config_toml = file.run_config();
  // every tensor is in the file (headers only: a config.json that claims 65,536 layers of
  // a 430 KB folder names its first missing tensor), then the memory the parameters and
  // gradients take, before allocating them
  const TensorTable table = build_llama_table(config);
  file.check_params(config, table);
  const double bytes = 2.0 * double(table.total()) * sizeof(float);
  const MemoryAvailable available = available_memory(1);
  if (bytes > available.bytes)
    throw std::runtime_error(checkpoint_path + ": " + file.config_source() + " describe a model of " +
                             bytes_text(bytes) + " (parameters and gradients), more than the " +
                             bytes_text(available.bytes) + " available (" + available.limit + ")");
  LlamaModel model(config);
  file.read_params(config, model.table(), model.params.data());
  return model;
}

// kPerDocumentHeader, then one row per document of the batch: its first token, tokens,
// targets, mean loss over its targets (empty without targets), answers, answers whose
// argmax is right, and answered (1 when every answer is right; empty without answers).
std::string per_document_csv(const PackedBatch& batch, const std::vector<double>& token_loss,
                             const std::vector<uint8_t>& token_correct) {
  std::ostringstream out;
  out << kPerDocumentHeader << "\n";
  out.precision(8);
  for (int64_t d = 0; d < batch.num_docs(); ++d) {
    const int64_t begin = batch.cu_seqlens[size_t(d)], end = batch.cu_seqlens[size_t(d) + 1];
    int64_t targets = 0, answers = 0, correct = 0;
    double loss = 0;
    for (int64_t t = begin; t < end; ++t) {
      if (batch.targets[size_t(t)] >= 0) ++targets, loss += token_loss[size_t(t)];
      if (!batch.answer_mask.empty() && batch.answer_mask[size_t(t)]) ++answers, correct += token_correct[size_t(t)];
    }
    out << d << "," << begin << "," << end - begin << "," << targets << ",";
    if (targets > 0) out << loss / double(targets);
    out << "," << answers << "," << correct << ",";
    if (answers > 0) out << (correct == answers ? 1 : 0);
    out << "\n";
  }
  return out.str();
}

namespace {
// --per-position-out: the mean loss of the targets predicted at in-document positions
// [bin*k, bin*(k+1)), one row per bin that has targets
std::string per_position_csv(const PackedBatch& batch, const std::vector<double>& token_loss, int64_t bin) {
  std::vector<double> sum;
  std::vector<int64_t> count;
  for (int64_t t = 0; t < batch.num_tokens(); ++t) {
    if (batch.targets[size_t(t)] < 0) continue;
    const size_t k = size_t(batch.positions[size_t(t)] / bin);
    if (k >= sum.size()) sum.resize(k + 1, 0.0), count.resize(k + 1, 0);
    sum[k] += token_loss[size_t(t)];
    count[k] += 1;
  }
  std::ostringstream out;
  out << kPerPositionHeader << "\n";
  out.precision(8);
  for (size_t k = 0; k < sum.size(); ++k)
    if (count[k] > 0)
      out << int64_t(k) * bin << "," << int64_t(k + 1) * bin << "," << count[k] << "," << sum[k] / double(count[k])
          << "\n";
  return out.str();
}
}  // namespace

EvalResult run_eval(const std::string& checkpoint_path, const std::string& batch_path,
                    const EvalOptions& options) {
  const std::string& grads_out = options.grads_out;
  LlamaModel model = load_model(checkpoint_path, options.adjust_model);
  if (const std::string no = model.config().attention_mask.next_token_problem("lct eval"); !no.empty())
    throw std::runtime_error(no);
  model.set_arithmetic({.precision = options.precision});
  PackedBatch batch = read_batch_file(batch_path, model.config().vocab_size);
  apply_batch_mask(batch, model.config().attention_mask, batch_path);
  int64_t longest = 0;
  for (int64_t d = 0; d < batch.num_docs(); ++d)
    longest = std::max<int64_t>(longest, batch.cu_seqlens[size_t(d) + 1] - batch.cu_seqlens[size_t(d)]);
  // the weights and gradients are allocated (zero-filled, so resident) by now: the
  // process's own part, which the check adds, holds them already
  const double held = 2.0 * double(model.table().total()) * sizeof(float);
  if (const std::string no = check_command_memory(
          "lct eval of " + std::to_string(batch.num_tokens()) + " tokens",
          eval_bytes(model.config(), options.precision, batch.num_tokens(), longest) - held,
          "the activations of every token, scratch",
          "evaluate a smaller batch (lct make-batch --sequences or data.seq_len)");
      !no.empty())
    throw std::runtime_error(no);
  const int64_t targets = batch.num_targets();
  if (targets == 0)
    throw std::runtime_error(batch_path + ": no targets (" +
                             (batch.num_tokens() == batch.num_docs()
                                  ? std::string("every document has a single token")
                                  : std::string("attention.mask = ") + mask_kind_name(model.config().attention_mask.kind) +
                                        " trains none of them: every target lies inside a prefix or across segments") +
                             ")");
  const bool want_grads = !grads_out.empty();
  model.zero_grads();
  std::vector<double> token_loss(size_t(batch.num_tokens()), 0.0);
  std::vector<uint8_t> token_correct(size_t(batch.num_tokens()), 0);
  const CrossEntropyStats s = model.forward_backward(batch, 1.0f / float(targets), want_grads,
                                                     token_loss.data(), token_correct.data());
  EvalResult r;
  r.loss = s.loss_sum / double(targets);
  r.targets = targets;
  r.tokens = batch.num_tokens();
  r.documents = batch.num_docs();
  r.answers = s.answers;
  r.answers_correct = s.answers_correct;
  if (!batch.answer_mask.empty())
    for (int64_t d = 0; d < batch.num_docs(); ++d) {
      int64_t answers = 0, correct = 0;
      for (int64_t t = batch.cu_seqlens[size_t(d)]; t < batch.cu_seqlens[size_t(d) + 1]; ++t)
        if (batch.answer_mask[size_t(t)]) ++answers, correct += token_correct[size_t(t)];
      if (answers == 0) continue;
      ++r.answer_documents;
      r.answer_documents_correct += correct == answers;
    }
  r.precision = options.precision == Precision::bf16 ? "bf16 (" + bf16_support().kernel + ")" : "fp32";
  const LlamaConfig& mc = model.config();
  r.attention = describe_attention_and_rope(mc);

  // finite weights can still overflow (activations past float's range): a non-finite loss
  // or gradient is refused, nothing written, as generate refuses non-finite logits
  if (!std::isfinite(r.loss))
    throw std::runtime_error(checkpoint_path + " on " + batch_path + ": the loss is not finite (" +
                             fmt::format("{}", r.loss) + "): nothing written");
  int64_t element = 0;
  if (const TensorSpec* spec = want_grads ? first_non_finite(model.table(), model.grads.data(), element) : nullptr)
    throw std::runtime_error(checkpoint_path + " on " + batch_path + ": the gradient of " + spec->name +
                             " is not finite at element " + std::to_string(element) + ": nothing written");
  if (!options.per_position_out.empty())
    write_text_atomically(options.per_position_out, per_position_csv(batch, token_loss, options.position_bin));
  if (!options.per_document_out.empty()) write_text_atomically(options.per_document_out, per_document_csv(batch, token_loss, token_correct));
  if (want_grads) {
    write_h5_atomically(grads_out, [&](H5File& f) {
      f.set_attr("/", "loss", r.loss);
      f.set_attr("/", "targets", r.targets);
      write_model_attrs(f, model.config());
      write_tensors(f, "/grads", model.table(), model.grads.data());
    });
  }
  return r;
}

}  // namespace lct

namespace lct {

Command add_eval_command(CLI::App& lct) {
  struct Options {
    std::string checkpoint, batch_file;
    int64_t threads = 0;
    EvalOptions eval;
    ModelOverrides overrides;  // --attention.* and --model.rope_* overrides
  };
  auto o = std::make_shared<Options>();
  CLI::App* eval = lct.add_subcommand("eval", "loss and gradients of a checkpoint on a packed batch");
  eval->add_option("--checkpoint", o->checkpoint,
                   "parameter or checkpoint file (.h5), or a Hugging Face Llama folder (config.json + safetensors)")
      ->required();
  eval->add_option("--batch-file", o->batch_file, "HDF5 with tokens int32 [T], cu_seqlens int32 [n+1]")->required();
  eval->add_option("--grads-out", o->eval.grads_out, "write /grads/... and @loss to this HDF5 file");
  eval->add_option("--threads", o->threads, "threads (0 = all cores)")
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(0), kMaxThreads));
  eval->add_option_function<std::string>(
          "--precision", [o](const std::string& v) { o->eval.precision = parse_precision(v); },
          "fp32 | bf16: the linear layers' products, as train.precision (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  eval->add_option("--per-position-out", o->eval.per_position_out,
                   "write mean loss per in-document position bin (CSV)");
  eval->add_option("--position-bin", o->eval.position_bin, "bin width for --per-position-out")
      ->check(whole_integer())
      ->check(positive())
      ->capture_default_str();
  eval->add_option("--per-document-out", o->eval.per_document_out,
                   "write each document's loss and retrieval answers (CSV)");
  add_model_overrides(eval, o->overrides);
  return {eval, [o] {
            // outputs are checked before the work, not after it (a folder, a device)
            check_outputs({{"--grads-out", o->eval.grads_out},
                             {"--per-position-out", o->eval.per_position_out},
                             {"--per-document-out", o->eval.per_document_out}},
                            [&] {  // the model's files (a folder's, a safetensors file's config.json)
                              NamedPaths in = model_inputs("--checkpoint", o->checkpoint);
                              in.emplace_back("--batch-file", o->batch_file);
                              return in;
                            }());
            configure_threads(o->threads);
            EvalOptions options = o->eval;
            options.adjust_model = o->overrides.adjuster();
            const EvalResult r = run_eval(o->checkpoint, o->batch_file, options);
            std::string recall;
            if (r.answers > 0)
              recall = fmt::format(" | recall {:.4f} ({} of {} answers) | answered {:.4f} ({} of {} documents)",
                                   double(r.answers_correct) / double(r.answers), r.answers_correct, r.answers,
                                   double(r.answer_documents_correct) / double(r.answer_documents),
                                   r.answer_documents_correct, r.answer_documents);
            print_out("loss {:.9g} | targets {} | tokens {} | documents {}{} | attention {}{}{}{}{}\n", r.loss,
                      r.targets, r.tokens, r.documents, recall, r.attention,
                      options.precision == Precision::fp32 ? "" : " | precision " + r.precision,
                      options.grads_out.empty() ? "" : " | grads -> " + options.grads_out,
                      options.per_position_out.empty() ? "" : " | per-position loss -> " + options.per_position_out,
                      options.per_document_out.empty() ? "" : " | per-document -> " + options.per_document_out);
            return 0;
          }};
}

}  // namespace lct
