#include "src/train/trainer.h"

#include <fmt/format.h>
#include <cblas.h>
#include <signal.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>

#include "parallel/trace_gather.h"
#include "src/io/output_files.h"
#include "src/io/trace_json.h"
#include "src/config/config_text.h"
#include "src/train/flops.h"
#include "src/train/machine_choices.h"
#include "src/train/step_model.h"
#include "src/io/h5io.h"
#include "src/io/hf_model.h"
#include "src/util/log.h"
#include "src/io/params_io.h"
#include "src/io/run_folder.h"

namespace lct {
namespace fs = std::filesystem;

std::atomic<int> g_stop_signal{0};

namespace {
// the first signal is the one the run stops for (and exits 128 + it with)
void on_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

Trainer::Trainer(RunPlan plan)
    : Trainer(
          [&] {
            resolve_machine_choices(plan, single_process_grid());
            return plan;
          }(),
          single_process_grid()) {}

Trainer::Trainer(const RunPlan& plan, const ProcessGrid& grid)
    : plan_(plan),
      grid_(grid),
      hosts_(gather_rank_hosts(grid.world_size())),
      stream_(plan),
      model_(plan.model, plan.stages[size_t(grid.coords().pp_rank)]),
      owned_(owned_ranges(model_.table(), model_.config(), model_.stage())),
      counted_(counted_ranges(model_.table(), model_.config(), model_.stage())),
      tied_(tied_embedding_range(model_.table(), model_.config(), model_.stage())),
      optimizer_(plan.optimizer, model_.table()),
      reducer_(model_.table(), owned_, grid.dp_cp(), plan.reduction.bucket_size, plan.reduction.overlap),
      executor_(model_, grid.pp(), plan.layout.pp, grid.coords().pp_rank, plan.schedule, plan.lanes) {
  if (plan.world != grid.world_size() || plan.layout.dp != grid.layout().dp ||
      plan.layout.pp != grid.layout().pp || plan.layout.cp != grid.layout().cp)
    throw std::logic_error("Trainer: the run plan's layout is not the process grid's");
  if (!plan.machine.resolved) throw std::logic_error("Trainer: the run plan's machine choices are not resolved");
  // a SIGINT/SIGTERM while seeking the data stream (a resumed run's first step) ends the
  // seek at once: nothing is lost, the resumed checkpoint is untouched
  stream_.packer().set_interrupt([] { return g_stop_signal.load() != 0; });
  model_.set_arithmetic(plan.arithmetic());
  copies_ = {model_.weight_copy_bits(), model_.weight_copy_ranges()};
  if (grid.is_root() && plan.run.heartbeat_s > 0) {
    model_.set_progress(&progress_);
    heartbeat_ = std::make_unique<Heartbeat>(plan.run.heartbeat_s);
  }
  model_.set_recompute(plan.recompute);
  model_.set_tile_tokens(plan.tile_tokens);
  placement_ = make_placement(plan, grid);
  optimizer_.set_owned_ranges(owned_);
  init_llama_params(model_.table(), model_.config(), uint64_t(plan.seed), model_.params.data());
  state_.seed = plan.seed;
}

void Trainer::resume_from(const std::string& path) {
  H5File f = H5File::open_read(path);
  const CheckpointContents c = read_checkpoint_header(f);
  // the model and its attention function must match; where attention runs may change
  for (const std::string& w : resume_warnings(c.config_toml, path + ":/config", plan_.config_text)) log_warn(w);
  if (c.state.step > plan_.run.steps)
    throw std::runtime_error(path + ": checkpoint is at step " + std::to_string(c.state.step) +
                             ", beyond train.steps = " + std::to_string(plan_.run.steps));
  // Load into copies first so a failure leaves this trainer untouched. Checkpoints are
  // layout-free: every rank reads the whole file and uses its stage's part.
  LlamaModel model(model_.config());
  Optimizer optimizer(plan_.optimizer, model.table());
  load_checkpoint_tensors(f, model, &optimizer);
  model_.params = std::move(model.params);
  copies_follow_params_ = false;
  optimizer_.exp_avg() = std::move(optimizer.exp_avg());
  optimizer_.exp_avg_sq() = std::move(optimizer.exp_avg_sq());
  optimizer_.set_step_count(optimizer.step_count());
  state_ = c.state;
  state_.seed = plan_.seed;
  resumed_ = true;
  history_ = c.history;
}

void Trainer::init_from(const std::string& path) {
  const HfModelFiles files = find_hf_model_files(path);
  LlamaModel model(model_.config());
  read_hf_params(files, model_.config(), model.table(), model.params.data());
  model_.params = std::move(model.params);
  copies_follow_params_ = false;
  if (grid_.is_root())
    log_info("train.init_from: parameters from {} ({} weight file(s))", path, files.weights.size());
}

// This rank's share of the step's micro-batches (the step model, src/train/step_model.h).
void Trainer::take_local_batches() {
  local_ = step_micro_batches(
      plan_, [this](int64_t index) { return stream_.sequence(index); }, state_.next_sequence, grid_.coords().dp_rank,
      grid_.coords().cp_rank);
}

// The step's targets, tokens and attention pairs over dp x cp (one small all-reduce), and
// this rank's own pairs.
Trainer::StepCounts Trainer::count_step(double& comm_s) {
  double counts[3] = {0, 0, 0};  // targets, tokens, attention pairs
  for (const LocalBatch& local : local_) {
    const MicroBatchCost cost = micro_batch_cost(plan_, local);
    counts[0] += double(local.num_targets());
    counts[1] += double(cost.tokens);
    counts[2] += double(cost.pairs);
  }
  const double my_pairs = counts[2];
  const int64_t my_tokens = int64_t(counts[1]);
  allreduce_sum(counts, 3, grid_.dp_cp(), &comm_s);
  return {int64_t(counts[0]), int64_t(counts[1]), int64_t(counts[2]), my_pairs, my_tokens};
}

// A step whose loss or gradient is not finite stops the run before the optimizer uses it.
void Trainer::refuse_non_finite(const StepRecord& r) const {
  if (!std::isfinite(r.grad_norm) || !std::isfinite(r.loss)) {
    // before any update the parameters are the init's (or a checkpoint's): the learning
    // rate cannot be the cause of a first step that is not finite
    const bool first = r.step == 1 && !resumed_;
    const std::string init = fmt::format("model.init_std = {:g} is likely too large", double(model_.config().init_std));
    throw std::runtime_error("step " + std::to_string(r.step) + ": loss or gradient is not finite (loss " +
                             std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) + "); " +
                             (first ? std::string(init) + ", or check the data" : "lower train.lr or check the data"));
  }
}

// Every rank's figures of the step, reduced over ranks into r (src/metrics/step_metrics.h):
// compute and communication time, its stage's bubble and peak activation bytes, the
// exchange's bytes and time, and what each rank trained and sent (rank_tokens,
// rank_attention_pairs, rank_exchange_bytes).
void Trainer::record_rank_figures(StepRecord& r, const PipelineStepStats& pipe, const PlacementStats& placement,
                                  double step_s, double comm_s, const StepCounts& counts) {
  const Layout& layout = grid_.layout();
  const int64_t mb = plan_.micro_batches;
  // this rank's own value of every figure reduced over ranks (src/metrics/step_metrics.h)
  StepRecord mine;
  mine.compute_max_over_mean = step_s - comm_s;  // compute seconds
  mine.idle_fraction = comm_s;  // seconds: the schema divides by the step's time
  mine.bubble_fraction = pipe.bubble_fraction();
  mine.peak_activation_bytes = pipe.peak_activation_bytes;
  mine.pipeline_bytes_sent = double(pipe.bytes_sent);
  mine.attention_pairs_max_over_mean = counts.my_pairs;
  mine.attention_pairs_served_max_over_mean = placement.pairs_served;
  mine.exchange_bytes_sent = double(placement.bytes_sent);
  mine.exchange_exposed_fraction = placement.exposed_seconds;
  mine.exchange_hidden_fraction = placement.hidden_seconds;
  const double layer_calls =
      double(plan_.stages[size_t(grid_coordinates(layout, grid_.world_rank()).pp_rank)].num_layers()) * double(mb);
  mine.exchange_bytes_per_layer = double(placement.bytes_sent) / layer_calls;
  mine.exchange_exposed_ms_per_layer = 1e3 * placement.exposed_seconds / layer_calls;
  mine.peak_rss_bytes = peak_rss_bytes();
  int64_t largest = 1;  // tokens of this rank's largest micro-batch
  for (const LocalBatch& local : local_) largest = std::max(largest, local.num_tokens());
  mine.activation_bytes_per_token = double(model_.stored_bytes()) / double(largest);
  mine.scratch_bytes_per_token = double(model_.scratch_bytes()) / double(largest);
  std::vector<int> stage_of(size_t(grid_.world_size()));
  for (int k = 0; k < grid_.world_size(); ++k) stage_of[size_t(k)] = grid_coordinates(layout, k).pp_rank;
  reduce_over_ranks(allgather_rows(rank_values(mine), grid_.world()), stage_of, layout.pp, step_s, r);
  // what every rank trained (the step model's batches), for metrics.jsonl
  // and the bytes its attention exchange sent
  const std::vector<double> trained =
      allgather_rows({double(counts.my_tokens), counts.my_pairs, double(placement.bytes_sent)}, grid_.world());
  for (size_t k = 0; k + 2 < trained.size(); k += 3) {
    r.rank_tokens.push_back(int64_t(trained[k]));
    r.rank_attention_pairs.push_back(int64_t(trained[k + 1]));
    r.rank_exchange_bytes.push_back(int64_t(trained[k + 2]));
  }
  if (layout.pp > 1) r.bubble_theoretical = theoretical_bubble(layout.pp, int(mb));
  else r.bubble_fraction = 0;
}

StepRecord Trainer::train_step() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const int64_t step = state_.step;  // 0-based index of this step
  const int64_t mb = plan_.micro_batches;
  const Layout& layout = grid_.layout();
  double comm_s = 0;  // this rank's time inside MPI calls

