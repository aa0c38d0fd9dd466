#include "src/sim/predict.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "src/sim/costs.h"
#include "src/sim/replay.h"
#include "src/tune/cad_profile.h"
#include "src/train/run_objects.h"
#include "src/util/machine.h"

namespace lct {
namespace {

// --profile, or attention.cad_profile as training resolves it (src/tune/cad_profile.h): the
// same cost model the run's planner would balance with
std::optional<CadCostModel> load_profile(const SimulateOptions& o, const RunPlan& plan) {
  if (o.profile.empty() || o.tflops > 0) return std::nullopt;
  try {
    return resolve_cad_cost(parse_cad_profile(o.profile), plan.model, longest_document_piece(plan.data)).model;
  } catch (const ConfigError& e) {
    throw std::invalid_argument(std::string("lct simulate: ") + e.what());
  }
}

// The step's global batch: dp x micro_batches sequences of the stream, from the step's
// first (a fresh run's: step x dp x mb).
std::vector<PackedBatch> step_sequences(DocumentStream& stream, const RunPlan& plan, int64_t step) {
  const int64_t count = int64_t(plan.layout.dp) * plan.micro_batches;
  std::vector<PackedBatch> global;
  for (int64_t i = 0; i < count; ++i) global.push_back(stream.sequence(step * count + i));
  return global;
}

// Each micro-batch's tokens over its context-parallel pieces (pieces[m][c]).
std::vector<double> sequence_tokens(const std::vector<std::vector<LocalBatch>>& pieces) {
  std::vector<double> tokens;
  for (const std::vector<LocalBatch>& m : pieces) {
    tokens.push_back(0);
    for (const LocalBatch& l : m) tokens.back() += double(l.num_tokens());
  }
  return tokens;
}

// Each micro-batch's pipeline message time: every rank of a stage sends its T / cp rows
// of activations (gradients) to its peer of the next (previous) stage, at the host link
// if any of replica d's stage boundaries crosses hosts.
std::vector<double> pipeline_messages(const RunPlan& plan, const std::vector<double>& seq_tokens, const Network& net,
                                      int d) {
  const Layout& layout = plan.layout;
  bool across = false;
  for (int s = 0; s + 1 < layout.pp; ++s)
    for (int c = 0; c < layout.cp; ++c)
      across = across || net.host_of(world_rank_of(layout, {d, s, c})) != net.host_of(world_rank_of(layout, {d, s + 1, c}));
  std::vector<double> t;
  for (const double tokens : seq_tokens)
    t.push_back(net.seconds(tokens / layout.cp * double(plan.model.hidden_size) * sizeof(float), 1, across));
  return t;
}

// The gradient all-reduce's tail (allreduce_tail_seconds): each stage's dp x cp ranks
// reduce its parameters at once; the slowest stage's.
double allreduce_seconds(const RunPlan& plan, const Network& net) {
  const Layout& layout = plan.layout;
  double slowest = 0;
  for (int s = 0; s < layout.pp; ++s) {
    std::vector<int> reducers;
    for (int d = 0; d < layout.dp; ++d)
      for (int c = 0; c < layout.cp; ++c) reducers.push_back(world_rank_of(layout, {d, s, c}));
    slowest = std::max(slowest, allreduce_tail_seconds(plan, plan.model, layout.pp, reducers, net));
  }
  return slowest;
}

// What every driver below sets up: attention's cost, the network, the gradient
// all-reduce's tail, the run's document stream, the steps predicted and the trace.
struct Driver {
  Driver(const SimulateOptions& o, const RunPlan& plan, const std::optional<CadCostModel>& profile,
         const Calibration& cal)
      : attn{cal, profile, o.attention_scale, plan.model.attention_mask},
        net(network_of(o)),
        allreduce(allreduce_seconds(plan, net)),
        stream(plan),
        timeline(plan.run.trace_path, o.ranks) {}
  const AttentionCost attn;
  const Network net;
  const double allreduce;
  DocumentStream stream;
  std::vector<StepPrediction> steps;
  SimTimeline timeline;

