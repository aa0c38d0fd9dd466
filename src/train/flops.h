// FLOP convention (stated once, used by every log line and benchmark):
//   Megatron-style, mask-aware, real tokens only. A training step counts
//   3 x forward (forward + two backward GEMMs), with forward =
//     2 * matmul_params_per_token * tokens                (projections, MLP, LM head)
//   + 4 * H * hd * layers * attention_pairs                (Q K^T and P V)
//   where attention_pairs are the (query, key) pairs attention.mask lets through
//   (core_attention.h): sum over documents of L_i (L_i + 1) / 2 when causal.
//   Softmax, norms, RoPE and the optimizer are not counted; attention-backward
//   recomputation is not counted (model FLOPs, not hardware FLOPs).
#pragma once

#include <cstdint>

#include "data/packing.h"
#include "model/llama.h"

namespace lct {

double forward_flops(const LlamaConfig& config, int64_t tokens, int64_t pairs);
double train_step_flops(const LlamaConfig& config, int64_t tokens, int64_t pairs);
// A token's token-linear FLOPs over one attention pair's (what a masked zigzag split
// weighs tokens by, data/context_shards.h).
double linear_pairs_per_token(const LlamaConfig& config);

}  // namespace lct
