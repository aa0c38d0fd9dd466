// lct generate's parts: the KV-cache decoder against the training model's full forward
// (the greedy token is the full forward's argmax at every step, and every row's
// next-token loss agrees), under every attention kernel, mask and RoPE scaling it
// carries; the sampler's distribution; seeded reproducibility.
#include <gtest/gtest.h>

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "model/generation.h"
#include "model/kv_decoder.h"
#include "model/llama.h"
#include "tests/test_util.h"

namespace lct::generate_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

constexpr int64_t kVocab = 64;

LlamaConfig base_config() { return llama_shape(kVocab, 64, 96, 2, 4, 2); }

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  Rng rng(seed, 5, 0);
  for (auto& x : t) x = int32_t(rng.uniform_int(0, kVocab - 1));
  return t;
}

// -log softmax(logits)[target] in double
double token_loss(const float* logits, int64_t V, int32_t target) {
  double top = logits[0];
  for (int64_t i = 1; i < V; ++i) top = std::max(top, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - top);
  return std::log(sum) + top - double(logits[target]);
}

// The largest logit minus the second largest.
double top_margin(const float* logits, int64_t V) {
  std::vector<float> v(logits, logits + V);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return double(v[0]) - double(v[1]);
}

// The decoder's greedy run (prompt, then new_tokens one at a time) against one full
// forward of the finished document through LlamaModel (the training model, colocated
// attention over the whole document):
//  - each new token is the full forward's argmax at its row (token_correct), at every step;
//  - every row's next-token loss, the prompt's rows (one append, every_row) and each
//    step's, agrees with the full forward's to a tolerance from the arithmetic: both sum
//    in fp32 in different orders (one-row products against whole-document ones, one query
//    against the kernel's tiles), so a logit differs by about K u per dot product on its
//    path (u = 2^-24, K the longest dot product: the hidden size, the MLP width or the
//    document's keys), over 3 products a layer and the head, relative to the logits'
//    magnitude; the loss (logsumexp minus a logit) by twice that.
// The argmax is only asked where the decoder's top two logits are further apart than
// that tolerance, and the test requires that of every step (else it would not decide).
void check_decoding(const LlamaConfig& config, int64_t prompt_len, int64_t new_tokens, uint64_t seed) {
  LlamaModel model(config);
  randomize_params(model.table(), model.params, seed);
  const std::vector<int32_t> prompt = random_tokens(prompt_len, seed + 1);
  const int64_t V = config.vocab_size, L = prompt_len + new_tokens;

  KvCacheDecoder decoder(config, model.params.data(), prompt_len, L);
  std::vector<float> prompt_logits(static_cast<size_t>(prompt_len * V)), logits(static_cast<size_t>(V));
  decoder.append(prompt, prompt_logits.data(), /*every_row=*/true);
  std::vector<double> decoded_loss(size_t(L), 0.0);  // by row: -log p(the next token)
  std::vector<double> magnitude(size_t(L), 0.0);     // by row: the largest |logit|
  auto record = [&](int64_t row, const float* row_logits, int32_t next) {
    decoded_loss[size_t(row)] = token_loss(row_logits, V, next);
    for (int64_t i = 0; i < V; ++i) magnitude[size_t(row)] = std::max(magnitude[size_t(row)], double(std::fabs(row_logits[i])));
  };
  for (int64_t r = 0; r + 1 < prompt_len; ++r) record(r, prompt_logits.data() + r * V, prompt[size_t(r + 1)]);
  std::copy(prompt_logits.end() - V, prompt_logits.end(), logits.begin());

  const int64_t K = std::max({config.hidden_size, config.intermediate_size, L});
  const double u = std::ldexp(1.0, -24);
  const double rel = double(3 * config.num_hidden_layers + 1) * double(K) * u;
  std::vector<int32_t> document = prompt;
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int32_t token = next_token(logits.data(), V, {}, step);
    const int64_t row = prompt_len - 1 + step;
    record(row, logits.data(), token);
    EXPECT_GT(top_margin(logits.data(), V), 2.0 * rel * (1.0 + magnitude[size_t(row)]))
        << "step " << step << ": the top two logits are too close for the argmax to be decided";
    document.push_back(token);
    if (step + 1 < new_tokens) decoder.append({&document.back(), 1}, logits.data());
  }
  EXPECT_EQ(decoder.length(), L - 1);

  // the finished document through the training model: targets are its next tokens
  PackedBatch batch;
  batch.tokens = document;
  batch.cu_seqlens = {0, int32_t(L)};
  derive_targets_and_positions(batch);
  if (config.attention_mask.kind == MaskKind::prefix_lm) batch.prefix_lens = {int32_t(prompt_len)};
  if (config.attention_mask.kind == MaskKind::shared_question) {
    batch.segment_ids.assign(size_t(L), 1);
    std::fill(batch.segment_ids.begin(), batch.segment_ids.begin() + prompt_len, 0);
  }
  std::vector<double> full_loss(size_t(L), 0.0);
  std::vector<uint8_t> correct(size_t(L), 0);
  model.forward_backward(batch, 1.0f, false, full_loss.data(), correct.data());
  for (int64_t r = 0; r + 1 < L; ++r) {
    const double tol = 2.0 * rel * (1.0 + magnitude[size_t(r)]);
    EXPECT_NEAR(decoded_loss[size_t(r)], full_loss[size_t(r)], tol) << "row " << r;
    if (r >= prompt_len - 1) {
      EXPECT_EQ(correct[size_t(r)], 1) << "new token " << r - prompt_len + 1 << " (row " << r << ")";
    }
  }
}