  StepCounts counts;
  {
    const ScopedSpan span("batches");
    take_local_batches();
    counts = count_step(comm_s);
  }
  const int64_t targets = counts.targets, tokens = counts.tokens, pairs = counts.pairs;
  // the heartbeat (rank 0) follows this step's passes until it ends, however it ends
  if (heartbeat_) progress_.reset();
  const HeartbeatScope heartbeat(
      heartbeat_.get(),
      [this, step = step + 1, flops = heartbeat_ ? model_.pass_flops(counts.my_tokens, int64_t(counts.my_pairs)) : 0.0,
       layers = plan_.model.num_hidden_layers, micro_batches = plan_.micro_batches](double elapsed_s) {
        return step_heartbeat_line(step, progress_.position(), flops, layers, micro_batches, elapsed_s);
      },
      t0);
  // a step without one target learns nothing (loss 0, zero gradients): said once per
  // step, and a run none of whose steps had one fails before its final checkpoint
  if (targets == 0)
    log_info("step {} has no targets to learn from ({}): its gradients are zero", state_.step + 1, no_targets_reason());
  run_targets_ += targets;
  // Every micro-batch's gradient is scaled by 1 / (global target count), so summing
  // over micro-batches and ranks gives the gradient of the global mean loss.
  const float grad_scale = targets > 0 ? 1.0f / float(targets) : 0.0f;

