#include "model/generation.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "data/rng.h"

namespace lct {

namespace {
constexpr uint64_t kSamplingStream = 0x67656e6572617465ULL;  // "generate"

int32_t argmax(const float* logits, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

void check_finite(const float* logits, int64_t V, const std::string& row) {
  for (int64_t i = 0; i < V; ++i)
    if (!std::isfinite(logits[i]))
      throw std::runtime_error("the model's logits are not finite at " + row + " (a diverged checkpoint?)");
}

// log softmax(logits)[token] in double
double log_probability(const float* logits, int64_t V, int32_t token) {
  double top = logits[0];
  for (int64_t i = 1; i < V; ++i) top = std::max(top, double(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - top);
  return double(logits[token]) - top - std::log(sum);
}
}  // namespace

int32_t next_token(const float* logits, int64_t V, const SamplingSettings& s, int64_t step) {
  if (V < 1) throw std::invalid_argument("next_token: an empty vocabulary");
  if (!(s.temperature >= 0.0) || s.top_k < 0)
    throw std::invalid_argument("next_token: temperature must be >= 0 and top_k >= 0");
  if (s.temperature == 0.0) return argmax(logits, V);
  // the candidates: the k largest logits (of equal ones the lower ids), in that order
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = s.top_k > 0 ? std::min(s.top_k, V) : V;
  auto larger = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), larger);
  // softmax over them in double, from the largest (every weight in (0, 1])
  const double top = logits[ids[0]];
  std::vector<double> cumulative(static_cast<size_t>(k));
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    sum += std::exp((double(logits[ids[size_t(i)]]) - top) / s.temperature);
    cumulative[size_t(i)] = sum;
  }
  Rng rng(s.seed, kSamplingStream, uint64_t(step));
  const double u = rng.uniform() * sum;
  const int64_t i = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
  return ids[size_t(std::min(i, k - 1))];
}

Generation generate(KvCacheDecoder& decoder, std::span<const int32_t> prompt, int64_t new_tokens,
                    const SamplingSettings& settings, GenerationProgress* progress) {
  using Clock = std::chrono::steady_clock;
  const int64_t V = decoder.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  Generation g;
  g.tokens.reserve(static_cast<size_t>(new_tokens));
  const Clock::time_point start = Clock::now();
  if (progress) progress->prefill.store(true, std::memory_order_relaxed);
  decoder.append(prompt, logits.data());
  if (progress) progress->prefill.store(false, std::memory_order_relaxed);
  const Clock::time_point prompt_done = Clock::now();
  g.prompt_pairs = decoder.pairs();
  g.prompt_logits = logits;
  for (int64_t step = 0; step < new_tokens; ++step) {
    check_finite(logits.data(), V, "new token " + std::to_string(step + 1));
    const int32_t token = next_token(logits.data(), V, settings, step);
    g.tokens.push_back(token);
    if (step + 1 < new_tokens) decoder.append({&token, 1}, logits.data());
    if (progress) progress->new_tokens.fetch_add(1, std::memory_order_relaxed);
  }
  const Clock::time_point end = Clock::now();
  g.decode_pairs = decoder.pairs() - g.prompt_pairs;
  g.prompt_seconds = std::chrono::duration<double>(prompt_done - start).count();
  g.decode_seconds = std::chrono::duration<double>(end - prompt_done).count();
  return g;
}

double continuation_bytes(const LlamaConfig& config, int64_t tokens) {
  return double(tokens) * double(config.vocab_size) * sizeof(float);
}

ContinuationScore score_continuation(KvCacheDecoder& decoder, const Generation& g,
                                     std::span<const int32_t> continuation) {
  using Clock = std::chrono::steady_clock;
  const int64_t V = decoder.config().vocab_size, n = int64_t(continuation.size());
  if (n < 1) throw std::invalid_argument("score_continuation: an empty continuation");
  if (int64_t(g.prompt_logits.size()) != V)
    throw std::invalid_argument("score_continuation: the generation holds no prompt logits");
  for (int32_t id : continuation)
    if (id < 0 || id >= V) throw std::invalid_argument("token id " + std::to_string(id) + " outside the vocabulary");
  const Clock::time_point start = Clock::now();
  const int64_t pairs_before = decoder.pairs();
  std::vector<float> logits(size_t(n) * size_t(V));
  std::copy(g.prompt_logits.begin(), g.prompt_logits.end(), logits.begin());
  decoder.rewind(decoder.prompt_tokens());
  if (n > 1) decoder.append(continuation.first(size_t(n - 1)), logits.data() + V, true);
  ContinuationScore s;
  s.tokens = n;
  const int64_t P = decoder.prompt_tokens();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * V;
    check_finite(row, V, "continuation token " + std::to_string(i + 1));
    const bool best = argmax(row, V) == continuation[size_t(i)];
    s.argmax_tokens += best;
    if (!decoder.trains_target(P + i)) continue;  // a target eval's loss skips
    ++s.targets;
    s.log_likelihood += log_probability(row, V, continuation[size_t(i)]);
    s.argmax += best;
  }
  s.pairs = decoder.pairs() - pairs_before;
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

}  // namespace lct
