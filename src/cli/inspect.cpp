#include "src/cli/inspect.h"
#include "src/cli/command.h"
#include "src/cli/eval.h"
#include "src/util/integer_text.h"
#include "src/util/json.h"
#include "src/util/log.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <vector>

#include "data/files.h"
#include "src/io/checkpoint.h"
#include "src/config/config.h"
#include "src/io/batch_file.h"
#include "src/io/params_io.h"

namespace lct {
namespace {

struct TensorStats {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  double mean = 0, std = 0, max_abs = 0, norm = 0;
  std::string checksum;  // "ok", "CORRUPT", "absent"
  bool finite = true;    // no inf or NaN
};

TensorStats tensor_stats(const H5File& f, const std::string& ds, const std::string& name) {
  TensorStats t;
  t.name = name;
  t.shape = f.shape(ds);
  t.dtype = f.dtype(ds);
  const std::vector<float> v = f.read_f32(ds);
  double sum = 0, sq = 0;
  for (float x : v) {
    if (!std::isfinite(x)) t.finite = false;
    sum += x;
    sq += double(x) * x;
    t.max_abs = std::max(t.max_abs, double(std::abs(x)));
  }
  const double n = std::max<double>(1, double(v.size()));
  t.mean = sum / n;
  t.std = std::sqrt(std::max(0.0, sq / n - t.mean * t.mean));
  t.norm = std::sqrt(sq);
  const auto stored = f.attr_string(ds, "checksum");
  if (!stored) t.checksum = "absent";
  else t.checksum = checksum_text(v.data(), v.size() * sizeof(float)) == *stored ? "ok" : "CORRUPT";
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-th percentile (0-100), linear between order statistics (bench/throughput.py's).
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double k = double(v.size() - 1) * q / 100.0;
  const size_t lo = size_t(k), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (k - double(lo));
}

// A run's summary from its metrics history: the loss, then every field of the step
// metrics schema (src/metrics/step_metrics.h) summarised over the window as the schema
// says (rates by wall clock: total over total time), with per-step tokens/s percentiles
// beside the throughput.
struct RunSummary {
  int64_t steps = 0, window = 0;
  double first_loss = NAN, last_loss = NAN, head_loss = NAN, tail_loss = NAN;
  double tokens_per_s_p10 = NAN, tokens_per_s_p50 = NAN, tokens_per_s_p90 = NAN;
  std::map<std::string, double> value;  // by schema name, for fields with a summary
  double operator[](const std::string& name) const {
    const auto it = value.find(name);
    return it == value.end() ? NAN : it->second;
  }
};

RunSummary summarize(const std::vector<StepRecord>& h) {
  RunSummary s;
  s.steps = int64_t(h.size());
  if (h.empty()) return s;
  s.first_loss = h.front().loss;
  s.last_loss = h.back().loss;
  const size_t k = std::max<size_t>(1, h.size() / 10);  // first and last 10% of steps
  double head = 0, tail = 0;
  for (size_t i = 0; i < k; ++i) head += h[i].loss, tail += h[h.size() - 1 - i].loss;
  s.head_loss = head / double(k);
  s.tail_loss = tail / double(k);
  // the window: the last 20 steps (step 1, the warm-up, excluded when there are more)
  const size_t begin = h.size() > 1 ? std::max<size_t>(1, h.size() > 20 ? h.size() - 20 : 1) : 0;
  const std::vector<StepRecord> w(h.begin() + std::ptrdiff_t(begin), h.end());
  s.window = int64_t(w.size());
  double seconds = 0;
  std::vector<double> tps;
  for (const StepRecord& r : w) seconds += r.ms / 1e3, tps.push_back(r.tokens_per_s);
  for (const StepMetric& m : step_metrics()) {
    std::vector<double> v;
    double weighted = 0;
    for (const StepRecord& r : w) v.push_back(m.get(r)), weighted += m.get(r) * r.ms / 1e3;
    switch (m.summary) {
      case Summary::none: break;
      case Summary::median: s.value[m.name] = median(v); break;
      case Summary::mean: s.value[m.name] = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); break;
      // a per-step rate times the step's time is its work: total work over total time
      case Summary::rate: s.value[m.name] = weighted / seconds; break;
    }
  }
  s.tokens_per_s_p10 = percentile(tps, 10);
  s.tokens_per_s_p50 = percentile(tps, 50);
  s.tokens_per_s_p90 = percentile(tps, 90);
  return s;
}

struct FileReport {
  std::string path, format;
  int64_t format_version = 0;
  bool is_checkpoint = false;
  LlamaConfig model;
  CheckpointContents header;  // valid when is_checkpoint
  Config config;              // parsed /config when present
  bool has_config = false;
  std::vector<TensorStats> params, optim;
  int corrupt = 0, checked = 0, non_finite = 0;
  RunSummary summary;
  bool failed() const { return corrupt > 0 || non_finite > 0; }
};

FileReport read_report(const std::string& path, bool with_tensors) {
  FileReport r;
  r.path = path;
  H5File f = H5File::open_read(path);
  r.format = f.attr_string("/", "format").value_or("(none)");
  r.format_version = f.attr_int("/", "format_version").value_or(0);
  r.model = read_model_attrs(f);
  if (r.format == kCheckpointFormat) {
    r.is_checkpoint = true;
    r.header = read_checkpoint_header(f);
    apply_toml_text(r.config, r.header.config_toml, path + ":/config");
    r.has_config = true;
    r.summary = summarize(r.header.history);
  } else if (f.exists("/config")) {
    apply_toml_text(r.config, f.read_string("/config"), path + ":/config");
    r.has_config = true;
  }
  if (!with_tensors) return r;
  const TensorTable table = build_llama_table(r.model);
  // a checkpoint's or a parameter file's /params, or an `lct eval --grads-out` file's /grads
  const std::string root = !f.exists("/params") && f.exists("/grads") ? "/grads" : "/params";
  for (const TensorSpec& s : table.specs()) {
    const std::string p = hf_name_to_path(s.name);
    auto add = [&](std::vector<TensorStats>& out, const std::string& ds, const std::string& label) {
      if (!f.exists(ds)) {
        TensorStats t;
        t.name = label;
        t.checksum = "MISSING";
        ++r.corrupt;
        out.push_back(t);
        return;
      }
      out.push_back(tensor_stats(f, ds, label));
      if (out.back().checksum != "absent") ++r.checked;
      if (out.back().checksum == "CORRUPT") ++r.corrupt;
      if (!out.back().finite) ++r.non_finite;
    };
    add(r.params, root + "/" + p, root == "/grads" ? "grad." + s.name : s.name);
    if (f.exists("/optim/exp_avg")) {
      add(r.optim, "/optim/exp_avg/" + p, "exp_avg." + s.name);
      add(r.optim, "/optim/exp_avg_sq/" + p, "exp_avg_sq." + s.name);
    }
  }
  return r;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

std::string model_line(const LlamaConfig& m) {
  return fmt::format("{} layers, hidden {}, heads {}/{} (head dim {}), mlp {}, vocab {}, rope_theta {:g}, {}, attention ",
                     m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.num_key_value_heads, m.head_dim(),
                     m.intermediate_size, m.vocab_size, m.rope_theta, m.tie_word_embeddings ? "tied" : "untied") +
         describe_attention_and_rope(m);
}

Json tensors_json(const std::vector<TensorStats>& ts) {
  Json o = Json::array();
  for (const TensorStats& t : ts)
    o.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}, {"mean", t.mean}, {"std", t.std},
                 {"max_abs", t.max_abs}, {"norm", t.norm}, {"checksum", t.checksum}});
  return o;
}