  prepare_passes();
  placement_.placement->reset_stats();
  const PipelineStepStats pipe =
      executor_.run(local_, grad_scale, reducer_, *placement_.placement, grid_.tied_embedding(), tied_);
  comm_s += reducer_.comm_seconds() + pipe.recv_wait_seconds + pipe.send_wait_seconds;
  const PlacementStats placement_stats = placement_.placement->stats();
  comm_s += placement_stats.exposed_seconds;

  // Loss and retrieval counts (only the last stage has them), and whether any rank was
  // asked to stop; over the whole world, so every rank logs the same record.
  double sums[4] = {pipe.loss.loss_sum, double(pipe.loss.answers),
                    double(pipe.loss.answers_correct), g_stop_signal.load() != 0 ? 1.0 : 0.0};
  allreduce_sum(sums, 4, grid_.world(), &comm_s);
  stop_requested_ = sums[3] > 0;

  StepRecord r;
  r.step = step + 1;
  r.loss = targets > 0 ? sums[0] / double(targets) : 0.0;
  update_weights(r, step, comm_s);
  state_.step += 1;
  state_.next_sequence += layout.dp * mb;
  state_.tokens_seen += tokens;

  // Straggler and pipeline figures: every rank's compute and communication time, its
  // stage's bubble and peak activation bytes.
  const auto t_end = Clock::now();
  const double step_s = std::chrono::duration<double>(t_end - t0).count();
  trace_span("step", TraceTrack::step, t0, t_end, state_.step);
  record_rank_figures(r, pipe, placement_stats, step_s, comm_s, counts);
  placement_.placement->observe_step(step_s - comm_s, counts.my_tokens);  // CAD learns this rank's speed
  r.ms = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens = tokens;
  r.targets = targets;
  r.tokens_per_s = double(tokens) / (r.ms / 1e3);
  r.gflops = train_step_flops(model_.config(), tokens, pairs) / (r.ms / 1e3) / 1e9;
  r.answers = int64_t(sums[1]);
  r.answers_correct = int64_t(sums[2]);
  history_.push_back(r);
  return r;
}

