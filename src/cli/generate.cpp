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
#include <atomic>
#include <cstdio>
#include <functional>
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
#include "src/util/heartbeat.h"
#include "src/util/integer_text.h"
#include "src/util/json.h"
#include "src/util/log.h"
#include "src/util/printable.h"
#include "src/util/machine.h"

namespace lct {
namespace {

constexpr int64_t kByteVocabulary = 256;  // lct's built-in vocabulary: one token a byte

struct Options {
  std::string checkpoint, prompt, prompt_file, prompt_tokens;
  std::string continuation_file, continuation_tokens;  // scored by teacher forcing beside the generation
  bool prompt_given = false;
  int64_t max_new_tokens = 64;
  bool max_new_tokens_given = false;
  double temperature = 0.0;
  int64_t top_k = 0;
  std::string seed = "0";  // parsed whole by run_generate (CLI11 wraps "-1", clamps 2^64)
  int64_t threads = 0;
  double heartbeat_s = 30;  // a progress line on stderr every this many seconds of a long run (0: never)
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

// Where a command reads tokens from: --prompt's text, or a file given as text (bytes) or
// as token ids. `ids_option` is the option that gives ids instead of text.
struct TokenSource {
  const char* option;
  const char* ids_option;
  std::string path;                   // the file (empty for --prompt)
  const std::string* text = nullptr;  // --prompt's text
  bool ids = false;
  std::string flag() const { return text ? std::string(option) : std::string(option) + " " + path; }
};

// The source's lines as tokens: the whole text, or with --per-line every line (a last
// line break ends the last line, it does not start one). Text needs lct's byte-level
// vocabulary; each line is checked: not empty, no token outside the vocabulary. The
// memory the reading takes is checked before the file is read. `what` names a line
// ("prompt") in errors.
std::vector<std::vector<int32_t>> read_token_lines(const TokenSource& source, bool per_line, int64_t V,
                                                   const std::string& checkpoint, const std::string& what) {
  const std::string flag = source.flag();
  if (!source.ids && V != kByteVocabulary)
    throw std::runtime_error(flag + ": text is lct's byte-level vocabulary of 256 tokens, but " + checkpoint +
                             " has a vocabulary of " + std::to_string(V) + " (give token ids with " +
                             source.ids_option + ")");
  if (!source.text) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(source.path, ec);
    // the bytes, their lines, and the int32 tokens they widen to (an id takes 2 bytes or more)
    const double bytes = ec ? 0.0 : double(size) * (2.0 + (source.ids ? 2.0 : 4.0));
    if (const std::string no = check_command_memory("lct generate of " + flag + " (" + std::to_string(size) + " bytes)",
                                                    bytes, "the file, its lines and their tokens",
                                                    "give a shorter " + what);
        !ec && !no.empty())
      throw std::runtime_error(no);
  }
  const std::string all = source.text ? *source.text : read_regular_file(source.path, source.option);
  std::vector<std::string> texts;
  if (per_line) {
    for (size_t b = 0; b < all.size();) {
      const size_t e = std::min(all.find('\n', b), all.size());
      texts.push_back(all.substr(b, e - b));
      b = e + 1;
    }
    if (texts.empty()) texts.emplace_back();
  } else {
    texts.push_back(all);
  }
  std::vector<std::vector<int32_t>> lines;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = per_line ? flag + ": line " + std::to_string(i + 1) : flag;
    lines.push_back(source.ids ? parse_token_ids(texts[i], where, V) : bytes_as_tokens(texts[i]));
    if (lines.back().empty())
      throw std::runtime_error(where + ": an empty " + what + " (at least one token is needed)");
  }
  return lines;
}

// The prompts: one, or with --per-line every line of the file.
std::vector<std::vector<int32_t>> read_prompts(const Options& o, int64_t V) {
  const int given = int(o.prompt_given) + int(!o.prompt_file.empty()) + int(!o.prompt_tokens.empty());
  if (given != 1) throw std::runtime_error("give exactly one of --prompt, --prompt-file and --prompt-tokens");
  if (o.per_line && o.prompt_given) throw std::runtime_error("--per-line: reads --prompt-file or --prompt-tokens");
  const TokenSource source = o.prompt_given             ? TokenSource{"--prompt", "--prompt-tokens", "", &o.prompt}
                             : o.prompt_tokens.empty() ? TokenSource{"--prompt-file", "--prompt-tokens", o.prompt_file}
                                                       : TokenSource{"--prompt-tokens", "--prompt-tokens",
                                                                     o.prompt_tokens, nullptr, true};
  return read_token_lines(source, o.per_line, V, o.checkpoint, "prompt");
}

// The continuations to score, one a prompt (none without --continuation-*).
std::vector<std::vector<int32_t>> read_continuations(const Options& o, int64_t V, size_t prompts) {
  if (o.continuation_file.empty() && o.continuation_tokens.empty()) return {};
  if (!o.continuation_file.empty() && !o.continuation_tokens.empty())
    throw std::runtime_error("give one of --continuation-file and --continuation-tokens");
  const TokenSource source =
      o.continuation_tokens.empty()
          ? TokenSource{"--continuation-file", "--continuation-tokens", o.continuation_file}
          : TokenSource{"--continuation-tokens", "--continuation-tokens", o.continuation_tokens, nullptr, true};
  const std::string flag = source.flag();
  if (!o.json) throw std::runtime_error(flag + ": the scores are fields of --json's lines (add --json)");
  if (o.max_new_tokens_given)
    throw std::runtime_error(flag + ": each prompt generates as many tokens as its continuation has "
                             "(leave out --max-new-tokens)");
  auto lines = read_token_lines(source, o.per_line, V, o.checkpoint, "continuation");
  if (lines.size() != prompts)
    throw std::runtime_error(flag + ": " + std::to_string(lines.size()) + " continuation" +
                             (lines.size() == 1 ? "" : "s") + " for " + std::to_string(prompts) + " prompt" +
                             (prompts == 1 ? "" : "s") + " (one a prompt)");
  return lines;
}

std::string token_text(const std::vector<int32_t>& tokens) {
  std::string bytes;
  for (int32_t id : tokens) bytes += char(static_cast<unsigned char>(id));
  return bytes;
}

// The prompts' and continuations' sizes, each document within what one can hold.
struct GenerateSizes {
  int64_t longest = 0, longest_document = 0, longest_new = 0, prompt_tokens = 0, continuation_tokens = 0;
  bool scoring = false;  // continuations are scored (teacher forcing: one append of all but their last token)
  // each prompt's (P, n): each gets a decoder of its own, whose growth from P rows to P + n
  // is not monotone in them (the longest prompt and the longest continuation may be
  // different prompts'), so the KV cache's peak is the largest over the prompts
  std::vector<std::pair<int64_t, int64_t>> documents;
};
GenerateSizes generate_sizes(const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<std::vector<int32_t>>& continuations,
                             const std::function<int64_t(size_t)>& new_tokens_of) {
  GenerateSizes z;
  z.scoring = !continuations.empty();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t P = int64_t(prompts[i].size()), n = new_tokens_of(i);
    if (n > INT32_MAX - P)  // (not P + n: that can wrap)
      throw std::runtime_error("a prompt of " + std::to_string(P) + " tokens and " +
                               (continuations.empty() ? "--max-new-tokens " : "a continuation of ") +
                               std::to_string(n) + ": more than a document can hold (2^31 - 1 tokens)");
    z.longest = std::max(z.longest, P), z.longest_document = std::max(z.longest_document, P + n);
    z.longest_new = std::max(z.longest_new, n);
    z.prompt_tokens += P;
    if (z.scoring) z.continuation_tokens += n;
    z.documents.emplace_back(P, n);
  }
  return z;
}