Json summary_json(const RunSummary& s) {
  Json o = {{"steps", s.steps}, {"first_loss", s.first_loss}, {"last_loss", s.last_loss}, {"head_loss", s.head_loss},
            {"tail_loss", s.tail_loss}, {"window", s.window}, {"tokens_per_s_p10", s.tokens_per_s_p10},
            {"tokens_per_s_p50", s.tokens_per_s_p50}, {"tokens_per_s_p90", s.tokens_per_s_p90}};
  for (const StepMetric& m : step_metrics())
    if (m.summary != Summary::none) o[m.name] = s[m.name];
  return o;
}

void print_summary(const RunSummary& s) {
  if (s.steps == 0) {
    print_out("metrics: none\n");
    return;
  }
  print_out("metrics: {} steps | loss {:.4f} -> {:.4f} (mean of first 10% {:.4f}, last 10% {:.4f}, {})\n", s.steps,
            s.first_loss, s.last_loss, s.head_loss, s.tail_loss, s.tail_loss < s.head_loss ? "falling" : "not falling");
  print_out("throughput: last {} steps by wall clock: {:.0f} tok/s | {:.1f} GFLOP/s | {:.1f} ms/step "
            "(per-step tok/s p10/p50/p90 {:.0f}/{:.0f}/{:.0f})\n",
            s.window, s["tokens_per_s"], s["gflops"], s["ms"], s.tokens_per_s_p10, s.tokens_per_s_p50,
            s.tokens_per_s_p90);
  std::string rest;  // every other summarised field: its median step
  for (const StepMetric& m : step_metrics()) {
    if (m.summary != Summary::median) continue;
    rest += (rest.empty() ? "" : " | ") + fmt::format("{} {:.4g}", m.name, s[m.name]);
  }
  print_out("median step: {}\n", rest);
}

}  // namespace