// Before a step's passes: zero gradients, and (bf16) the weight copies as the weights
// are now, unless the last optimizer step wrote the copies as it updated them.
void Trainer::prepare_passes() {
  {
    const ScopedSpan span("zero gradients");
    model_.zero_grads();
  }
  const ScopedSpan span("weight copies");
  if (!copies_follow_params_) model_.refresh_weight_copies();
}

// The gradient norm over the whole model (every rank holds its stage's reduced
// gradient: squares summed over stages), the refusal of a non-finite step, clipping and
// the optimizer step of step index `step`; r gets the norm and the learning rate.
void Trainer::update_weights(StepRecord& r, int64_t step, double& comm_s) {
  {
    const ScopedSpan span("gradient norm");
    double sq = sum_of_squares(model_.grads, counted_);
    allreduce_sum(&sq, 1, grid_.pp(), &comm_s);
    r.grad_norm = std::sqrt(sq);
  }
  refuse_non_finite(r);
  const double clip = plan_.optimizer.grad_clip > 0 && r.grad_norm > plan_.optimizer.grad_clip
                          ? plan_.optimizer.grad_clip / r.grad_norm
                          : 1.0;
  r.lr = learning_rate(plan_.optimizer, step);
  const ScopedSpan span("optimizer");
  // (bf16: the weight copies written in the same pass)
  optimizer_.step(model_.params, model_.grads, r.lr, clip, copies_);
  copies_follow_params_ = copies_.bits != nullptr;
}

