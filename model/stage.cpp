#include "model/stage.h"

#include "model/llama.h"

namespace lct {

StageSpec whole_model_stage(const LlamaConfig& config) {
  return {0, config.num_hidden_layers, true, true};
}

std::string split_pipeline_stages(int num_layers, int pp, const std::vector<int64_t>& per_stage,
                                  std::vector<StageSpec>& stages) {
  const auto text = [](int64_t v) { return std::to_string(v); };
  std::vector<int64_t> counts = per_stage;
  if (counts.empty()) {
    if (num_layers % pp != 0)
      return "parallel.pp = " + text(pp) + " must divide model.num_hidden_layers = " +
             text(num_layers) + " (or set parallel.pp_layers to uneven stages)";
    counts.assign(size_t(pp), num_layers / pp);
  }
  if (int64_t(counts.size()) != pp)
    return "parallel.pp_layers has " + text(int64_t(counts.size())) + " entries but parallel.pp = " +
           text(pp) + " (one layer count per stage)";
  int64_t sum = 0;
  for (int64_t c : counts) {
    if (c < 1) return "parallel.pp_layers entries must be >= 1, got " + text(c);
    sum += c;
  }
  if (sum != num_layers)
    return "parallel.pp_layers sums to " + text(sum) + " but model.num_hidden_layers = " +
           text(num_layers);
  stages.clear();
  int first = 0;
  for (int s = 0; s < pp; ++s) {
    const int end = first + int(counts[size_t(s)]);
    stages.push_back({first, end, s == 0, s == pp - 1});
    first = end;
  }
  return {};
}

namespace {
// Adjacent ranges joined, so e.g. a whole-model stage is one range.
std::vector<ArenaRange> merged(const std::vector<ArenaRange>& r) {
  std::vector<ArenaRange> out;
  for (const ArenaRange& x : r) {
    if (!out.empty() && out.back().end == x.begin)
      out.back().end = x.end;
    else
      out.push_back(x);
  }
  return out;
}

ArenaRange range_of(const TensorTable& table, const char* name) {
  const TensorSpec& s = table.get(name);
  return {s.offset, s.offset + s.numel};
}
}  // namespace

ArenaRange tied_embedding_range(const TensorTable& table, const LlamaConfig& config,
                                const StageSpec& stage) {
  const bool one_of_two = stage.has_embedding != stage.has_head;
  if (!config.tie_word_embeddings || !one_of_two) return {};
  if (!stage.has_embedding && !stage.has_head) return {};
  return range_of(table, "model.embed_tokens.weight");
}

namespace {
std::vector<ArenaRange> counted_unmerged(const TensorTable& table, const LlamaConfig& config,
                                         const StageSpec& stage) {
  std::vector<ArenaRange> r;
  if (stage.has_embedding) r.push_back(range_of(table, "model.embed_tokens.weight"));
  if (stage.num_layers() > 0) r.push_back(layer_range(table, stage.first_layer, stage.end_layer));
  if (stage.has_head) {
    r.push_back(range_of(table, "model.norm.weight"));
    if (!config.tie_word_embeddings) r.push_back(range_of(table, "lm_head.weight"));
  }
  return r;
}
}  // namespace

std::vector<ArenaRange> counted_ranges(const TensorTable& table, const LlamaConfig& config,
                                       const StageSpec& stage) {
  return merged(counted_unmerged(table, config, stage));
}

std::vector<ArenaRange> owned_ranges(const TensorTable& table, const LlamaConfig& config,
                                     const StageSpec& stage) {
  std::vector<ArenaRange> r = counted_unmerged(table, config, stage);
  if (stage.has_head && !stage.has_embedding && config.tie_word_embeddings)
    r.insert(r.begin(), range_of(table, "model.embed_tokens.weight"));
  return merged(r);
}

}  // namespace lct