// A generation's --json line at most, a new token: its element of the tokens array (16
// bytes), its byte of the text and that text escaped (6 bytes: \u00XX), its id printed
// (10 digits and a comma), the line rendered and then copied for the write
constexpr double kJsonBytesPerToken = 16 + 1 + 2 * (6 + 11);

// Everything the run allocates, before it allocates it: the weights; every prompt's and
// continuation's tokens; one decoder at a time, for the longest prompt and document, its
// rows held for its longest append (a scored continuation's all but its last token, else
// the prompt); a generation's tokens, its two rows of logits and its --json line; a scored
// continuation's rows of logits; the libraries' working buffers (as lct train allows).
double generate_bytes(const LlamaConfig& config, const TensorTable& table, const GenerateSizes& z, int threads) {
  const double f = sizeof(float), V = double(config.vocab_size), n = double(z.longest_new);
  double kv = 0;
  for (const auto& [P, n_i] : z.documents)
    kv = std::max(kv, KvCacheDecoder::bytes(config, P, P + n_i, threads,
                                            z.scoring ? std::max<int64_t>(1, n_i - 1) : 1));
  return double(table.total()) * f + double(z.prompt_tokens + z.continuation_tokens) * sizeof(int32_t) + kv +
         n * (sizeof(int32_t) + kJsonBytesPerToken) + 2 * V * f +
         (z.scoring ? continuation_bytes(config, z.longest_new) : 0.0) + 32.0 * 1048576 * threads;
}