std::string metrics_summary_json(const std::vector<StepRecord>& history) {
  return json_text(summary_json(summarize(history)));
}

// A batch file (lct make-batch; tokens, cu_seqlens[, answer_mask, prefix_lens, segment_ids]): its documents.
int inspect_batch(const std::string& path, bool json) {
  const PackedBatch b = read_batch_file(path, std::numeric_limits<int32_t>::max());
  std::vector<int64_t> len;
  for (int64_t d = 0; d < b.num_docs(); ++d) len.push_back(b.cu_seqlens[size_t(d + 1)] - b.cu_seqlens[size_t(d)]);
  std::sort(len.begin(), len.end());
  int64_t answers = 0;
  int32_t max_token = 0;
  for (uint8_t a : b.answer_mask) answers += a;
  for (int32_t t : b.tokens) max_token = std::max(max_token, t);
  const int64_t longest = len.empty() ? 0 : len.back(), median_len = len.empty() ? 0 : len[len.size() / 2];
  // per-document mask data: prefix_lm's prefix tokens, shared_question's segments
  int64_t prefix_tokens = 0, segments = 0;
  for (int32_t p : b.prefix_lens) prefix_tokens += p;
  for (int64_t d = 0; d < b.num_docs() && !b.segment_ids.empty(); ++d)
    for (int32_t t = b.cu_seqlens[size_t(d)]; t < b.cu_seqlens[size_t(d + 1)]; ++t)
      segments += t == b.cu_seqlens[size_t(d)] || b.segment_ids[size_t(t)] != b.segment_ids[size_t(t - 1)];
  if (json) {
    const Json j = {{"file", path}, {"format", "batch"}, {"tokens", b.num_tokens()}, {"documents", b.num_docs()},
                    {"targets", b.num_targets()}, {"longest_document", longest}, {"median_document", median_len},
                    {"max_token", max_token}, {"answers", answers}, {"prefix_lens", !b.prefix_lens.empty()},
                    {"prefix_tokens", prefix_tokens}, {"segment_ids", !b.segment_ids.empty()},
                    {"segments", segments}};
    print_out("{}\n", json_text(j));
    return 0;
  }
  print_out("file: {}\nformat: batch (lct make-batch)\n", path);
  print_out("tokens {} | documents {} (longest {}, median {}) | targets {} | largest token id {}{}\n", b.num_tokens(),
            b.num_docs(), longest, median_len, b.num_targets(), max_token,
            b.answer_mask.empty() ? "" : " | answers " + std::to_string(answers));
  if (!b.prefix_lens.empty())
    print_out("prefix_lens (prefix_lm): {} prefix tokens in {} documents\n", prefix_tokens, b.num_docs());
  if (!b.segment_ids.empty())
    print_out("segment_ids (shared_question): {} segments (questions and answers) in {} documents\n", segments,
              b.num_docs());
  return 0;
}