std::string Trainer::save_checkpoint() {
  const ScopedSpan span("checkpoint");
  const std::string name = fmt::format("step_{:08}.h5", state_.step);
  const std::string path = (fs::path(plan_.run.checkpoint.dir) / name).string();
  // Every rank of a stage holds the same weights and optimizer state; rank 0 (the first
  // stage of dp replica 0) collects the other stages' parts and writes one file.
  if (grid_.coords().dp_rank == 0 && grid_.coords().cp_rank == 0) {
    std::vector<std::vector<ArenaRange>> by_stage;
    for (const StageSpec& s : plan_.stages)
      by_stage.push_back(owned_ranges(model_.table(), model_.config(), s));
    std::vector<float*> arenas = {model_.params.data()};
    if (!optimizer_.exp_avg().empty())
      arenas.insert(arenas.end(), {optimizer_.exp_avg().data(), optimizer_.exp_avg_sq().data()});
    gather_to_first_stage(grid_.pp(), grid_.layout().pp, grid_.coords().pp_rank, by_stage, arenas);
  }
  if (grid_.is_root()) {
    // never a checkpoint of non-finite weights: the run stops, the earlier ones stay
    for (const TensorSpec& t : model_.table().specs()) {
      const float* x = model_.params.data() + t.offset;
      for (int64_t i = 0; i < t.numel; ++i)
        if (!std::isfinite(x[i]))
          throw std::runtime_error("step " + std::to_string(state_.step) + ": parameter " + t.name +
                                   " is not finite; checkpoint not written (earlier checkpoints are "
                                   "untouched); lower train.lr or check the data");
    }
    fs::create_directories(plan_.run.checkpoint.dir);
    try {
      write_checkpoint(path, plan_.config_text, model_, optimizer_, state_, history_);
    } catch (const std::exception& e) {
      throw std::runtime_error("checkpoint of step " + std::to_string(state_.step) +
                               " not written (earlier checkpoints are untouched): " + e.what());
    }
    rotate_checkpoints(own_checkpoints_, plan_.run.checkpoint.keep, path);
  }
  barrier(grid_.world());  // written before anyone goes on
  return path;
}

// Rank 0 writes checkpoint.dir and every rank reads the checkpoint it resumes from, so
// on a cluster every host must see the same folder (a shared file system): each rank
// looks for rank 0's lock token in its run.lock, and the first that does not find it
// stops the job with one line naming its host.
void Trainer::require_shared_folder() const {
  if (grid_.world_size() <= 1) return;
  const std::string& dir = plan_.run.checkpoint.dir;
  std::vector<std::string> token(1);
  if (folder_lock_) token[0] = folder_lock_->token();
  broadcast_strings(token, grid_.world());
  const std::vector<std::string> seen = gather_strings(lock_seen_in(dir, token[0]) ? "yes" : "no", grid_.world());
  std::vector<std::string> verdict(1);
  for (size_t r = 0; r < seen.size() && verdict[0].empty(); ++r)
    if (seen[r] != "yes")
      verdict[0] = "checkpoint.dir '" + dir + "' on " + hosts_.rank(int(r)) + " is not the folder " +
                   hosts_.rank(0) + " writes (its run.lock is missing or another's): every host must see " +
                   "checkpoint.dir on a shared file system (rank 0 writes checkpoints; every rank reads " +
                   "the one it resumes from)";
  broadcast_strings(verdict, grid_.world());
  if (!verdict[0].empty()) throw ConfigError(verdict[0]);
}

// Every rank checks the folder (read-only: the same verdict everywhere), then rank 0
// takes it: see src/io/run_folder.h.
void Trainer::claim_run_folder() {
  const std::string& dir = plan_.run.checkpoint.dir;
  // one writer: rank 0 locks the folder for the whole run (a second run is refused at
  // once, on every rank), then clears temporaries of writes a dead run left behind
  std::vector<std::string> refused(1);
  if (grid_.is_root()) {
    try {
      folder_lock_ = std::make_unique<RunFolderLock>(dir);
      if (const int n = remove_stale_temporaries(dir); n > 0)
        log_info("{}: removed {} temporary file(s) of an interrupted checkpoint write", dir, n);
    } catch (const std::exception& e) {  // (a folder that cannot be created, too)
      refused[0] = std::string(e.what());
    }
  }
  broadcast_strings(refused, grid_.world());
  if (!refused[0].empty()) throw ConfigError(refused[0]);
  require_shared_folder();
  const RunFolderContents contents = survey_run_folder(dir);
  // a checkpoint from before run ids continues the folder's run
  if (resumed_ && state_.run_id.empty() && contents.owner) state_.run_id = contents.owner->run_id;
  // --train.resume auto on a run that died before its first checkpoint: the folder is
  // that run's (run.toml, maybe metrics) with nothing to resume from, so it starts
  // afresh as the same run
  const bool restart = !resumed_ && plan_.run.resume.from == Resume::From::latest && contents.checkpoints.empty() &&
                       contents.owner.has_value();
  if (restart) {
    state_.run_id = contents.owner->run_id;
    log_info("resume auto: {} holds run {} but no checkpoint yet; starting it afresh", dir, state_.run_id);
  }
  check_run_folder(dir, contents, state_.run_id, resumed_ || restart, plan_.run.checkpoint.overwrite);
  barrier(grid_.world());
  if (grid_.is_root()) {
    RunIdentity identity = new_run_identity(plan_.config_text, plan_.seed);
    if (!state_.run_id.empty()) identity.run_id = state_.run_id;
    state_.run_id = identity.run_id;
    TakenRunFolder taken = take_run_folder(dir, contents, identity, plan_.run.checkpoint.overwrite);
    own_checkpoints_ = std::move(taken.own_checkpoints);
    if (plan_.run.checkpoint.overwrite && !contents.empty())
      log_info("checkpoint.overwrite: {} now belongs to run {} ({} checkpoint(s) of the previous run removed)", dir,
               identity.run_id, taken.removed);
  }
  barrier(grid_.world());
}

