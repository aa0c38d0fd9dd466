// Pipeline stages: which layers (and which of embedding / head) one stage runs, and
// which parts of the parameter arena it owns.
//
// The arena is in layer order (model/tensor_table.h):
//   [embed] [layer 0] ... [layer L-1] [final norm] [lm_head, untied only]
// Stage s of pp runs layers [first_layer, end_layer); stage 0 embeds, stage pp-1 owns
// the final norm, the head and the loss. With tied embeddings the last stage keeps its
// own copy of the embedding matrix as its head: both copies receive the same summed
// gradient and the same update, so they stay identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor_table.h"

namespace lct {

struct LlamaConfig;

struct StageSpec {
  int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
  bool has_embedding = true;           // embeds the tokens (first stage)
  bool has_head = true;                // final norm, LM head and loss (last stage)
  int num_layers() const { return end_layer - first_layer; }
};

StageSpec whole_model_stage(const LlamaConfig& config);

// Layers per stage: `layers_per_stage` empty splits evenly (pp must divide the layer
// count), otherwise it must have pp entries >= 1 summing to the layer count. Returns
// an empty string when valid, else a one-line error naming parallel.pp/pp_layers.
std::string split_pipeline_stages(int num_layers, int pp,
                                  const std::vector<int64_t>& layers_per_stage,
                                  std::vector<StageSpec>& stages);

// Arena ranges a stage updates (its layers, plus embedding / final norm / head), in
// arena order with adjacent ranges joined (a whole-model stage is one range).
std::vector<ArenaRange> owned_ranges(const TensorTable& table, const LlamaConfig& config,
                                     const StageSpec& stage);
// The same, without the tied head's copy of the embedding on a stage that has the head
// but not the embedding: summed over stages, every parameter is counted once (grad norm).
std::vector<ArenaRange> counted_ranges(const TensorTable& table, const LlamaConfig& config,
                                       const StageSpec& stage);
// The embedding's range when this stage holds one of two tied copies (first stage with
// the embedding, last stage with the head, pp > 1); {0, 0} otherwise.
ArenaRange tied_embedding_range(const TensorTable& table, const LlamaConfig& config,
                                const StageSpec& stage);

}  // namespace lct
