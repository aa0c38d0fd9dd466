// lct generate: autoregressive decoding from a checkpoint or Hugging Face folder with a
// KV cache (model/kv_decoder.h, model/generation.h), under the checkpoint's attention
// (causal, DCA, masks) and RoPE scaling, or the --attention.* and --model.rope_scaling*
// overrides lct eval takes. Text in and out for lct's byte-level vocabulary (256 tokens),
// token ids otherwise.
#include <omp.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/files.h"
#include "model/generation.h"
#include "src/cli/command.h"
#include "src/cli/eval.h"
#include "src/io/model_file.h"
#include "src/train/flops.h"
#include "src/train/memory_budget.h"
#include "src/util/integer_text.h"
#include "src/util/json.h"
#include "src/util/printable.h"
#include "src/util/machine.h"

namespace lct {
namespace {

constexpr int64_t kByteVocabulary = 256;  // lct's built-in vocabulary: one token a byte

struct Options {
  std::string checkpoint, prompt, prompt_file, prompt_tokens;
  bool prompt_given = false;
  int64_t max_new_tokens = 64;
  double temperature = 0.0;
  int64_t top_k = 0;
  std::string seed = "0";  // parsed whole by run_generate (CLI11 wraps "-1", clamps 2^64)
  int64_t threads = 0;
  bool json = false, ids = false, per_line = false;
  ModelOverrides overrides;
};

// "the 3rd" for error messages
std::string ordinal(int64_t n) {
  const int64_t r100 = n % 100, r10 = n % 10;
  const char* suffix = r100 >= 11 && r100 <= 13 ? "th" : r10 == 1 ? "st" : r10 == 2 ? "nd" : r10 == 3 ? "rd" : "th";
  return std::to_string(n) + suffix;
}

// Token ids of a --prompt-tokens text: integers separated by white space or commas.
// `where` names the file (and line) in errors.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& where, int64_t V) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto separator = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ','; };
  while (i < text.size()) {
    if (separator(text[i])) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < text.size() && !separator(text[e])) ++e;
    const std::string item = text.substr(i, e - i);
    const std::string what = where + ": the " + ordinal(int64_t(ids.size()) + 1) + " token '" +
                             printable(item.size() > 24 ? item.substr(0, 24) + "..." : item) + "'";
    int64_t v = 0;  // the whole item (a NUL inside it is not an integer's end)
    if (parse_integer_text(item, v) == IntegerText::not_an_integer)
      throw std::runtime_error(what + " is not an integer");
    if (v < 0 || v >= V)  // also an integer beyond int64 (v is then its end of the range)
      throw std::runtime_error(what + " is outside the model's vocabulary [0, " + std::to_string(V) + ")");
    ids.push_back(int32_t(v));
    i = e;
  }
  return ids;
}

std::vector<int32_t> bytes_as_tokens(const std::string& bytes) {
  std::vector<int32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = int32_t(static_cast<unsigned char>(bytes[i]));
  return ids;
}

