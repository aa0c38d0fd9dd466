// The plain blocked causal kernel behind core_attention.h (see there for layouts).
// Query blocks of kQueryBlock rows stream over key blocks of kKeyBlock rows with an
// online softmax; block products go through OpenBLAS with strided pointers so GQA
// never copies K/V. Key blocks entirely in a query block's future are skipped, so work
// is proportional to the attended pairs (sum of L_i^2 / 2 for whole documents) and
// memory is O(rows) plus per-thread tiles.
#pragma once

#include "attention/core_attention.h"

namespace lct {

void causal_attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                              const float* q, const float* k, const float* v, float* out,
                              float* lse);

void causal_attention_backward(const AttentionParams& params,
                               std::span<const AttentionTask> tasks, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const float* dout, float* dq, float* dk, float* dv);

}  // namespace lct