// The estimate, checked against the memory available; returns what the process will hold
// by it at its peak (what it holds now included), which the figures on stderr set beside
// the peak measured.
double check_generate_memory(const LlamaConfig& config, const TensorTable& table, const GenerateSizes& z, int threads) {
  const double bytes = generate_bytes(config, table, z, threads);
  if (const std::string no = check_command_memory(
          "lct generate of " + std::to_string(z.longest) + " prompt and " +
              std::to_string(z.longest_document - z.longest) + " new tokens",
          bytes,
          z.scoring ? "the weights, the KV cache of every token, the rows of the prompt and of the continuation, its "
                      "logits"
                    : "the weights, the KV cache of every token, the prompt's rows",
          "shorten the prompt or --max-new-tokens");
      !no.empty())
    throw std::runtime_error(no);
  return command_memory_bytes(bytes);
}

// A prompt's --json line: its tokens, the sampling, and the FLOPs by lct's convention
// (src/train/flops.h), the LM head counted on the rows it runs on: the prompt's last row,
// and every new token's forward (all but the last)
Json generation_json(const LlamaConfig& config, const Generation& g, int64_t P, const std::string& how,
                     const std::string& attention) {
  Json j;
  j["prompt_tokens"] = P;
  j["new_tokens"] = int64_t(g.tokens.size());
  j["tokens"] = g.tokens;
  if (config.vocab_size == kByteVocabulary) j["text"] = token_text(g.tokens);
  j["sampling"] = how;
  j["attention"] = attention;
  const double head = 2.0 * double(config.vocab_size) * double(config.hidden_size);
  j["prompt_seconds"] = g.prompt_seconds;
  j["prompt_gflop"] = (forward_flops(config, P, g.prompt_pairs) - head * double(P - 1)) * 1e-9;
  j["decode_seconds"] = g.decode_seconds;
  j["decode_gflop"] = forward_flops(config, int64_t(g.tokens.size()) - 1, g.decode_pairs) * 1e-9;
  return j;
}

// The continuations' scores: each one's fields in its --json line, and their sums for
// the summary on stderr
struct ContinuationTotals {
  double seconds = 0, log_likelihood = 0;
  int64_t targets = 0, greedy = 0;
  void add(const ContinuationScore& c, Json& j) {
    j["continuation_tokens"] = c.tokens;
    j["continuation_targets"] = c.targets;
    j["continuation_log_likelihood"] = c.log_likelihood;
    j["continuation_argmax"] = c.argmax;
    j["continuation_greedy"] = c.greedy();
    j["continuation_seconds"] = c.seconds;
    seconds += c.seconds;
    log_likelihood += c.log_likelihood;
    targets += c.targets;
    greedy += c.greedy();
  }
  std::string summary(size_t continuations) const {
    return " | continuations: " + std::to_string(greedy) + " of " + std::to_string(continuations) +
           " the greedy choice, log-likelihood " +
           (targets > 0 ? std::to_string(log_likelihood / double(targets)) + " nats/token"
                        : std::string("of no token (no target the mask trains)")) +
           ", " + std::to_string(seconds) + " s";
  }
};

// generate: prompt 2 of 5, decoding | 1200 of 4000 new tokens (30%) | 31 s in, about 72 s to go
std::string generate_heartbeat_line(const GenerationProgress& p, size_t prompt, size_t prompts, int64_t all_new_tokens,
                                    double elapsed_s) {
  const int64_t done = p.new_tokens.load(std::memory_order_relaxed);
  const double share = all_new_tokens > 0 ? std::clamp(double(done) / double(all_new_tokens), 0.0, 1.0) : 0.0;
  return fmt::format("generate: {}{} | {} of {} new tokens ({:.0f}%) | {}",
                     prompts > 1 ? fmt::format("prompt {} of {}, ", prompt + 1, prompts) : "",
                     p.prefill.load(std::memory_order_relaxed) ? "the prompt's forward" : "decoding", done,
                     all_new_tokens, 100 * share, Heartbeat::time_text(elapsed_s, share));
}