  // Keeps step p with its attention pairs per rank before balancing (pairs) and as
  // served (served).
  void record(StepPrediction p, const std::vector<double>& pairs, const std::vector<double>& served) {
    p.pairs_before = max_over_mean(pairs);
    p.rank_pairs = pairs;
    p.pairs_after = max_over_mean(served);
    steps.push_back(std::move(p));
  }
};

// A step's prediction with every one of the n ranks' compute and tokens at zero.
StepPrediction zero_step(int n) {
  StepPrediction p;
  p.compute.assign(size_t(n), 0.0);
  p.rank_tokens.assign(size_t(n), 0.0);
  p.rank_bytes.assign(size_t(n), 0.0);
  return p;
}

// The calibration of one of pp stages: a stage updates only its own parameters, about
// 1/pp of the optimizer step.
Calibration per_stage_of(const Calibration& cal, int pp) {
  Calibration per_stage = cal;
  per_stage.optimizer = cal.optimizer / pp;
  return per_stage;
}

// Pipeline (colocated, the configured schedule) and/or context parallelism (the
// configured split, ring), with data parallelism around them. Per micro-batch of a
// replica and stage:
//   cp  every layer waits for the group's exchange: layer time = max over the group of
//       linear(T_r) + the attention r computes + the exchange r waits for
//       (cp_layer_cost, per parallel.cp_comm; without cp: the whole sequence's linear +
//       attention);
//   pp  a stage's forward costs a third and its backward two thirds of its layers' time
//       (the last stage's forward also runs the loss); the stages' action lists
//       (parallel/pipeline_schedule.h) run against each other with messages of
//       T / cp x hidden floats over the bandwidth, and what a stage waits on a receive
//       is its bubble.
// The step is the slowest replica plus the gradient all-reduce's tail and the optimizer.
Prediction simulate_model_parallel(const SimulateOptions& o, const RunPlan& plan,
                            const std::optional<CadCostModel>& profile, int threads, const Calibration& cal) {
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const int n = o.ranks, dp = layout.dp, pp = layout.pp, cp = layout.cp;
  const int64_t mb = plan.micro_batches;
  const CpSplit split = plan.cp_split;
  const Calibration per_stage = per_stage_of(cal, pp);
  const double optimizer = per_stage.optimizer;
  const PipelineSchedule schedule = plan.schedule;
  const auto rank_of = [&](int s, int d, int c) { return world_rank_of(layout, {d, s, c}); };

  Driver sim(o, plan, profile, cal);
  double bubble_sum = 0;
  for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    StepPrediction p = zero_step(n);
    // block_sparse's exchanges move the blocks the content selects (parallel/
    // selected_keys.h) plus block sums and runs (the double ring every rank's reads):
    // priced as the causal superset, an estimate
    if (layout.cp > 1 && plan.model.attention_mask.content_dependent()) p.rank_bytes_exact = false;
    std::vector<double> pairs(static_cast<size_t>(n), 0.0);
    std::vector<double> finish(static_cast<size_t>(n), 0.0);  // when each rank's last compute ends
    double slowest = 0, bubble = 0;
    // the step's global batch, as the trainer takes it: replica d trains sequences
    // d * mb + m, or with packing the whole batch re-packed over the replicas by work
    const std::vector<PackedBatch> global = step_sequences(sim.stream, plan, step);
    for (int d = 0; d < dp; ++d) {
      // pieces[m][c]: micro-batch m's piece on context-parallel rank c; tokens[m] in all
      const std::vector<std::vector<LocalBatch>> pieces = replica_pieces(plan, global, d);
      const std::vector<double> seq_tokens = sequence_tokens(pieces);
      double replica = 0;
      const StageCosts costs = replica_stage_costs(
          plan, pieces, seq_tokens, sim.attn, cal, o, [&](int s, int c) { return rank_of(s, d, c); }, p, pairs);
      // the stages' action lists against each other, with message times
      const std::vector<double> message = pipeline_messages(plan, seq_tokens, sim.net, d);
      const StageClocks run = run_stage_lists(schedule, int(mb), cp, costs, message,
                                              [&](int s, int c) { return rank_of(s, d, c); }, sim.timeline);
      const std::vector<double>&clock = run.clock, &wait = run.wait;
      for (int s = 0; s < pp; ++s) {
        replica = std::max(replica, clock[size_t(s)]);
        for (int c = 0; c < cp; ++c) finish[size_t(rank_of(s, d, c))] = clock[size_t(s)];
        // activations out and gradients back, one direction at each end stage
        const int directions = (s > 0 ? 1 : 0) + (s < pp - 1 ? 1 : 0);
        for (const double t : seq_tokens)
          p.bytes_per_rank += double(directions) * t * double(mc.hidden_size) * sizeof(float) / double(n);
      }
      if (pp > 1)
        for (int s = 0; s < pp; ++s) bubble = std::max(bubble, wait[size_t(s)] / std::max(replica, 1e-12));
      slowest = std::max(slowest, replica);
    }
    p.seconds = slowest + sim.allreduce + optimizer;
    bubble_sum += bubble / double(o.steps);
    sim.record(p, pairs, pairs);
    for (int r = 0; r < n; ++r) {
      sim.timeline.wait(r, "gradient all-reduce", finish[size_t(r)], slowest + sim.allreduce);
      sim.timeline.compute(r, "optimizer", slowest + sim.allreduce, p.seconds);
    }
    sim.timeline.end_step(p.seconds);
  }
  std::string placement =
      cp > 1 ? std::string("context-parallel ") + cp_comm_name(plan.cp_comm) + ", " + cp_split_name(split) : "colocated";
  if (pp > 1) placement += std::string(", ") + pipeline_schedule_name(schedule);
  sim.timeline.write(layout);
  return {layout_name(layout), placement,
         per_stage, profile.has_value(), threads, std::move(sim.steps), bubble_sum};
}

// One same-phase tick of every rank (tick[r]: rank r's micro-batch piece, empty for a
// dummy), forward or backward, starting at t: its CAD layers, the last stage's head and
// the pipeline message; adds compute and bytes to p, served pairs to `served`. Returns the
// tick's seconds.
double cad_tick(const RunPlan& plan, const CadLayerCost& cad_layer, const Calibration& cal,
                const std::vector<LocalBatch>& tick, bool forward, double t, const Network& net,
                StepPrediction& p, std::vector<double>& served, SimTimeline& timeline) {
  const Layout& layout = plan.layout;
  const int n = plan.world, pp = layout.pp;
  const double stage_layers = double(plan.stages[0].num_layers());
  const LlamaConfig& mc = plan.model;
  const CadLayer cost = cad_layer.cost(tick, served);
  const double w = forward ? 1.0 / 3.0 : 2.0 / 3.0, layer = w * cost.seconds;
  std::vector<double> head(static_cast<size_t>(n), 0.0);
  double head_max = 0, message = 0;
  for (int r = 0; r < n; ++r) {
    const double tokens = double(tick[size_t(r)].num_tokens());
    GridCoordinates at = grid_coordinates(layout, r);
    const int s = at.pp_rank;
    if (forward && s == pp - 1) head[size_t(r)] = cal.head_per_token * tokens;
    head_max = std::max(head_max, head[size_t(r)]);
    if (tokens > 0 && (forward ? s < pp - 1 : s > 0)) {  // to the next (previous) stage
      const double bytes = tokens * double(mc.hidden_size) * sizeof(float);
      at.pp_rank += forward ? 1 : -1;
      message = std::max(message, net.seconds(bytes, 1, net.host_of(r) != net.host_of(world_rank_of(layout, at))));
      p.bytes_per_rank += bytes / double(n);
    }
    p.compute[size_t(r)] += stage_layers * w * cost.busy[size_t(r)] + head[size_t(r)];
    for (int64_t l = 0; l < plan.stages[0].num_layers() && timeline.on(); ++l) {
      const double t0 = t + double(l) * layer;
      timeline.compute(r, forward ? "tick forward layer (linear + attention served)"
                                  : "tick backward layer (linear + attention served)",
                       t0, t0 + w * cost.busy[size_t(r)]);
      timeline.wait(r, "attention exchange (CAD)", t0 + w * cost.busy[size_t(r)], t0 + layer);
    }
  }
  p.bytes_per_rank += stage_layers * w * cost.bytes / double(n);
  const double body = stage_layers * layer;
  for (int r = 0; r < n && timeline.on(); ++r) {
    timeline.compute(r, "embedding + loss", t + body, t + body + head[size_t(r)]);
    timeline.wait(r, "pipeline send/receive", t + body + head[size_t(r)], t + body + head_max + message);
  }
  return body + head_max + message;
}

// CAD without pipeline parallelism: every micro-batch's layers over all ranks (local[r]:
// rank r's micro-batches), each layer ending with its slowest rank. Adds compute and
// bytes to p, served pairs to `served`; returns the seconds of the synchronised part.
double cad_micro_batches(const RunPlan& plan, const CadLayerCost& cad_layer,
                         const std::vector<std::vector<LocalBatch>>& local, std::vector<double>& served,
                         StepPrediction& p, SimTimeline& timeline) {
  const int n = plan.world;
  const int64_t mb = plan.micro_batches;
  const LlamaConfig& mc = plan.model;
  const double layers = double(mc.num_hidden_layers);
  double sync = 0;
  for (int64_t m = 0; m < mb; ++m) {
    std::vector<LocalBatch> micro;
    for (int r = 0; r < n; ++r) micro.push_back(local[size_t(r)][size_t(m)]);
    const CadLayer layer = cad_layer.cost(micro, served);
    for (int r = 0; r < n && timeline.on(); ++r)  // every layer ends when the slowest rank's does
      for (int64_t l = 0; l < mc.num_hidden_layers; ++l) {
        const double t0 = sync + double(l) * layer.seconds;
        timeline.compute(r, "layer (linear + attention served)", t0, t0 + layer.busy[size_t(r)]);
        timeline.wait(r, "attention exchange (CAD)", t0 + layer.busy[size_t(r)], t0 + layer.seconds);
      }
    sync += layers * layer.seconds;
    for (int r = 0; r < n; ++r) {
      p.compute[size_t(r)] += layers * layer.busy[size_t(r)];
      p.rank_bytes[size_t(r)] += layers * layer.rank_bytes[size_t(r)];
    }
    p.bytes_per_rank += layer.bytes * layers / double(n);
  }
  return sync;
}

// CAD under pipeline parallelism, as lct trains it: same-phase ticks
// (parallel/pipeline_schedule.h). In forward tick k stage s runs micro-batch k - s of
// its replica, in backward tick k micro-batch k - (pp - 1 - s); out of range it runs a
// dummy that only serves attention. All ranks of all stages serve one plan per tick
// (CadLayerCost over every rank's batch, empty for dummies), so each of the stage's
// layers ends with the slowest rank; a forward tick costs a third of the layer cost,
// a backward tick two thirds. The last stage's forward tick adds its embedding + loss;
// after each tick the stages' activations (gradients) travel to the next (previous)
// stage, exposed. With cp > 1 every rank holds its piece of the sequences.
Prediction simulate_cad_ticks(const SimulateOptions& o, const RunPlan& plan,
                       const std::optional<CadCostModel>& profile, int threads, const Calibration& cal) {
  const Layout& layout = plan.layout;
  const int n = o.ranks, dp = layout.dp, pp = layout.pp, cp = layout.cp;
  const int64_t mb = plan.micro_batches;
  const Calibration per_stage = per_stage_of(cal, pp);
  const auto rank_of = [&](int s, int d, int c) { return world_rank_of(layout, {d, s, c}); };

  Driver sim(o, plan, profile, cal);
  const CadLayerCost cad_layer(plan, cal, sim.attn, profile, sim.net);
  for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    // batches[d][m][c]: replica d's micro-batch m, piece c
    std::vector<std::vector<std::vector<LocalBatch>>> batches(static_cast<size_t>(dp));
    StepPrediction p = zero_step(n);
    p.rank_bytes_exact = false;  // CAD estimates its bytes
    std::vector<double> pairs(static_cast<size_t>(n), 0.0), served(static_cast<size_t>(n), 0.0);
    // the step model's batches (src/train/step_model.h), as the trainer takes them
    const std::vector<PackedBatch> global = step_sequences(sim.stream, plan, step);
    for (int d = 0; d < dp; ++d) {
      batches[size_t(d)] = replica_pieces(plan, global, d);
      for (int c = 0; c < cp; ++c)
        for (const std::vector<LocalBatch>& micro : batches[size_t(d)]) {
          const LocalBatch& l = micro[size_t(c)];
          p.tokens += l.num_tokens();
          for (int s = 0; s < pp; ++s) {
            pairs[size_t(rank_of(s, d, c))] += double(l.attention_pairs(plan.model.attention_mask));
            p.rank_tokens[size_t(rank_of(s, d, c))] += double(l.num_tokens());
          }
        }
    }
    double t = 0;  // the tick's start
    for (const bool forward : {true, false})
      for (int64_t k = 0; k < mb + pp - 1; ++k) {
        std::vector<LocalBatch> tick(static_cast<size_t>(n));  // empty: a dummy
        for (int s = 0; s < pp; ++s) {
          const int64_t m = forward ? k - s : k - (pp - 1 - s);
          if (m < 0 || m >= mb) continue;
          for (int d = 0; d < dp; ++d)
            for (int c = 0; c < cp; ++c) tick[size_t(rank_of(s, d, c))] = batches[size_t(d)][size_t(m)][size_t(c)];
        }
        t += cad_tick(plan, cad_layer, cal, tick, forward, t, sim.net, p, served, sim.timeline);
      }
    p.seconds = t + sim.allreduce + per_stage.optimizer;
    sim.record(p, pairs, served);
    for (int r = 0; r < n; ++r) {
      sim.timeline.wait(r, "gradient all-reduce", t, t + sim.allreduce);
      sim.timeline.compute(r, "optimizer", t + sim.allreduce, p.seconds);
    }
    sim.timeline.end_step(p.seconds);
  }
  sim.timeline.write(layout);
  return {layout_name(layout),
         cad_layer.lanes() == 2 ? "cad (ping-pong), ticks" : "cad (one exchange at a time), ticks", per_stage,
         profile.has_value(), threads, std::move(sim.steps), 0.0};
}