TEST(KvCacheDecoder, GreedyIsTheFullForwardsArgmaxCausal) { check_decoding(base_config(), 9, 40, 1); }

TEST(KvCacheDecoder, GreedyIsTheFullForwardsArgmaxTiedGqa) {
  LlamaConfig c = llama_shape(kVocab, 64, 96, 3, 8, 2, /*tied=*/true);
  check_decoding(c, 5, 30, 2);
}

// DCA: chunks of s = 12 tokens (C 16, w 4), so the new tokens' queries meet intra-,
// successive- and inter-chunk positions, each a single query against the cache.
TEST(KvCacheDecoder, GreedyIsTheFullForwardsArgmaxDca) {
  LlamaConfig c = base_config();
  c.attention_kernel = AttentionKernel::dca;
  c.dca_chunk_size = 16;
  c.dca_local_size = 4;
  check_decoding(c, 7, 45, 3);
  // the length-dependent logit multiplier: computed from the planned document's length
  c.dca_mscale_original_length = 8;
  c.dca_mscale = 1.1;
  check_decoding(c, 20, 30, 4);
}

TEST(KvCacheDecoder, GreedyIsTheFullForwardsArgmaxRopeScaling) {
  LlamaConfig c = base_config();
  c.rope_scaling = RopeScaling::yarn;
  c.rope_scaling_factor = 4;
  c.rope_original_length = 16;
  check_decoding(c, 10, 40, 5);
  c.rope_scaling = RopeScaling::linear;
  c.rope_scaling_factor = 2;
  check_decoding(c, 10, 20, 6);
  // dynamic: the base of the finished document's length (50 > 16), fixed from the start
  c.rope_scaling = RopeScaling::dynamic;
  check_decoding(c, 10, 40, 7);
  // DCA on a YaRN model
  c.rope_scaling = RopeScaling::yarn;
  c.attention_kernel = AttentionKernel::dca;
  c.dca_chunk_size = 12;
  c.dca_local_size = 3;
  check_decoding(c, 6, 40, 8);
}

// attention.logit_scaling: each appended query's factor from its own position, so the
// cached prompt and every new token see what the full forward gave them (L 16: the
// prompt's factors are below 1, the later ones above)
TEST(KvCacheDecoder, GreedyIsTheFullForwardsArgmaxLogitScaling) {
  LlamaConfig c = base_config();
  c.logit_scaling = LogitScaling{LogitScalingKind::logn, 16};
  check_decoding(c, 8, 40, 15);
  c.logit_scaling.kind = LogitScalingKind::logn_beyond;
  c.attention_kernel = AttentionKernel::dca;
  c.dca_chunk_size = 16;
  c.dca_local_size = 4;
  check_decoding(c, 8, 40, 16);
}