// The prompts: one, or with --per-line every line of the file (a last line break ends the
// last prompt, it does not start one). Each is checked: no empty prompt, no token outside
// the vocabulary.
std::vector<std::vector<int32_t>> read_prompts(const Options& o, int64_t V) {
  const int given = int(o.prompt_given) + int(!o.prompt_file.empty()) + int(!o.prompt_tokens.empty());
  if (given != 1) throw std::runtime_error("give exactly one of --prompt, --prompt-file and --prompt-tokens");
  if (o.per_line && o.prompt_given) throw std::runtime_error("--per-line: reads --prompt-file or --prompt-tokens");
  const bool ids = !o.prompt_tokens.empty();
  const std::string flag = ids ? "--prompt-tokens " + o.prompt_tokens
                               : o.prompt_given ? std::string("--prompt") : "--prompt-file " + o.prompt_file;
  if (!ids && V != kByteVocabulary)
    throw std::runtime_error(flag + ": text is lct's byte-level vocabulary of 256 tokens, but " + o.checkpoint +
                             " has a vocabulary of " + std::to_string(V) + " (give token ids with --prompt-tokens)");
  if (!o.prompt_given) {  // the memory reading it takes, checked before it is read
    const std::string& path = ids ? o.prompt_tokens : o.prompt_file;
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    // the bytes, their lines, and the int32 tokens they widen to (an id takes 2 bytes or more)
    const double bytes = ec ? 0.0 : double(size) * (2.0 + (ids ? 2.0 : 4.0));
    if (const std::string no = check_command_memory("lct generate of " + flag + " (" + std::to_string(size) + " bytes)",
                                                    bytes, "the file, its lines and their tokens",
                                                    "give a shorter prompt");
        !ec && !no.empty())
      throw std::runtime_error(no);
  }
  const std::string all = o.prompt_given ? o.prompt
                                         : read_regular_file(ids ? o.prompt_tokens : o.prompt_file,
                                                             ids ? "--prompt-tokens" : "--prompt-file");
  std::vector<std::string> texts;
  if (o.per_line) {
    for (size_t b = 0; b < all.size();) {
      const size_t e = std::min(all.find('\n', b), all.size());
      texts.push_back(all.substr(b, e - b));
      b = e + 1;
    }
    if (texts.empty()) texts.emplace_back();
  } else {
    texts.push_back(all);
  }
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = o.per_line ? flag + ": line " + std::to_string(i + 1) : flag;
    prompts.push_back(ids ? parse_token_ids(texts[i], where, V) : bytes_as_tokens(texts[i]));
    if (prompts.back().empty()) throw std::runtime_error(where + ": an empty prompt (at least one token is needed)");
  }
  return prompts;
}

std::string token_text(const std::vector<int32_t>& tokens) {
  std::string bytes;
  for (int32_t id : tokens) bytes += char(static_cast<unsigned char>(id));
  return bytes;
}