// Data parallelism (colocated, packing or CAD), and CAD with context parallelism: rank
// d * cp + c holds piece c of replica d's sequences.
Prediction simulate_data_parallel(const SimulateOptions& o, const RunPlan& plan,
                           const std::optional<CadCostModel>& profile, int threads, const Calibration& cal) {
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const bool cad = plan.placement == Placement::cad;
  const int n = o.ranks, cp = layout.cp;
  const double layers = double(mc.num_hidden_layers);
  const bool packing = plan.balance == DpBalance::packing;

  Driver sim(o, plan, profile, cal);
  const CadLayerCost cad_layer(plan, cal, sim.attn, profile, sim.net);
  const int lanes = cad ? cad_layer.lanes() : 1;
  for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    const std::vector<PackedBatch> global = step_sequences(sim.stream, plan, step);
    const std::vector<std::vector<LocalBatch>> local = ranks_micro_batches(plan, global);
    StepPrediction p = zero_step(n);
    // CAD's bytes are exact in fp32 without context parallelism (one holder per key row)
    // or full recomputation (which repeats the forward's exchange)
    p.rank_bytes_exact = !cad || (plan.precision == Precision::fp32 && cp == 1 &&
                                  plan.recompute.mode != Recompute::full);
    std::vector<double> pairs(static_cast<size_t>(n), 0.0), served(static_cast<size_t>(n), 0.0);
    double sync = 0;  // CAD: time of the per-layer synchronised part
    std::vector<double> head(static_cast<size_t>(n), 0.0);  // embedding + loss, per rank
    for (int r = 0; r < n; ++r)
      for (const LocalBatch& b : local[size_t(r)]) {
        p.tokens += b.num_tokens();
        pairs[size_t(r)] += double(b.attention_pairs(plan.model.attention_mask));
        p.rank_tokens[size_t(r)] += double(b.num_tokens());
        const double begin = p.compute[size_t(r)];
        head[size_t(r)] += cal.head_per_token * double(b.num_tokens());
        p.compute[size_t(r)] += cal.head_per_token * double(b.num_tokens());
        if (cad) continue;
        double t = cal.linear_per_token_layer * double(b.num_tokens());
        for (const DocPiece& d : b.pieces) t += sim.attn(d);
        p.compute[size_t(r)] += layers * t;
        sim.timeline.compute(r, "micro-batch (forward + backward)", begin, p.compute[size_t(r)]);
        served[size_t(r)] += double(b.attention_pairs(plan.model.attention_mask));
      }
    if (cad) sync = cad_micro_batches(plan, cad_layer, local, served, p, sim.timeline);
    const double slowest = *std::max_element(p.compute.begin(), p.compute.end());
    const double head_max = *std::max_element(head.begin(), head.end());
    const double work_end = cad ? sync + head_max : slowest;
    p.seconds = work_end + sim.allreduce + cal.optimizer;
    sim.record(p, pairs, served);
    for (int r = 0; r < n; ++r) {
      if (cad) sim.timeline.compute(r, "embedding + loss", sync, sync + head[size_t(r)]);
      sim.timeline.wait(r, "gradient all-reduce", cad ? sync + head[size_t(r)] : p.compute[size_t(r)],
                        work_end + sim.allreduce);
      sim.timeline.compute(r, "optimizer", work_end + sim.allreduce, p.seconds);
    }
    sim.timeline.end_step(p.seconds);
  }

  const std::string placement = cad ? (lanes == 2 ? "cad (ping-pong)" : "cad (one exchange at a time)")
                                    : packing ? "colocated + packing" : "colocated";
  sim.timeline.write(layout);
  return {cp > 1 ? layout_name(layout) : "dp " + std::to_string(n),
         placement, cal, profile.has_value(), threads, std::move(sim.steps), 0.0};
}

}  // namespace

Prediction predict(const RunPlan& plan, const SimulateOptions& options) {
  SimulateOptions o = options;
  // a cost model file, as training would balance with it; not "auto": the calibration
  // run times attention in place (an isolated kernel profile is 15-20% faster per pair
  // than attention inside a step, which made every prediction that much too fast)
  if (o.profile.empty()) o.profile = cad_profile_file(plan.cad.profile);
  const Layout& layout = plan.layout;
  const bool cad = plan.placement == Placement::cad;
  const std::optional<CadCostModel> profile = load_profile(o, plan);
  const int threads = o.tflops > 0 ? 0 : configure_threads(plan.run.threads);
  const Calibration cal = calibrate(plan, o);
  if (cad && layout.pp > 1) return simulate_cad_ticks(o, plan, profile, threads, cal);
  if (!cad && (layout.pp > 1 || layout.cp > 1))
    return simulate_model_parallel(o, plan, profile, threads, cal);
  return simulate_data_parallel(o, plan, profile, threads, cal);
}

}  // namespace lct