// metrics.jsonl always equals the run's history: on resume it is rewritten from the
// checkpoint's rows (dropping lines of steps after the checkpoint), then appended.
void Trainer::open_metrics_file() {
  if (!grid_.is_root()) return;
  const std::string path = (fs::path(plan_.run.checkpoint.dir) / "metrics.jsonl").string();
  std::ostringstream rows;
  rows.precision(10);
  for (const StepRecord& r : history_) write_metrics_json(rows, r);
  metrics_ = AppendFile(path, rows.str());
}

// What the placement does: CAD's planner and lanes, or the context-parallel exchange.
void Trainer::log_placement() const {
  const Layout& layout = grid_.layout();
  if (placement_.cad)
    log_info("core attention disaggregated (CAD) over all {} ranks, tolerance {:.3g}, balancing {}{}, "
             "{}, probed point-to-point bandwidth {:.3g} GB/s",
             grid_.world_size(), plan_.cad.tolerance, plan_.machine.cad_cost_description,
             plan_.cad.rank_speeds ? " and each rank's measured speed" : "",
             std::string(plan_.lanes == 2 ? "ping-pong nano-batches" : "one exchange at a time (no ping-pong)") +
                 (plan_.lanes_reason.empty() ? "" : " (" + plan_.lanes_reason + ")"),
             placement_.probed_bandwidth / 1e9);
  if (placement_.cad && plan_.lanes == 2 && !plan_.pipelined() && all_ranks_on_one_host(grid_.world()))
    log_warn("attention.cad_pingpong = true on one host: the exchange is cheap here, and the two "
             "nano-batches (whole documents, so often of unequal size) make the ranks wait for each "
             "other at every layer; measured 3-4% slower than one exchange at a time on 2 ranks "
             "(bench/cad_scaling.sh, docs/parallelism.md, 'Core attention disaggregation')");
  if (plan_.placement == Placement::context_parallel)
    log_info("context parallel: {} ranks per sequence, split {}, exchange {}{}, probed "
             "point-to-point bandwidth {:.3g} GB/s",
             layout.cp, cp_split_name(plan_.cp_split), cp_comm_name(plan_.cp_comm),
             plan_.cp_comm == CpComm::ulysses
                 ? std::string(" (all-to-all over the group: whole sequence, heads / cp per rank)")
             : plan_.cp_comm == CpComm::hybrid
                 ? fmt::format(" (all-to-all inside groups of {}, ring of {} across them)", plan_.cp_ulysses,
                               layout.cp / plan_.cp_ulysses)
             : plan_.cp_comm == CpComm::double_ring
                 ? fmt::format(" (inner rings of {}, outer ring of {})", plan_.cp_inner_ring,
                               layout.cp / plan_.cp_inner_ring)
                 : std::string(),
             placement_.probed_bandwidth / 1e9);
  else if (layout.cp > 1)
    log_info("context parallel: {} ranks per sequence, split {}; CAD plans every rank's "
             "pieces like documents (parallel.cp_comm is not used)",
             layout.cp, cp_split_name(plan_.cp_split));
}

