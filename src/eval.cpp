#include "src/eval.h"

#include <stdexcept>

#include "src/h5io.h"
#include "src/params_io.h"

namespace lct {

PackedBatch read_batch_file(const std::string& path, int64_t vocab_size) {
  H5File f = H5File::open_read(path);
  for (const char* ds : {"/tokens", "/cu_seqlens"})
    if (!f.exists(ds)) throw std::runtime_error(path + ": missing dataset " + std::string(ds + 1));
  PackedBatch b;
  b.tokens = f.read_i32("/tokens");
  b.cu_seqlens = f.read_i32("/cu_seqlens");
  if (f.shape("/tokens").size() != 1 || f.shape("/cu_seqlens").size() != 1)
    throw std::runtime_error(path + ": tokens and cu_seqlens must be 1-D");
  if (b.tokens.empty()) throw std::runtime_error(path + ": tokens is empty");
  const std::string err = check_cu_seqlens(b.cu_seqlens, b.num_tokens());
  if (!err.empty()) throw std::runtime_error(path + ": " + err);
  for (size_t t = 0; t < b.tokens.size(); ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= vocab_size)
      throw std::runtime_error(path + ": tokens[" + std::to_string(t) + "] = " +
                               std::to_string(b.tokens[t]) + " is outside the vocabulary [0, " +
                               std::to_string(vocab_size) + ")");
  derive_targets_and_positions(b);
  return b;
}

LlamaModel load_model(const std::string& checkpoint_path) {
  H5File f = H5File::open_read(checkpoint_path);
  LlamaModel model(read_model_attrs(f));
  read_tensors(f, "/params", model.table(), model.params.data());
  return model;
}

EvalResult run_eval(const std::string& checkpoint_path, const std::string& batch_path,
                    const std::string& grads_out) {
  LlamaModel model = load_model(checkpoint_path);
  const PackedBatch batch = read_batch_file(batch_path, model.config().vocab_size);
  const int64_t targets = batch.num_targets();
  if (targets == 0)
    throw std::runtime_error(batch_path + ": no targets (every document has a single token)");
  const bool want_grads = !grads_out.empty();
  model.zero_grads();
  const CrossEntropyStats s = model.forward_backward(batch, 1.0f / float(targets), want_grads);
  EvalResult r;
  r.loss = s.loss_sum / double(targets);
  r.targets = targets;
  r.tokens = batch.num_tokens();
  r.documents = batch.num_docs();
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