TEST(KvCacheDecoder, GreedyIsTheFullForwardsArgmaxMasks) {
  LlamaConfig c = base_config();
  c.attention_mask = AttentionMask{MaskKind::sliding_window, 8, 0, 0};
  check_decoding(c, 6, 30, 9);
  c.attention_mask = AttentionMask{MaskKind::sink_window, 6, 2, 0};
  check_decoding(c, 6, 30, 10);
  c.attention_mask = AttentionMask{MaskKind::chunked, 0, 0, 10};
  check_decoding(c, 6, 30, 11);
  // the prompt is prefix_lm's bidirectional prefix, shared_question's question
  c.attention_mask = AttentionMask{MaskKind::prefix_lm, 0, 0, 0};
  check_decoding(c, 12, 20, 12);
  c.attention_mask = AttentionMask{MaskKind::shared_question, 0, 0, 0};
  check_decoding(c, 12, 20, 13);
  // each new token selects its blocks from the cache's keys
  c.attention_mask = AttentionMask{MaskKind::block_sparse, 0, 0, 4, 2};
  check_decoding(c, 6, 30, 17);
}

// A prompt longer than a token tile: the prompt's rows run in tiles.
TEST(KvCacheDecoder, LongPromptRunsInTiles) { check_decoding(base_config(), KvCacheDecoder::kTileTokens + 77, 6, 14); }

TEST(KvCacheDecoder, RefusesWhatItCannotDo) {
  const LlamaConfig c = base_config();
  std::vector<float> params(size_t(build_llama_table(c).total()), 0.01f);
  std::vector<float> logits(static_cast<size_t>(kVocab));
  KvCacheDecoder d(c, params.data(), 3, 5);
  const std::vector<int32_t> two = {1, 2}, three = {1, 2, 3}, bad = {1, 2, kVocab};
  EXPECT_NE(error_of([&] { d.append(two, logits.data()); }).find("the whole prompt"), std::string::npos);
  EXPECT_NE(error_of([&] { d.append(bad, logits.data()); }).find("outside the vocabulary"), std::string::npos);
  d.append(three, logits.data());
  d.append(two, logits.data());
  EXPECT_NE(error_of([&] { d.append(two, logits.data()); }).find("more than the 5 planned"), std::string::npos);
  EXPECT_NE(error_of([&] { KvCacheDecoder(c, params.data(), 0, 5); }).find("1 <= prompt"), std::string::npos);
  EXPECT_NE(error_of([&] { KvCacheDecoder(c, params.data(), 6, 5); }).find("1 <= prompt"), std::string::npos);
}