void Trainer::log_header() const {
  const LlamaConfig& mc = model_.config();
  const Layout& layout = grid_.layout();
  const int64_t tokens_per_step = plan_.tokens_per_step();
  log_info("lct train | {} | threads {} per rank | {}", blas_description(), omp_get_max_threads(),
           stream_.source().describe());
  if (grid_.world_size() > 1) {
    log_info("MPI: {} ranks = {} (rank = cp + cp x (dp + dp x pp)); gradient "
             "buckets: {} (>= {} elements each), overlap {}",
             grid_.world_size(), layout_name(layout), reducer_.buckets().size(), plan_.reduction.bucket_size,
             plan_.reduction.overlap ? "on" : "off");
    log_info("hosts: {}, {}", hosts_.count(), hosts_.describe());
  }
  if (layout.pp > 1) {
    std::string split;
    for (const StageSpec& s : plan_.stages)
      split += (split.empty() ? "" : ", ") + std::to_string(s.first_layer) + "-" +
               std::to_string(s.end_layer - 1);
    log_info("pipeline: {} stages (layers {}), schedule {}, {} micro-batches, theoretical "
             "bubble (pp-1)/(m+pp-1) = {:.1f}%",
             layout.pp, split, pipeline_schedule_name(plan_.schedule), plan_.micro_batches,
             100.0 * theoretical_bubble(layout.pp, int(plan_.micro_batches)));
  }
  if (plan_.balance == DpBalance::packing)
    log_info("data-parallel balance: packing (the global batch's documents re-packed over {} ranks "
             "by work)", layout.dp);
  log_placement();
  if (const std::string w = blas_capability_warning(); !w.empty()) log_warn(w);
  log_info("model: {} layers, hidden {}, heads {}/{} (head dim {}), mlp {}, vocab {}, "
           "{:.2f}M params, attention {}",
           mc.num_hidden_layers, mc.hidden_size, mc.num_attention_heads, mc.num_key_value_heads, mc.head_dim(),
           mc.intermediate_size, mc.vocab_size, double(model_.num_params()) / 1e6, describe_attention(mc));
  if (mc.rope_scaling != RopeScaling::none) log_info("{}", rope_scaling_text(mc.rope()));
  log_info("train: {} steps x {} sequences x {} tokens = {} tokens/step, {} lr {:.3g}", plan_.run.steps,
           plan_.micro_batches * layout.dp, plan_.data.seq_len, tokens_per_step,
           optimizer_name(plan_.optimizer.kind), plan_.optimizer.lr);
  log_info("activations: {}", describe_activations(plan_));
  if (!plan_.machine.fp32_description.empty())
    log_info("fp32 products: {}", plan_.machine.fp32_description);
  if (plan_.precision == Precision::bf16)
    log_info("precision bf16 (linear layers and attention products, the MLP's and norms' saved outputs, each "
             "layer's input; the residual stream within a layer, softmax statistics, norms, loss, weights, "
             "gradients and optimizer in fp32), "
             "bf16 kernel {}", plan_.machine.bf16_description);
  log_info("GFLOP/s: mask-aware model FLOPs of real tokens, 3 x (2 x matmul params x tokens + "
           "4 x H x hd x layers x attention pairs) per step; pairs: {}",
           mc.attention_mask.causal() ? "sum L_i(L_i+1)/2 (causal)" : "those attention.mask lets through");
  if (state_.step > 0)
    log_info("resumed at step {} ({} tokens seen, next sequence {})", state_.step, state_.tokens_seen,
             state_.next_sequence);
}

std::string Trainer::no_targets_reason() const {
  return plan_.loss_on == LossOn::answers ? "train.loss_on = answers and no sequence holds an answer"
                                          : "every document is one token long";
}