int run_generate(const Options& o) {
  uint64_t seed = 0;
  if (parse_integer_text(o.seed, seed) != IntegerText::ok)
    throw std::runtime_error("--seed must be an integer in [0, 18446744073709551615], got '" + printable(o.seed) +
                             "'");
  configure_threads(o.threads);
  ModelFile file(o.checkpoint);
  const LlamaConfig config = adjusted_config(file, o.overrides.adjuster());
  const int64_t V = config.vocab_size;
  const std::vector<std::vector<int32_t>> prompts = read_prompts(o, V);
  int64_t longest = 0, prompt_tokens = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, int64_t(p.size())), prompt_tokens += int64_t(p.size());
  if (o.max_new_tokens > INT32_MAX - longest)  // (not longest + max_new_tokens: that can wrap)
    throw std::runtime_error("a prompt of " + std::to_string(longest) + " tokens and --max-new-tokens " +
                             std::to_string(o.max_new_tokens) + ": more than a document can hold (2^31 - 1 tokens)");
  // everything the run allocates, before it allocates it (the longest prompt's decoder:
  // one at a time)
  const TensorTable table = build_llama_table(config);
  file.check_params(config, table);  // every tensor there (headers only) before sizing and allocating
  const int threads = omp_get_max_threads();
  const double bytes = double(table.total()) * sizeof(float) +
                       KvCacheDecoder::bytes(config, longest, longest + o.max_new_tokens, threads) +
                       double(prompt_tokens) * sizeof(int32_t) + 32.0 * 1048576 * threads;
  if (const std::string no = check_command_memory(
          "lct generate of " + std::to_string(longest) + " prompt and " + std::to_string(o.max_new_tokens) +
              " new tokens",
          bytes, "the weights, the KV cache of every token, the prompt's rows", "shorten the prompt or --max-new-tokens");
      !no.empty())
    throw std::runtime_error(no);
  std::vector<float> params(size_t(table.total()));
  file.read_params(config, table, params.data());

  SamplingSettings sampling;
  sampling.temperature = o.temperature;
  sampling.top_k = o.top_k;
  sampling.seed = seed;
  const bool text = V == kByteVocabulary && !o.ids;
  const std::string attention = describe_attention_and_rope(config);
  const std::string how = o.temperature == 0.0 ? "greedy"
                                               : "temperature " + std::to_string(o.temperature) +
                                                     (o.top_k > 0 ? ", top-k " + std::to_string(o.top_k) : "") +
                                                     ", seed " + std::to_string(sampling.seed);
  double prompt_seconds = 0, decode_seconds = 0;
  int64_t new_tokens = 0;
  for (const std::vector<int32_t>& prompt : prompts) {
    const int64_t P = int64_t(prompt.size());
    KvCacheDecoder decoder(config, params.data(), P, P + o.max_new_tokens);
    const Generation g = generate(decoder, prompt, o.max_new_tokens, sampling);
    prompt_seconds += g.prompt_seconds;
    decode_seconds += g.decode_seconds;
    new_tokens += int64_t(g.tokens.size());
    if (o.json) {
      Json j;
      j["prompt_tokens"] = P;
      j["new_tokens"] = int64_t(g.tokens.size());
      j["tokens"] = g.tokens;
      if (V == kByteVocabulary) j["text"] = token_text(g.tokens);
      j["sampling"] = how;
      j["attention"] = attention;
      // FLOPs by lct's convention (src/train/flops.h), the LM head counted on the rows it
      // runs on: the prompt's last row, and every new token's forward (all but the last)
      const double head = 2.0 * double(config.vocab_size) * double(config.hidden_size);
      j["prompt_seconds"] = g.prompt_seconds;
      j["prompt_gflop"] = (forward_flops(config, P, g.prompt_pairs) - head * double(P - 1)) * 1e-9;
      j["decode_seconds"] = g.decode_seconds;
      j["decode_gflop"] = forward_flops(config, int64_t(g.tokens.size()) - 1, g.decode_pairs) * 1e-9;
      std::printf("%s\n", json_text(j).c_str());
    } else if (text) {
      const std::string bytes = token_text(g.tokens);
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      for (size_t i = 0; i < g.tokens.size(); ++i) std::printf(i ? " %d" : "%d", g.tokens[i]);
      std::printf("\n");
    }
  }
  // the figures on stderr, so that stdout is the continuations alone
  const double prompt_rate = prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0.0;
  const double new_rate = decode_seconds > 0 ? double(new_tokens) / decode_seconds : 0.0;
  std::fprintf(stderr,
               "generate: %s%lld prompt tokens in %.3f s (%.1f tokens/s) | %lld new tokens in %.3f s (%.1f tokens/s) | "
               "%s | attention %s | %d threads\n",
               prompts.size() > 1 ? (std::to_string(prompts.size()) + " prompts, ").c_str() : "",
               (long long)prompt_tokens, prompt_seconds, prompt_rate, (long long)new_tokens, decode_seconds, new_rate,
               how.c_str(), attention.c_str(), threads);
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& lct) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = lct.add_subcommand("generate", "continue a prompt with a checkpoint (KV cache; greedy or sampled)");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "parameter or checkpoint file (.h5), or a Hugging Face Llama folder (config.json + safetensors)")
      ->required();
  cmd->add_option_function<std::string>(
      "--prompt",
      [o](const std::string& v) {
        o->prompt = v;
        o->prompt_given = true;
      },
      "the prompt as text (byte-level vocabulary)");
  cmd->add_option("--prompt-file", o->prompt_file, "the prompt: this file's bytes (byte-level vocabulary)");
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "the prompt: token ids in this file, separated by spaces or commas");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->check(whole_integer())
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0: greedy; > 0: sample from softmax(logits / T)")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "sample among the k most likely tokens only (default: all)")
      ->check(whole_integer())
      ->check(positive());
  cmd->add_option("--seed", o->seed, "the sampling seed (the same seed gives the same tokens)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads (0 = all cores)")
      ->check(whole_integer())
      ->check(CLI::Range(int64_t(0), kMaxThreads));
  cmd->add_flag("--per-line", o->per_line,
                "every line of --prompt-file or --prompt-tokens is its own prompt (one output line each)");
  cmd->add_flag("--ids", o->ids, "print token ids, also for the byte-level vocabulary");
  cmd->add_flag("--json", o->json, "print one JSON object a prompt: the tokens, text, and timings");
  add_model_overrides(cmd, o->overrides);
  return {cmd, [o] { return run_generate(*o); }};
}

}  // namespace lct