// score_continuation after a greedy generation, against one full forward of prompt +
// continuation through the training model. The continuation's rows are replayed on a
// second decoder by the same two appends (prompt, then the continuation but its last
// token, every row), which gives the same floats and so each row's logits: the score's
// log-likelihood is minus the sum of the losses of those rows whose target the mask
// trains (to double rounding), the targets lct eval's loss counts (drop_masked_targets
// on the same document: under shared_question not the first token, which the question's
// last row predicts across segments), and each row's loss is the full forward's within
// check_decoding's tolerance, 2 K u (1 + the row's largest |logit|). The greedy
// continuation scores every token as the argmax (its own decoding decided each margin);
// one that differs from it in its third token does not.
void check_scoring(const LlamaConfig& config, int64_t prompt_len, int64_t n, uint64_t seed) {
  LlamaModel model(config);
  randomize_params(model.table(), model.params, seed);
  const std::vector<int32_t> prompt = random_tokens(prompt_len, seed + 1);
  const int64_t V = config.vocab_size, L = prompt_len + n;
  const int64_t K = std::max({config.hidden_size, config.intermediate_size, L});
  const double rel = double(3 * config.num_hidden_layers + 1) * double(K) * std::ldexp(1.0, -24);
  const int64_t skipped = config.attention_mask.kind == MaskKind::shared_question ? 1 : 0;
  KvCacheDecoder decoder(config, model.params.data(), prompt_len, L);
  const Generation g = generate(decoder, prompt, n, {});
  const ContinuationScore greedy = score_continuation(decoder, g, g.tokens);
  EXPECT_EQ(greedy.tokens, n);
  EXPECT_EQ(greedy.targets, n - skipped);
  EXPECT_EQ(greedy.argmax, n - skipped);
  EXPECT_EQ(greedy.argmax_tokens, n);
  EXPECT_TRUE(greedy.greedy());
  EXPECT_EQ(decoder.length(), L - 1);
  std::vector<int32_t> other = g.tokens;
  other[2] = (other[2] + 1) % int32_t(V);
  const ContinuationScore wrong = score_continuation(decoder, g, other);
  EXPECT_FALSE(wrong.greedy());
  EXPECT_LE(wrong.argmax, n - skipped - 1);
  for (const auto& [continuation, score] : {std::pair{g.tokens, greedy}, std::pair{other, wrong}}) {
    KvCacheDecoder replay(config, model.params.data(), prompt_len, L);
    std::vector<float> rows(size_t(n * V));
    replay.append(prompt, rows.data());
    replay.append(std::span<const int32_t>(continuation).first(size_t(n - 1)), rows.data() + V, true);
    PackedBatch batch;
    batch.tokens = prompt;
    batch.tokens.insert(batch.tokens.end(), continuation.begin(), continuation.end());
    batch.cu_seqlens = {0, int32_t(L)};
    derive_targets_and_positions(batch);
    if (config.attention_mask.kind == MaskKind::prefix_lm) batch.prefix_lens = {int32_t(prompt_len)};
    if (config.attention_mask.kind == MaskKind::shared_question) {
      batch.segment_ids.assign(size_t(L), 1);
      std::fill(batch.segment_ids.begin(), batch.segment_ids.begin() + prompt_len, 0);
    }
    drop_masked_targets(batch);  // the targets eval's loss counts
    std::vector<double> full_loss(size_t(L), 0.0);
    std::vector<uint8_t> correct(size_t(L), 0);
    model.forward_backward(batch, 1.0f, false, full_loss.data(), correct.data());
    double replayed = 0.0;
    int64_t targets = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = prompt_len - 1 + i;
      EXPECT_EQ(batch.targets[size_t(r)] >= 0, decoder.trains_target(prompt_len + i)) << "token " << i;
      if (batch.targets[size_t(r)] < 0) continue;
      const float* row = rows.data() + i * V;
      const double loss = token_loss(row, V, continuation[size_t(i)]);
      replayed += loss;
      ++targets;
      double magnitude = 0.0;
      for (int64_t v = 0; v < V; ++v) magnitude = std::max(magnitude, double(std::fabs(row[v])));
      EXPECT_NEAR(loss, full_loss[size_t(r)], 2.0 * rel * (1.0 + magnitude)) << "token " << i;
    }
    EXPECT_EQ(score.targets, targets);
    EXPECT_NEAR(-score.log_likelihood, replayed, 1e-12 * (1.0 + replayed));
  }
}

TEST(KvCacheDecoder, ScoresAContinuationAsTheFullForward) {
  check_scoring(base_config(), 9, 12, 21);
  LlamaConfig c = base_config();
  c.attention_kernel = AttentionKernel::dca;  // the length-dependent multiplier from the plan
  c.dca_chunk_size = 16;
  c.dca_local_size = 4;
  c.dca_mscale_original_length = 8;
  c.dca_mscale = 1.1;
  check_scoring(c, 20, 15, 22);
  c.logit_scaling = LogitScaling{LogitScalingKind::logn, 16};
  check_scoring(c, 8, 20, 23);
  c = base_config();
  c.attention_mask = AttentionMask{MaskKind::prefix_lm, 0, 0, 0};
  check_scoring(c, 12, 10, 24);
  // the question's last row predicts the answer's first token across segments: eval's
  // loss skips that target, and so does the score (issue 87)
  c.attention_mask = AttentionMask{MaskKind::shared_question, 0, 0, 0};
  check_scoring(c, 12, 10, 25);
}