// A per-position loss file (lct eval --per-position-out): its bins.
int inspect_per_position(const std::string& path, bool json) {
  std::istringstream in(read_regular_file(path, "inspect"));
  std::string line;
  std::getline(in, line);
  int64_t bins = 0, targets = 0, last_end = 0;
  double lo = INFINITY, hi = -INFINITY, weighted = 0;
  while (std::getline(in, line)) {
    long long b = 0, e = 0, n = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "%lld,%lld,%lld,%lf", &b, &e, &n, &loss) != 4)
      throw std::runtime_error(path + ": not a per-position loss row: '" + line + "'");
    ++bins, targets += n, last_end = e, weighted += loss * double(n);
    lo = std::min(lo, loss), hi = std::max(hi, loss);
  }
  const double mean = targets > 0 ? weighted / double(targets) : NAN;
  if (json) {
    const Json j = {{"file", path},      {"format", "per_position"}, {"bins", bins},
                    {"positions", last_end}, {"targets", targets},       {"mean_loss", mean},
                    {"min_bin_loss", lo},    {"max_bin_loss", hi}};
    print_out("{}\n", json_text(j));
    return 0;
  }
  print_out("file: {}\nformat: per-position loss (lct eval --per-position-out)\n", path);
  print_out("{} bins over positions 0-{} | {} targets | mean loss {:.4f} (bins {:.4f} to {:.4f})\n", bins, last_end,
            targets, mean, lo, hi);
  return 0;
}

// A per-document file (lct eval --per-document-out): documents, targets, mean loss and
// the documents answered. Every row has the header's 8 fields, each a whole number (the
// mean loss a number, loss and answered empty where the document has no targets or
// answers).
int inspect_per_document(const std::string& path, bool json) {
  std::istringstream in(read_regular_file(path, "inspect"));
  std::string line;
  std::getline(in, line);
  int64_t documents = 0, tokens = 0, targets = 0, answers = 0, answers_correct = 0, with_answers = 0,
          answered = 0;
  double weighted = 0;
  while (std::getline(in, line)) {
    const auto bad = [&] { return std::runtime_error(path + ": not a per-document row: '" + line + "'"); };
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    if (!line.empty() && line.back() == ',') f.push_back("");
    if (f.size() != 8) throw bad();
    const auto whole = [&](const std::string& x) {
      int64_t v = 0;
      if (parse_integer_text(x, v) != IntegerText::ok || v < 0) throw bad();
      return v;
    };
    const int64_t n = whole(f[2]), t = whole(f[3]), a = whole(f[5]), c = whole(f[6]);
    whole(f[0]), whole(f[1]);
    if (t > 0) {
      char* end = nullptr;
      const double loss = std::strtod(f[4].c_str(), &end);
      if (f[4].empty() || *end != '\0' || !std::isfinite(loss)) throw bad();
      weighted += loss * double(t);
    } else if (!f[4].empty()) {
      throw bad();
    }
    if (n == 0 || t >= n || c > a || (a > 0) == f[7].empty()) throw bad();
    if (a > 0) {
      const int64_t ok = whole(f[7]);
      if (ok > 1 || (ok == 1) != (c == a)) throw bad();
      ++with_answers, answered += ok;
    }
    ++documents, tokens += n, targets += t, answers += a, answers_correct += c;
  }
  const double mean = targets > 0 ? weighted / double(targets) : NAN;
  if (json) {
    Json j = {{"file", path},       {"format", "per_document"}, {"documents", documents}, {"tokens", tokens},
              {"targets", targets}, {"mean_loss", mean},        {"answers", answers},
              {"answers_correct", answers_correct}, {"documents_with_answers", with_answers},
              {"documents_answered", answered}};
    print_out("{}\n", json_text(j));
    return 0;
  }
  print_out("file: {}\nformat: per-document loss and answers (lct eval --per-document-out)\n", path);
  print_out("{} documents | {} tokens | {} targets | mean loss {:.4f}", documents, tokens, targets, mean);
  if (with_answers > 0)
    print_out(" | answers {} of {} right | answered {} of {} documents", answers_correct, answers, answered,
              with_answers);
  print_out("\n");
  return 0;
}