int Trainer::run() {
  log_header();
  // The timeline (trace.path): recorded while this guard lives, written at the end.
  struct TraceGuard {
    std::unique_ptr<Trace> trace;
    ~TraceGuard() { Trace::activate(nullptr); }
  } timeline;
  if (!plan_.run.trace_path.empty()) {
    // fail now, on every rank, before the run folder is taken, if rank 0 cannot write it
    std::string why;
    if (grid_.is_root()) {
      try {
        require_writable_output(plan_.run.trace_path, "trace.path", true);
      } catch (const std::runtime_error& e) {
        why = e.what();
      }
    }
    double writable = why.empty() ? 1 : 0;
    allreduce_sum(&writable, 1, grid_.world(), nullptr);
    if (writable < double(grid_.world_size()))
      throw ConfigError(grid_.is_root() ? why : "trace.path: rank 0 cannot write '" + plan_.run.trace_path + "'");
  }
  claim_run_folder();
  open_metrics_file();
  if (!plan_.run.trace_path.empty()) {
    timeline.trace = std::make_unique<Trace>(start_aligned_trace(grid_));
    Trace::activate(timeline.trace.get());
    log_info("timeline: recording every rank's phases and waits for {}", plan_.run.trace_path);
  }
  const auto write_timeline = [&] {
    if (!timeline.trace) return;
    Trace::activate(nullptr);
    const std::vector<TraceProcess> ranks = gather_trace(*timeline.trace, grid_);
    if (grid_.is_root()) write_trace_json(plan_.run.trace_path, ranks, "trace.path");
    log_info("timeline: {} ({} spans on this rank; open in https://ui.perfetto.dev)", plan_.run.trace_path,
             timeline.trace->spans().size());
    timeline.trace.reset();
  };

  // A SIGINT/SIGTERM on any rank stops the run at the next point where the ranks agree
  // on it: the step's all-reduce (then a checkpoint of that step is written), or right
  // after a periodic checkpoint (a signal during its write stops the run there, not a
  // whole step later).
  const auto stop = [&](int64_t step, const std::string& checkpoint) {
    const int sig = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;
    log_info("stopped by signal {} after step {}; checkpoint: {}", sig, step, checkpoint);
    log_info("resume with: --train.resume auto --checkpoint.dir {}", plan_.run.checkpoint.dir);
    write_timeline();
    return 128 + sig;
  };
  while (state_.step < plan_.run.steps) {
    const StepRecord r = train_step();
    if (r.step % plan_.run.log_every == 0 || r.step == plan_.run.steps || r.step == 1) {
      const LogContext context{grid_.world_size(), plan_.pipelined(),
                               plan_.placement != Placement::colocated};
      log_info("step {:5}/{} | {}", r.step, plan_.run.steps, step_log_fields(r, context));
    }
    if (grid_.is_root()) {
      std::ostringstream row;  // a line that cannot be written whole fails the run
      row.precision(10);
      write_metrics_json(row, r);
      metrics_.append(row.str());
    }
    if (stop_requested_) return stop(r.step, save_checkpoint());
    if (plan_.run.checkpoint.every > 0 && r.step % plan_.run.checkpoint.every == 0 &&
        r.step != plan_.run.steps) {
      const std::string checkpoint = save_checkpoint();
      log_info("checkpoint: {}", checkpoint);
      // a signal during the write: every rank agrees now (one small all-reduce, on
      // checkpoint steps only) and the run stops at this complete checkpoint
      double stop_asked = g_stop_signal.load() != 0 ? 1.0 : 0.0;
      allreduce_sum(&stop_asked, 1, grid_.world(), nullptr);
      stop_requested_ = stop_asked > 0;
      if (stop_requested_) return stop(r.step, checkpoint);
    }
  }
  // every rank counted the same global targets: a run that learned nothing fails alike
  if (run_targets_ == 0)
    throw ConfigError("no step of this run had a target to learn from (" + no_targets_reason() +
                      "): check data.* and train.loss_on; no checkpoint written");
  log_info("checkpoint: {}", save_checkpoint());
  write_timeline();
  if (!history_.empty())
    log_info("done: loss {:.4f} -> {:.4f} over {} steps; metrics in {}/metrics.jsonl", history_.front().loss,
             history_.back().loss, state_.step, plan_.run.checkpoint.dir);
  return 0;
}

}  // namespace lct
