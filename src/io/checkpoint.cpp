#include "src/io/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "src/util/log.h"
#include "src/io/params_io.h"

namespace lct {
namespace fs = std::filesystem;

namespace {
// A run id as new_run_identity makes them (16 hex digits); older or hand-made ones may be
// any short word, never quotes, spaces or newlines (run.toml holds it in quotes).
bool is_run_id(const std::string& id) {
  if (id.size() > 64) return false;
  for (const char ch : id)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') return false;
  return true;  // "" = none (checkpoints before run ids)
}

int64_t need_int(const H5File& f, const std::string& obj, const char* name) {
  const auto v = f.attr_int(obj, name);
  if (!v) throw std::runtime_error(f.path() + ": missing attribute " + obj + "@" + name);
  return *v;
}

// /optim@step_count, which must lie in [0, the trainer's step]
int64_t optimizer_step_of(const H5File& f, int64_t trainer_step) {
  const int64_t v = need_int(f, "/optim", "step_count");
  if (v < 0 || v > trainer_step)
    throw std::runtime_error(f.path() + ": /optim@step_count " + std::to_string(v) +
                             " is outside [0, /trainer@step = " + std::to_string(trainer_step) + "]");
  return v;
}
}  // namespace

void write_checkpoint(const std::string& path, const std::string& config_toml,
                      const LlamaModel& model, Optimizer& optimizer, const TrainerState& state,
                      const std::vector<StepRecord>& history) {
  write_h5_atomically(path, [&](H5File& f) {
    f.set_attr("/", "format", std::string(kCheckpointFormat));
    f.set_attr("/", "format_version", kCheckpointFormatVersion);
    f.set_attr("/", "step", state.step);
    f.write_string("/config", config_toml);
    write_model_attrs(f, model.config());
    write_tensors(f, "/params", model.table(), model.params.data());

    f.set_attr("/optim", "kind", std::string(optimizer_name(optimizer.config().kind)));
    f.set_attr("/optim", "step_count", optimizer.step_count());
    if (optimizer.config().kind == OptimizerKind::adamw) {
      write_tensors(f, "/optim/exp_avg", model.table(), optimizer.exp_avg().data());
      write_tensors(f, "/optim/exp_avg_sq", model.table(), optimizer.exp_avg_sq().data());
    }

    f.set_attr("/trainer", "step", state.step);
    f.set_attr("/trainer", "tokens_seen", state.tokens_seen);
    f.set_attr("/trainer", "next_sequence", state.next_sequence);
    f.set_attr("/trainer", "seed", state.seed);
    if (!state.run_id.empty()) f.set_attr("/trainer", "run_id", state.run_id);

    const int64_t n = int64_t(history.size());
    for (const StepMetric& c : step_metrics()) {
      if (c.integer) {
        std::vector<int64_t> v;
        for (const StepRecord& r : history) v.push_back(int64_t(c.get(r)));
        f.write_i64("/metrics/" + c.name, {n}, v.data());
      } else {
        std::vector<double> v;
        for (const StepRecord& r : history) v.push_back(c.get(r));
        f.write_f64("/metrics/" + c.name, {n}, v.data());
      }
    }
  }, verify_checkpoint);
}

CheckpointContents verify_checkpoint(const H5File& f) {
  CheckpointContents c = read_checkpoint_header(f);
  const TensorTable table = build_llama_table(c.model);
  // every tensor's shape first: /model attributes that disagree with the stored tensors
  // end here, before a buffer is sized from them
  std::vector<std::string> roots = {"/params"};
  if (c.has_optimizer && c.optimizer_kind == optimizer_name(OptimizerKind::adamw))
    roots.insert(roots.end(), {"/optim/exp_avg", "/optim/exp_avg_sq"});
  for (const std::string& root : roots)
    for (const TensorSpec& t : table.specs()) {
      const std::string ds = root + "/" + hf_name_to_path(t.name);
      if (!f.exists(ds)) throw std::runtime_error(f.path() + ": missing tensor " + ds);
      if (f.shape(ds) != t.shape)
        throw std::runtime_error(f.path() + ": tensor " + ds + " does not have the shape /model describes");
    }
  std::vector<float> scratch(static_cast<size_t>(table.total()));
  for (const std::string& root : roots) read_tensors(f, root, table, scratch.data());
  return c;
}

CheckpointContents read_checkpoint_header(const H5File& f) {
  CheckpointContents c;
  const auto format = f.attr_string("/", "format");
  if (!format || *format != kCheckpointFormat)
    throw std::runtime_error(f.path() + ": not an lct checkpoint (root @format is " +
                             (format ? "'" + *format + "'" : std::string("missing")) +
                             ", expected '" + kCheckpointFormat + "')");
  c.format_version = need_int(f, "/", "format_version");
  if (c.format_version != kCheckpointFormatVersion)
    throw std::runtime_error(f.path() + ": checkpoint format_version " +
                             std::to_string(c.format_version) + " is not supported (this lct reads " +
                             std::to_string(kCheckpointFormatVersion) + ")");
  c.config_toml = f.read_string("/config");
  c.model = read_model_attrs(f);
  c.state.step = need_int(f, "/trainer", "step");
  c.state.tokens_seen = need_int(f, "/trainer", "tokens_seen");
  c.state.next_sequence = need_int(f, "/trainer", "next_sequence");
  c.state.seed = need_int(f, "/trainer", "seed");
  c.state.run_id = f.attr_string("/trainer", "run_id").value_or(std::string());
  // as strict as typed values: counts in range, the run id as lct makes them (it is
  // written into run.toml and compared with the folder's)
  const auto bad = [&](const std::string& what) { return std::runtime_error(f.path() + ": " + what); };
  if (c.state.step < 0 || c.state.next_sequence < 0 || c.state.tokens_seen < 0)
    throw bad("/trainer@step, @next_sequence or @tokens_seen is negative");
  // (in double: step x 2^40 overflows int64 for a crafted step; the step itself is
  // checked against its metrics rows below)
  if (c.state.next_sequence > c.state.tokens_seen ||
      double(c.state.tokens_seen) > double(c.state.step) * double(kMaxTokensPerStep))
    throw bad("/trainer@next_sequence " + std::to_string(c.state.next_sequence) + " and @tokens_seen " +
              std::to_string(c.state.tokens_seen) + " cannot follow " + std::to_string(c.state.step) +
              " steps (each sequence holds at least one token, a step at most " +
              std::to_string(kMaxTokensPerStep) + ")");
  if (c.state.seed < 0) throw bad("/trainer@seed " + std::to_string(c.state.seed) + " is negative");
  if (!is_run_id(c.state.run_id))
    throw bad("/trainer@run_id is not a run id lct writes (1 to 64 letters, digits, '-' or '_')");

  c.has_optimizer = f.exists("/optim");
  if (c.has_optimizer) {
    const auto kind = f.attr_string("/optim", "kind");
    if (!kind) throw std::runtime_error(f.path() + ": missing attribute /optim@kind");
    c.optimizer_kind = *kind;
    c.optimizer_step = optimizer_step_of(f, c.state.step);
  }

  const int64_t n = c.state.step;
  // one metrics row per step: checked against a stored dataset before anything is sized
  // by @step (a crafted step = 1e15 must not allocate 1e15 rows)
  const std::string rows = "/metrics/" + step_metrics().front().name;
  if (!f.exists(rows)) throw std::runtime_error(f.path() + ": missing dataset " + rows);
  if (const std::vector<int64_t> shape = f.shape(rows); shape.size() != 1 || shape[0] != n)
    throw std::runtime_error(f.path() + ": " + rows + " has " + (shape.empty() ? std::string("no") : std::to_string(shape[0])) +
                             " rows but /trainer@step is " + std::to_string(n));
  c.history.assign(size_t(n), StepRecord{});
  for (const StepMetric& col : step_metrics()) {
    const std::string ds = "/metrics/" + col.name;
    if (!f.exists(ds)) {
      if (col.optional) continue;
      throw std::runtime_error(f.path() + ": missing dataset " + ds);
    }
    const std::vector<double> v = f.read_f64(ds);
    if (int64_t(v.size()) != n)
      throw std::runtime_error(f.path() + ": " + ds + " has " + std::to_string(v.size()) +
                               " rows, expected one per step (" + std::to_string(n) + ")");
    for (int64_t i = 0; i < n; ++i) col.set(c.history[size_t(i)], v[size_t(i)]);
  }
  return c;
}

void load_checkpoint_tensors(const H5File& f, LlamaModel& model, Optimizer* optimizer) {
  read_tensors(f, "/params", model.table(), model.params.data());
  refuse_non_finite_params(model.table(), model.params.data(), f.path());
  if (!optimizer) return;
  const auto kind = f.attr_string("/optim", "kind");
  if (!kind) throw std::runtime_error(f.path() + ": missing optimizer state /optim");
  if (*kind != optimizer_name(optimizer->config().kind)) {
    log_warn(f.path() + ": checkpoint optimizer is " + *kind + ", run uses " +
             optimizer_name(optimizer->config().kind) + "; optimizer state starts fresh");
    return;
  }
  if (optimizer->config().kind == OptimizerKind::adamw) {
    read_tensors(f, "/optim/exp_avg", model.table(), optimizer->exp_avg().data());
    read_tensors(f, "/optim/exp_avg_sq", model.table(), optimizer->exp_avg_sq().data());
  }
  optimizer->set_step_count(optimizer_step_of(f, need_int(f, "/trainer", "step")));
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && e.path().extension() == ".h5") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string latest_checkpoint(const std::string& dir) {
  const std::vector<std::string> files = list_checkpoints(dir);
  for (auto p = files.rbegin(); p != files.rend(); ++p) {
    try {
      H5File f = H5File::open_read(*p);
      verify_checkpoint(f);
      return *p;
    } catch (const std::exception& e) {
      log_warn("train.resume = auto: skipping " + *p + ", it does not verify: " + e.what());
    }
  }
  return "";
}

}  // namespace lct