// The heap (glibc's in-use bytes, arenas and mapped chunks) a generation and then the
// scoring of a continuation far longer than the prompt hold with the decoder alive:
// within KvCacheDecoder::bytes for an append of the continuation's rows but its last
// token, beside the generation's tokens and logits rows. The rows of that append (x, q,
// the attention output, LSE, positions: 12 KiB a token at a width of 1024, issue 87)
// were counted for the prompt only. (Under AddressSanitizer glibc's heap is not the one
// in use, and the figure is ~0: the bound then holds trivially.)
size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

TEST(KvCacheDecoder, BytesBoundTheScoringOfALongContinuation) {
  const LlamaConfig c = llama_shape(kVocab, 256, 32, 1, 4, 1);
  std::vector<float> params(size_t(build_llama_table(c).total()));
  {
    LlamaModel model(c);
    randomize_params(model.table(), model.params, 31);
    params = model.params;
  }
  const int64_t P = 4, n = 3000, V = c.vocab_size;
  const std::vector<int32_t> prompt = random_tokens(P, 32), continuation = random_tokens(n, 33);
  const int threads = omp_get_max_threads();
  const size_t before = heap_in_use();
  KvCacheDecoder decoder(c, params.data(), P, P + n);
  const Generation g = generate(decoder, prompt, n, {});
  const ContinuationScore s = score_continuation(decoder, g, continuation);
  EXPECT_EQ(s.targets, n);
  const double held = double(heap_in_use()) - double(before);
  const double generation = double(g.tokens.capacity()) * sizeof(int32_t) + double(V) * sizeof(float);
  const double bound = KvCacheDecoder::bytes(c, P, P + n, threads, n - 1) + generation + 65536;
  EXPECT_LE(held, bound) << "the decoder and the generation hold " << held << " bytes";
  // the append's rows are most of it: the bound without them falls short
  const double rows = double(n - 1) * double(c.hidden_size + 2 * c.hidden_size + c.num_attention_heads + 2) * 4;
  EXPECT_GT(KvCacheDecoder::bytes(c, P, P + n, threads, n - 1) - KvCacheDecoder::bytes(c, P, P + n, threads), 0.99 * rows);
  // and what score_continuation allocates besides: a row of logits a token
  EXPECT_EQ(continuation_bytes(c, n), double(n) * double(V) * sizeof(float));
}

TEST(KvCacheDecoder, RewindsOnlyWithinTheDocument) {
  const LlamaConfig c = base_config();
  std::vector<float> params(size_t(build_llama_table(c).total()), 0.01f);
  std::vector<float> logits(static_cast<size_t>(kVocab));
  KvCacheDecoder d(c, params.data(), 3, 6);
  const std::vector<int32_t> three = {1, 2, 3}, two = {4, 5};
  d.append(three, logits.data());
  d.append(two, logits.data());
  EXPECT_NE(error_of([&] { d.rewind(2); }).find("outside [prompt 3, length 5]"), std::string::npos);
  EXPECT_NE(error_of([&] { d.rewind(6); }).find("outside [prompt 3, length 5]"), std::string::npos);
  d.rewind(3);
  EXPECT_EQ(d.length(), 3);
  d.append(two, logits.data());  // continues at the prompt's end
  EXPECT_EQ(d.length(), 5);
  Generation g;
  EXPECT_NE(error_of([&] { score_continuation(d, g, two); }).find("no prompt logits"), std::string::npos);
  g.prompt_logits.assign(size_t(kVocab), 0.0f);
  EXPECT_NE(error_of([&] { score_continuation(d, g, {}); }).find("empty continuation"), std::string::npos);
}

