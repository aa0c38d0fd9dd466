#include "src/train/run_objects.h"

namespace lct {

namespace {
DocLengthSampler document_lengths(const DataConfig& d, uint64_t seed) {
  DocLengthSampler l;
  l.dist = d.doc_lengths;
  l.min_doc_len = d.min_doc_len;
  l.max_doc_len = d.max_doc_len;
  l.seed = seed;
  return l;
}
}  // namespace

std::unique_ptr<DocumentSource> make_document_source(const DataConfig& d, int64_t seed_setting, int64_t vocab_size) {
  const uint64_t seed = uint64_t(seed_setting);
  if (d.source == DataSource::text) return make_text_source(d.path, d.separator, seed);
  if (d.source == DataSource::tokens)
    return make_token_source(d.path, d.token_dtype, d.separator_id, seed, d.segment_end_id);
  if (d.source == DataSource::passkey) {
    PasskeyOptions p;
    p.seed = seed;
    p.depth = d.passkey_depth;
    p.lengths = document_lengths(d, seed);
    return make_passkey_source(p);
  }
  if (d.source == DataSource::copy) {
    CopyOptions o;
    o.seed = seed;
    o.lengths = document_lengths(d, seed);
    return make_copy_source(o);
  }
  SyntheticOptions o;
  o.seed = seed;
  o.vocab_size = vocab_size;
  o.lengths = document_lengths(d, seed);
  return make_synthetic_source(o);
}

DocStructure doc_structure_of(const DataConfig& d, MaskKind mask) {
  DocStructure s{d.prefix_fraction, int32_t(d.answers_per_question)};
  if (d.segment_end_id >= 0)
    s.marks = mask == MaskKind::shared_question ? DocStructure::Marks::segments : DocStructure::Marks::prefix;
  return s;
}

namespace {
const DocumentSource& checked(const DocumentSource& source, const LlamaConfig& model) {
  check_document_source(source, model);
  return source;
}
}  // namespace

DocumentStream::DocumentStream(const RunPlan& plan)
    : source_(make_document_source(plan.data, plan.seed, plan.model.vocab_size)),
      packer_(checked(*source_, plan.model), plan.data.seq_len, plan.doc_structure) {}

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

}  // namespace lct