// inspect --json of a checkpoint or parameter file.
Json file_json(const std::string& path, const FileReport& r, int64_t num_params) {
  const LlamaConfig& m = r.model;
  Json model = {{"vocab_size", m.vocab_size}, {"hidden_size", m.hidden_size},
                {"intermediate_size", m.intermediate_size}, {"num_hidden_layers", m.num_hidden_layers},
                {"num_attention_heads", m.num_attention_heads}, {"num_key_value_heads", m.num_key_value_heads},
                {"rope_theta", m.rope_theta}, {"rope_scaling", rope_scaling_name(m.rope_scaling)},
                {"rope_scaling_factor", m.rope_scaling_factor}, {"rope_original_length", m.rope_original_length},
                {"rms_norm_eps", m.rms_norm_eps}, {"tie_word_embeddings", m.tie_word_embeddings},
                {"attention_kernel", attention_kernel_name(m.attention_kernel)},
                {"attention_mask", mask_kind_name(m.attention_mask.kind)},
                {"attention_window", m.attention_mask.window},
                {"attention_sink_tokens", m.attention_mask.sink_tokens},
                {"attention_block_size", m.attention_mask.block_size}};
  if (m.attention_kernel == AttentionKernel::dca) {
    model["dca_chunk_size"] = m.dca_chunk_size;
    model["dca_local_size"] = m.dca_local_size;
    model["dca_mscale"] = m.dca_mscale;
    model["dca_mscale_original_length"] = m.dca_mscale_original_length;
  }
  model["logit_scaling"] = logit_scaling_name(m.logit_scaling.kind);
  if (m.logit_scaling.on()) model["logit_scaling_length"] = m.logit_scaling.length;
  model["num_params"] = num_params;
  Json o = {{"file", path}, {"format", r.format}, {"format_version", r.format_version}, {"model", model}};
  if (r.is_checkpoint) {
    o["step"] = r.header.state.step;
    o["tokens_seen"] = r.header.state.tokens_seen;
    o["next_sequence"] = r.header.state.next_sequence;
    o["optimizer"] = {{"kind", r.header.optimizer_kind},
                      {"step_count", r.header.optimizer_step},
                      {"moments", !r.optim.empty()}};
    o["metrics"] = summary_json(r.summary);
  }
  if (r.has_config) o["config"] = config_to_toml(r.config);
  o["checksums"] = {{"checked", r.checked}, {"failed", r.corrupt}, {"non_finite", r.non_finite}};
  o["tensors"] = tensors_json(r.params);
  o["optimizer_tensors"] = tensors_json(r.optim);
  return o;
}