TEST(Sampling, GreedyTakesTheLowestIdOfEqualLargestLogits) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(next_token(l.data(), 4, {}, 0), 1);
  SamplingSettings top1;
  top1.temperature = 5.0;
  top1.top_k = 1;
  for (int64_t step = 0; step < 100; ++step) EXPECT_EQ(next_token(l.data(), 4, top1, step), 1);
}

// Draw frequencies against softmax(logits / T) over the top k: each count within 5
// standard deviations of n p (binomial), for a fixed seed (so the test is deterministic).
void check_frequencies(const std::vector<float>& logits, const SamplingSettings& s, const std::vector<double>& p) {
  const int64_t n = 60000, V = int64_t(logits.size());
  std::vector<int64_t> count(size_t(V), 0);
  for (int64_t step = 0; step < n; ++step) ++count[size_t(next_token(logits.data(), V, s, step))];
  for (int64_t i = 0; i < V; ++i) {
    const double mean = double(n) * p[size_t(i)], sd = std::sqrt(double(n) * p[size_t(i)] * (1 - p[size_t(i)]));
    EXPECT_LE(std::fabs(double(count[size_t(i)]) - mean), 5 * sd + 1e-9) << "token " << i;
  }
}

TEST(Sampling, DrawsFollowTheTemperedSoftmaxOverTheTopK) {
  const std::vector<float> l = {0.0f, float(std::log(2.0)), float(std::log(4.0)), -30.0f};
  SamplingSettings s;
  s.temperature = 1.0;
  s.seed = 11;
  const double z1 = 7 + std::exp(-30.0);
  check_frequencies(l, s, {1 / z1, 2 / z1, 4 / z1, std::exp(-30.0) / z1});
  s.temperature = 2.0;  // weights sqrt(1, 2, 4) and e^-15
  const double z = 1 + std::sqrt(2.0) + 2 + std::exp(-15.0);
  check_frequencies(l, s, {1 / z, std::sqrt(2.0) / z, 2 / z, std::exp(-15.0) / z});
  s.temperature = 1.0;
  s.top_k = 2;
  check_frequencies(l, s, {0.0, 1 / 3.0, 2 / 3.0, 0.0});
}

TEST(Sampling, TheSameSeedGivesTheSameTokens) {
  const LlamaConfig c = base_config();
  LlamaModel model(c);
  randomize_params(model.table(), model.params, 21);
  const std::vector<int32_t> prompt = random_tokens(6, 22);
  auto run = [&](uint64_t seed) {
    KvCacheDecoder d(c, model.params.data(), 6, 46);
    SamplingSettings s;
    s.temperature = 1.5;
    s.top_k = 20;
    s.seed = seed;
    return generate(d, prompt, 40, s).tokens;
  };
  const std::vector<int32_t> a = run(7), b = run(7), other = run(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  EXPECT_EQ(a.size(), 40u);
  // greedy through generate() is the argmax loop check_decoding runs
  KvCacheDecoder d(c, model.params.data(), 6, 16);
  const Generation g = generate(d, prompt, 10, {});
  KvCacheDecoder e(c, model.params.data(), 6, 16);
  std::vector<float> logits(static_cast<size_t>(kVocab));
  e.append(prompt, logits.data());
  for (int64_t step = 0; step < 10; ++step) {
    const int32_t t = next_token(logits.data(), kVocab, {}, step);
    EXPECT_EQ(g.tokens[size_t(step)], t);
    if (step < 9) e.append({&t, 1}, logits.data());
  }
}

TEST(Sampling, NonFiniteLogitsAreAnError) {
  const LlamaConfig c = base_config();
  std::vector<float> params(size_t(build_llama_table(c).total()), std::numeric_limits<float>::quiet_NaN());
  KvCacheDecoder d(c, params.data(), 2, 4);
  const std::vector<int32_t> prompt = {1, 2};
  EXPECT_NE(error_of([&] { generate(d, prompt, 2, {}); }).find("not finite at new token 1"), std::string::npos);
}

}  // namespace
}  // namespace lct::generate_test
