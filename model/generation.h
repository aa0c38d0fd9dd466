// Text generation (lct generate): the decoding loop over a KV cache (model/kv_decoder.h),
// and the choice of each next token from its logits: greedy, or a draw from
// softmax(logits / temperature) over the top_k most likely tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_decoder.h"

namespace lct {

struct SamplingSettings {
  double temperature = 0.0;  // 0: greedy (the argmax; of equal logits the lowest id)
  int64_t top_k = 0;         // > 0: draw among the k largest logits only; 0: among all
  uint64_t seed = 0;
};

// The token at decoding step `step` (0 for the first generated token) from logits[V]. A
// draw is a pure function of (seed, step) and the logits: the same seed gives the same
// tokens, whatever else ran before.
int32_t next_token(const float* logits, int64_t V, const SamplingSettings& settings, int64_t step);

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens, in order
  // Wall clock: the prompt's forward, and from its end to the last token chosen (every
  // choice, and the forward of every new token but the last, which nothing reads).
  double prompt_seconds = 0, decode_seconds = 0;
  // The attention pairs of each part (the FLOP convention's count): the prompt's rows,
  // and the new tokens' forwards.
  int64_t prompt_pairs = 0, decode_pairs = 0;
};

// Appends the prompt to a fresh decoder, then chooses new_tokens tokens one at a time,
// each appended to the cache before the next is chosen. Throws std::runtime_error when
// a row of logits is not finite (a diverged checkpoint).
Generation generate(KvCacheDecoder& decoder, std::span<const int32_t> prompt, int64_t new_tokens,
                    const SamplingSettings& settings);

}  // namespace lct