int inspect_file(const std::string& path, bool json) {
  {  // every file lct writes: checkpoints, parameter and gradient files, batches, CSVs
    require_regular_file(path, "inspect");
    std::string head(128, '\0');
    std::ifstream peek(path, std::ios::binary);
    peek.read(head.data(), std::streamsize(head.size()));
    head.resize(size_t(peek.gcount()));
    if (head.rfind(kPerPositionHeader, 0) == 0) return inspect_per_position(path, json);
    if (head.rfind(kPerDocumentHeader, 0) == 0) return inspect_per_document(path, json);
    H5File f = H5File::open_read(path);
    if (f.exists("/tokens") && f.exists("/cu_seqlens") && !f.exists("/params")) {
      f.close_checked();
      return inspect_batch(path, json);
    }
  }
  const FileReport r = read_report(path, true);
  const int64_t num_params = [&] {
    int64_t n = 0;
    const TensorTable table = build_llama_table(r.model);  // keep alive over the loop
    for (const TensorSpec& s : table.specs()) n += s.numel;
    return n;
  }();
  if (json) {
    print_out("{}\n", json_text(file_json(path, r, num_params)));
    return r.failed() ? 2 : 0;
  }

  print_out("file: {}\n", path);
  print_out("format: {} v{}\n", r.format, r.format_version);
  print_out("model: {}; {:.3f}M params\n", model_line(r.model), double(num_params) / 1e6);
  if (r.has_config) {
    const Config& c = r.config;
    print_out("data: {}{}, seq_len {}, doc_lengths {} (max {}) | train: {} lr {:g}, {} steps x {} "
              "micro-batches, seed {}\n",
              data_source_name(c.data.source), c.data.path.empty() ? "" : " '" + c.data.path + "'", c.data.seq_len,
              doc_length_dist_name(c.data.doc_lengths), c.data.max_doc_len, optimizer_name(c.train.optimizer),
              c.train.lr, c.train.steps, c.train.micro_batches, c.train.seed);
  }
  if (r.is_checkpoint) {
    print_out("progress: step {}, {} tokens seen, next sequence {}\n", r.header.state.step,
              r.header.state.tokens_seen, r.header.state.next_sequence);
    print_out("optimizer: {}, step count {}, moments {}\n", r.header.optimizer_kind, r.header.optimizer_step,
              r.optim.empty() ? "absent" : "present");
  } else {
    print_out("optimizer: absent (parameters only)\n");
  }
  print_out("checksums: {} checked, {} failed{}\n", r.checked, r.corrupt,
            r.checked == 0 ? " (file has no checksums)" : "");
  if (r.non_finite > 0) print_out("NON-FINITE: {} tensors hold inf or NaN\n", r.non_finite);
  // (">" on the numbers: fmt 9 would left-align inf and nan in a width)
  print_out("\n{:<52} {:<14} {:<8} {:>11} {:>11} {:>11} {:>11} {}\n", "tensor", "shape", "dtype", "mean", "std",
            "max|x|", "norm", "checksum");
  for (const auto* list : {&r.params, &r.optim})
    for (const TensorStats& t : *list)
      print_out("{:<52} {:<14} {:<8} {:>11.4e} {:>11.4e} {:>11.4e} {:>11.4e} {}\n", t.name, shape_text(t.shape),
                t.dtype, t.mean, t.std, t.max_abs, t.norm, t.checksum + (t.finite ? "" : " NON-FINITE"));
  print_out("\n");
  if (r.is_checkpoint) print_summary(r.summary);
  return r.failed() ? 2 : 0;
}