int run_generate(const Options& o) {
  uint64_t seed = 0;
  if (parse_integer_text(o.seed, seed) != IntegerText::ok)
    throw std::runtime_error("--seed must be an integer in [0, 18446744073709551615], got '" + printable(o.seed) +
                             "'");
  configure_threads(o.threads);
  ModelFile file(o.checkpoint);
  const LlamaConfig config = adjusted_config(file, o.overrides.adjuster());
  if (const std::string no = config.attention_mask.next_token_problem("lct generate"); !no.empty())
    throw std::runtime_error(no);
  const int64_t V = config.vocab_size;
  const std::vector<std::vector<int32_t>> prompts = read_prompts(o, V);
  const std::vector<std::vector<int32_t>> continuations = read_continuations(o, V, prompts.size());
  // each prompt's new tokens: its continuation's length, or --max-new-tokens
  auto new_tokens_of = [&](size_t i) {
    return continuations.empty() ? o.max_new_tokens : int64_t(continuations[i].size());
  };
  const GenerateSizes sizes = generate_sizes(prompts, continuations, new_tokens_of);
  const int64_t prompt_tokens = sizes.prompt_tokens;
  const TensorTable table = build_llama_table(config);
  file.check_params(config, table);  // every tensor there (headers only) before sizing and allocating
  const int threads = omp_get_max_threads();
  const double estimate = check_generate_memory(config, table, sizes, threads);
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
  ContinuationTotals scores;
  // a long generation says where it is on stderr (stdout is the continuations)
  GenerationProgress progress;
  std::atomic<size_t> prompt_at{0};
  int64_t all_new_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) all_new_tokens += new_tokens_of(i);
  Heartbeat heartbeat(o.heartbeat_s, stderr);
  const HeartbeatScope beat(&heartbeat, [&, n = prompts.size()](double elapsed_s) {
    return generate_heartbeat_line(progress, prompt_at.load(), n, all_new_tokens, elapsed_s);
  });
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& prompt = prompts[i];
    const int64_t P = int64_t(prompt.size()), n = new_tokens_of(i);
    prompt_at.store(i);
    KvCacheDecoder decoder(config, params.data(), P, P + n);
    const Generation g = generate(decoder, prompt, n, sampling, &progress);
    prompt_seconds += g.prompt_seconds;
    decode_seconds += g.decode_seconds;
    new_tokens += int64_t(g.tokens.size());
    if (o.json) {
      Json j = generation_json(config, g, P, how, attention);
      if (!continuations.empty())  // teacher forcing from the same prompt forward
        scores.add(score_continuation(decoder, g, continuations[i]), j);
      print_out("{}\n", json_text(j));
    } else if (text) {
      const std::string bytes = token_text(g.tokens);
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      for (size_t t = 0; t < g.tokens.size(); ++t) print_out("{}{}", t ? " " : "", g.tokens[t]);
      print_out("\n");
    }
  }
  // the figures on stderr, so that stdout is the continuations alone
  const double prompt_rate = prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0.0;
  const double new_rate = decode_seconds > 0 ? double(new_tokens) / decode_seconds : 0.0;
  // and the memory: the estimate checked before anything was allocated, the peak held
  const int64_t peak = peak_rss_bytes();
  print_err("generate: {}{} prompt tokens in {:.3f} s ({:.1f} tokens/s) | {} new tokens in {:.3f} s "
            "({:.1f} tokens/s) | {} | attention {} | {} threads{} | memory {} estimated, {} peak\n",
            prompts.size() > 1 ? std::to_string(prompts.size()) + " prompts, " : "", prompt_tokens, prompt_seconds,
            prompt_rate, new_tokens, decode_seconds, new_rate, how, attention, threads,
            continuations.empty() ? "" : scores.summary(continuations.size()), bytes_text(estimate),
            peak >= 0 ? bytes_text(double(peak)) : std::string("unknown"));
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
  cmd->add_option("--continuation-file", o->continuation_file,
                  "score this text (per line with --per-line: one a prompt) as each prompt's continuation by teacher "
                  "forcing, beside generating as many tokens (JSON fields continuation_*)");
  cmd->add_option("--continuation-tokens", o->continuation_tokens,
                  "as --continuation-file, the continuations as token ids");
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
  cmd->add_option("--heartbeat-s", o->heartbeat_s,
                  "in a generation longer than this many seconds, print where it is (prompt, new tokens done, time to "
                  "go) on stderr every this many seconds (0 = never)")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_flag("--per-line", o->per_line,
                "every line of --prompt-file or --prompt-tokens is its own prompt (one output line each)");
  cmd->add_flag("--ids", o->ids, "print token ids, also for the byte-level vocabulary");
  cmd->add_flag("--json", o->json, "print one JSON object a prompt: the tokens, text, and timings");
  add_model_overrides(cmd, o->overrides);
  return {cmd, [o, cmd] {
            o->max_new_tokens_given = cmd->count("--max-new-tokens") > 0;
            return run_generate(*o);
          }};
}

}  // namespace lct
