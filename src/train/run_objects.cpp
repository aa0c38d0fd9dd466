#include "src/train/run_objects.h"

namespace lct {

namespace {
DocLengthSampler document_lengths(const Config& c, uint64_t seed) {
  DocLengthSampler l;
  l.dist = c.data.doc_lengths;
  l.min_doc_len = c.data.min_doc_len;
  l.max_doc_len = c.data.max_doc_len;
  l.seed = seed;
  return l;
}
}  // namespace

std::unique_ptr<DocumentSource> make_document_source(const Config& c) {
  const uint64_t seed = uint64_t(c.train.seed);
  if (c.data.source == DataSource::text) return make_text_source(c.data.path, c.data.separator, seed);
  if (c.data.source == DataSource::tokens)
    return make_token_source(c.data.path, c.data.token_dtype, c.data.separator_id, seed, c.data.segment_end_id);
  if (c.data.source == DataSource::passkey) {
    PasskeyOptions p;
    p.seed = seed;
    p.depth = c.data.passkey_depth;
    p.lengths = document_lengths(c, seed);
    return make_passkey_source(p);
  }
  if (c.data.source == DataSource::copy) {
    CopyOptions o;
    o.seed = seed;
    o.lengths = document_lengths(c, seed);
    return make_copy_source(o);
  }
  SyntheticOptions o;
  o.seed = seed;
  o.vocab_size = c.model.vocab_size;
  o.lengths = document_lengths(c, seed);
  return make_synthetic_source(o);
}

DocStructure doc_structure_of(const Config& c) {
  DocStructure s{c.data.prefix_fraction, int32_t(c.data.answers_per_question)};
  if (c.data.segment_end_id >= 0)
    s.marks = c.model.attention_mask.kind == MaskKind::shared_question ? DocStructure::Marks::segments
                                                                       : DocStructure::Marks::prefix;
  return s;
}

void check_document_source(const DocumentSource& source, const LlamaConfig& model) {
  if (source.vocab_required() > model.vocab_size)
    throw ConfigError("model.vocab_size (" + std::to_string(model.vocab_size) +
                      ") is smaller than the data's vocabulary (" +
                      std::to_string(source.vocab_required()) + ", " + source.describe() + ")");
  // a stream of one-token documents has no next token to predict: a loss-0 run is no run
  if (source.longest_document() < 2)
    throw ConfigError("data: every document of " + source.describe() +
                      " is a single token, so there is no target to train on");
}

OptimizerConfig optimizer_config(const Config& c) {
  OptimizerConfig o;
  o.kind = c.train.optimizer;
  o.lr = c.train.lr;
  o.min_lr = c.train.min_lr;
  o.warmup_steps = c.train.warmup_steps;
  o.total_steps = c.train.steps;
  o.beta1 = c.train.beta1;
  o.beta2 = c.train.beta2;
  o.eps = c.train.eps;
  o.weight_decay = c.train.weight_decay;
  o.grad_clip = c.train.grad_clip;
  return o;
}

}  // namespace lct