int compare_files(const std::string& a, const std::string& b, bool json) {
  const FileReport ra = read_report(a, false), rb = read_report(b, false);
  std::vector<ConfigDifference> diffs;
  if (ra.has_config && rb.has_config) diffs = config_differences(ra.config, rb.config);
  const RunSummary& sa = ra.summary;
  const RunSummary& sb = rb.summary;
  if (json) {
    Json differences = Json::array();
    for (const ConfigDifference& d : diffs) differences.push_back({{"key", d.key}, {"a", d.a}, {"b", d.b}});
    const Json o = {{"a", {{"file", a}, {"step", ra.header.state.step}, {"metrics", summary_json(sa)}}},
                    {"b", {{"file", b}, {"step", rb.header.state.step}, {"metrics", summary_json(sb)}}},
                    {"tokens_per_s_ratio_b_over_a", sa["tokens_per_s"] > 0 && std::isfinite(sb["tokens_per_s"] / sa["tokens_per_s"])
                                                        ? Json(sb["tokens_per_s"] / sa["tokens_per_s"])
                                                        : Json(nullptr)},
                    {"config_differences", differences}};
    print_out("{}\n", json_text(o));
    return 0;
  }
  auto row = [](const std::string& label, const std::string& x, const std::string& y, const std::string& note = "") {
    print_out("{:<46} {:<22} {:<22} {}\n", label, x, y, note);
  };
  auto num = [](double v, fmt::format_string<double> f) { return fmt::vformat(f, fmt::make_format_args(v)); };
  // a ratio only of finite figures with A's non-zero: two runs without a figure (0 and 0)
  // would print "-nanx", one without it inf
  auto ratio = [](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && x != 0 ? fmt::format("B/A {:.3f}x", y / x) : std::string("B/A n/a");
  };
  print_out("A: {}\nB: {}\n\n", a, b);
  row("", "A", "B");
  row("attention", describe_attention(ra.model), describe_attention(rb.model));
  row("steps", std::to_string(sa.steps), std::to_string(sb.steps));
  row("final loss", num(sa.last_loss, "{:.4f}"), num(sb.last_loss, "{:.4f}"));
  row("loss, last 10% of steps", num(sa.tail_loss, "{:.4f}"), num(sb.tail_loss, "{:.4f}"));
  row("tokens/s (wall clock)", num(sa["tokens_per_s"], "{:.0f}"), num(sb["tokens_per_s"], "{:.0f}"),
      ratio(sa["tokens_per_s"], sb["tokens_per_s"]));
  row("per-step tok/s p50", num(sa.tokens_per_s_p50, "{:.0f}"), num(sb.tokens_per_s_p50, "{:.0f}"));
  for (const StepMetric& m : step_metrics()) {  // every other summarised field, as the schema says
    if (m.summary == Summary::none || m.name == "tokens_per_s") continue;
    const char* how = m.summary == Summary::rate ? " (wall clock)" : m.summary == Summary::mean ? " (mean)" : " (median)";
    row(m.name + how, num(sa[m.name], "{:.4g}"), num(sb[m.name], "{:.4g}"), ratio(sa[m.name], sb[m.name]));
  }
  print_out("\nconfig differences ({}):\n", diffs.size());
  for (const ConfigDifference& d : diffs) print_out("  {:<28} A = {:<18} B = {}\n", d.key, d.a, d.b);
  if (diffs.empty()) print_out("  none\n");
  return 0;
}

}  // namespace lct

namespace lct {

Command add_inspect_command(CLI::App& lct) {
  struct Options {
    std::vector<std::string> files;
    bool json = false, compare = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* inspect = lct.add_subcommand("inspect", "show a checkpoint, or compare two runs");
  inspect->add_option("files", o->files, "checkpoint file (two with --compare)")->required();
  inspect->add_flag("--compare", o->compare, "compare two runs side by side (A.h5 B.h5)");
  inspect->add_flag("--json", o->json, "machine-readable output");
  return {inspect, [o] {
            if (o->compare != (o->files.size() == 2) || o->files.size() > 2)
              throw std::invalid_argument(o->compare ? "inspect --compare needs exactly two files"
                                                     : "inspect takes one file (use --compare A B for two)");
            return o->compare ? compare_files(o->files[0], o->files[1], o->json) : inspect_file(o->files[0], o->json);
          }};
}

}  // namespace lct
