// Text generation (lct generate): the decoding loop over a KV cache (model/kv_decoder.h),
// and the choice of each next token from its logits: greedy, or a draw from
// softmax(logits / temperature) over the top_k most likely tokens.
#pragma once

#include <atomic>
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
  // The logits of the prompt's last row (the first new token's), which
  // score_continuation starts from.
  std::vector<float> prompt_logits;
};

// Where a generation is, for a heartbeat (src/util/heartbeat.h) read on another thread:
// generate() sets `prefill` while the prompt's forward runs and counts each new token
// chosen into `new_tokens` (never reset: a command generating for several prompts
// shares one). Nothing here changes what is generated.
struct GenerationProgress {
  std::atomic<bool> prefill{false};
  std::atomic<int64_t> new_tokens{0};
};

// Appends the prompt to a fresh decoder, then chooses new_tokens tokens one at a time,
// each appended to the cache before the next is chosen. Throws std::runtime_error when
// a row of logits is not finite (a diverged checkpoint). `progress`, if given, follows it.
Generation generate(KvCacheDecoder& decoder, std::span<const int32_t> prompt, int64_t new_tokens,
                    const SamplingSettings& settings, GenerationProgress* progress = nullptr);

// A given continuation of the prompt scored by teacher forcing, as lm-evaluation-harness's
// loglikelihood requests are: each of its tokens against the logits of the row before
// it, the rows before it being the prompt and the continuation itself (not what was
// generated). The scores count the tokens whose target the mask trains, those lct eval's
// loss and recall count on the same document (KvCacheDecoder::trains_target): every one,
// but under shared_question the first, which its question's last row predicts across
// segments.
struct ContinuationScore {
  int64_t tokens = 0;
  int64_t targets = 0;        // the tokens scored: those whose target the mask trains
  double log_likelihood = 0;  // sum of log softmax(logits)[token] over the targets, in double
  int64_t argmax = 0;         // targets that are their row's greedy choice (next_token at temperature 0)
  int64_t argmax_tokens = 0;  // tokens, targets or not, that are
  // the whole continuation is what greedy decoding writes (every token the argmax)
  bool greedy() const { return argmax_tokens == tokens; }
  double seconds = 0;
  int64_t pairs = 0;  // attention pairs of the continuation's forward
};

// What score_continuation allocates for a continuation of `tokens` tokens: a row of
// logits for each (beside what the decoder holds for its append, KvCacheDecoder::bytes).
double continuation_bytes(const LlamaConfig& config, int64_t tokens);

// Scores `continuation` after generate(decoder, prompt, ...) has run: rewinds the decoder
// to the prompt and appends the continuation's tokens but the last as one append, every
// row's logits kept; the first token is scored against g.prompt_logits. The decoder's
// planned length must hold prompt + continuation - 1 tokens. The same length-dependent
// settings as the generation (the decoder's plan), so that its first token's score and
// the generation's first choice come from the same row. Throws std::runtime_error when a
// row of logits is not finite.
ContinuationScore score_continuation(KvCacheDecoder& decoder, const Generation& g,
                                     std::span<const int32_t> continuation);

}  // namespace lct
