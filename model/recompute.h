// Activation recomputation (train.recompute, train.recompute_layers): what a decoder
// layer keeps between its forward and its backward, and what its backward recomputes.
//
//   none       everything the backward reads is kept (model/llama.cpp lists it)
//   selective  the layer input x_in and the attention output O with its LSE are kept;
//              backward recomputes the norms, the Q/K/V projections, RoPE, x_mid and
//              the MLP's inputs, never the quadratic attention forward
//   full       only x_in is kept; backward recomputes the whole layer forward, core
//              attention included (through the placement, so under context parallelism
//              or CAD every rank recomputes the same layer at the same time)
//
// Recomputation repeats the forward's arithmetic exactly (same products, same shapes,
// same order), so every mode gives bit-identical gradients and parameters.
#pragma once

#include <string>

#include "compute/enum_names.h"

namespace lct {

enum class Recompute { none, selective, full };

inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::none, "none", "each layer keeps everything its backward reads"},
    {Recompute::selective, "selective", "keeps its input, attention output and LSE; the rest recomputed"},
    {Recompute::full, "full", "keeps its input; the whole layer recomputed, attention included"},
};
inline Recompute parse_recompute(const std::string& name) { return parse_enum(kRecomputeNames, name, "recompute mode"); }
inline const char* recompute_name(Recompute value) { return enum_name(kRecomputeNames, value); }

struct RecomputePolicy {
  Recompute mode = Recompute::none;
  // The first `layers` layers of the model recompute (Megatron's recompute_num_layers,
  // counted over the whole model); 0 = every layer.
  int layers = 0;
  // The mode of layer l (an index over the whole model).
  Recompute of(int l) const {
    return mode != Recompute::none && (layers == 0 || l < layers) ? mode : Recompute::none;
  }
};

}  // namespace lct
