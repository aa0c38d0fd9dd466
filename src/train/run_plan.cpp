#include "src/train/run_plan.h"

#include "src/config/config.h"
#include "src/train/flops.h"
#include "src/train/run_objects.h"

namespace lct {
namespace {

OptimizerConfig optimizer_config(const Config& c) {
  OptimizerConfig o;
  o.kind = c.train.optimizer;
  o.lr = c.train.lr;
  o.min_lr = c.train.min_lr;
  o.warmup_steps = c.train.warmup_steps;
  o.total_steps = c.train.steps;
  o.beta1 = c.train.beta1;
  o.beta2 = c.train.beta2;
  o.eps = c.train.eps;
  o.weight_decay = c.train.weight_decay;
  o.grad_clip = c.train.grad_clip;
  return o;
}

// The context-parallel exchange's group sizes and what they need of the heads
// (ulysses, hybrid, double_ring; the rules at the top of run_plan.h).
void plan_cp_exchange(RunPlan& p, const ParallelConfig& par) {
  if (p.placement == Placement::context_parallel &&
      (p.cp_comm == CpComm::ulysses || p.cp_comm == CpComm::hybrid)) {
    const int cp = p.layout.cp;
    const std::string name = cp_comm_name(p.cp_comm);
    if (p.cp_comm == CpComm::hybrid) {
      if (par.cp_ulysses <= 1 || par.cp_ulysses >= cp || cp % par.cp_ulysses != 0)
        throw ConfigError("parallel.cp_comm = hybrid needs parallel.cp_ulysses = " +
                          std::to_string(par.cp_ulysses) + " to divide parallel.cp = " + std::to_string(cp) +
                          " and lie strictly between 1 and it (use ulysses or ring for the ends)");
      p.cp_ulysses = int(par.cp_ulysses);
    } else {
      p.cp_ulysses = cp;
    }
    const int U = p.cp_ulysses, H = int(p.model.num_attention_heads), KV = int(p.model.num_key_value_heads);
    const std::string group = p.cp_comm == CpComm::ulysses ? "parallel.cp = " : "parallel.cp_ulysses = ";
    if (H % U != 0)
      throw ConfigError("parallel.cp_comm = " + name + ": model.num_attention_heads = " + std::to_string(H) +
                        " does not split over " + group + std::to_string(U) + " ranks (it must be a multiple)");
    if (KV % U != 0 && U % KV != 0)
      throw ConfigError("parallel.cp_comm = " + name + ": model.num_key_value_heads = " + std::to_string(KV) +
                        " must be a multiple or a divisor of " + group + std::to_string(U));
    // block_sparse selects per KV head group by the mean of the group's query heads: a
    // rank that holds only some of a group's query heads (KV < U) would select by theirs
    if (p.model.attention_mask.kind == MaskKind::block_sparse && KV % U != 0)
      throw ConfigError("attention.mask = block_sparse under parallel.cp_comm = " + name +
                        " needs model.num_key_value_heads = " + std::to_string(KV) + " to be a multiple of " + group +
                        std::to_string(U) + " (a rank selects by the mean of a whole group's query heads)");
  }

  if (p.placement == Placement::context_parallel && p.cp_comm == CpComm::double_ring) {
    const int64_t cp = p.layout.cp, inner = par.cp_inner_ring;
    if (inner <= 1 || inner >= cp || cp % inner != 0)
      throw ConfigError("parallel.cp_comm = double_ring needs parallel.cp_inner_ring = " + std::to_string(inner) +
                        " to divide parallel.cp = " + std::to_string(cp) +
                        " and lie strictly between 1 and it (an inner ring of cp ranks is the ring)");
    p.cp_inner_ring = int(inner);
  }
}

// CAD's pipeline schedule, lanes and settings (`cad`: CAD runs on more than one rank).
void plan_cad(RunPlan& p, const ParallelConfig& par, const CadConfig& cc, bool cad) {
  p.schedule = par.pp_schedule;
  if (cad && p.pipelined()) {
    for (const StageSpec& s : p.stages)
      if (s.num_layers() != p.stages[0].num_layers())
        throw ConfigError("attention.placement = cad with pipeline parallelism needs the same "
                          "number of layers on every stage (parallel.pp_layers)");
    if (p.schedule != PipelineSchedule::ticks)
      p.schedule_reason = std::string("CAD with pp > 1 runs same-phase ticks (parallel.pp_schedule = ") +
                          pipeline_schedule_name(par.pp_schedule) + " is not used)";
    p.schedule = PipelineSchedule::ticks;
  }

  // ping-pong: measured (bench/cad_scaling.sh) slower than one exchange at a time with
  // data parallelism on one host, and faster under pipeline ticks, where the second
  // lane gives the stage that would wait in the exchange other work to serve
  if (cad && cc.pingpong == Switch::automatic) {
    p.lanes = p.pipelined() ? 2 : 1;
    p.lanes_reason = p.pipelined() ? "attention.cad_pingpong = auto: on under pipeline ticks"
                                   : "attention.cad_pingpong = auto: off without pipeline parallelism";
  } else {
    p.lanes = cad && cc.pingpong == Switch::on ? 2 : 1;
  }
  p.cad = cc;
  // rank speeds: one plan per micro-batch and layer (ping-pong plans each lane alone),
  // and a cost model in seconds to set them against (pairs have no time)
  p.cad.rank_speeds = cad && cc.rank_speeds && p.lanes == 1 && cc.profile.measured();
  p.cad_align_every_cut = cad && p.pipelined();
}

}  // namespace

RunPlan make_run_plan(const Config& c, int world) {
  RunPlan p;
  p.world = world;
  p.model = c.model;
  p.attention = attention_params_of(p.model);
  p.optimizer = optimizer_config(c);
  p.precision = c.train.precision;
  p.recompute = {c.train.recompute, int(c.train.recompute_layers)};
  p.tile_tokens = c.train.tile_tokens;
  p.loss_on = c.train.loss_on;
  p.attention.precision = p.precision;  // what CAD plans move travels in it
  p.fp32_gemm = c.train.fp32_gemm;
  p.bf16_kernel = c.train.bf16_kernel;
  p.data = c.data;
  p.seed = c.train.seed;
  p.micro_batches = c.train.micro_batches;
  p.doc_structure = doc_structure_of(c.data, p.model.attention_mask.kind);
  p.reduction = {c.parallel.bucket_size, c.parallel.overlap_grad_reduce};
  p.run.steps = c.train.steps;
  p.run.log_every = c.train.log_every;
  p.run.heartbeat_s = c.train.heartbeat_s;
  p.run.threads = c.train.threads;
  p.run.checkpoint = c.checkpoint;
  p.run.trace_path = c.trace.path;
  p.run.resume = c.train.resume;
  p.run.init_from = c.train.init_from;
  p.config_text = config_to_toml(c);
  p.cp_split = c.parallel.cp_split;
  p.cp_split_work = {p.model.attention_mask, linear_pairs_per_token(p.model)};
  p.cp_comm = c.parallel.cp_comm;

  const ParallelConfig& par = c.parallel;
  if (const std::string e = resolve_layout({par.dp, par.pp, par.cp, par.pp_layers}, world,
                                           p.model.num_hidden_layers, c.data.seq_len, p.layout);
      !e.empty())
    throw ConfigError(e);
  // checked on the resolved degrees: parallel.cp = -1 inferred as 2 is context parallelism too
  if (p.model.rope_scaling == RopeScaling::dynamic &&
      (p.layout.pp > 1 || p.layout.cp > 1 || c.attention.placement == Placement::cad))
    throw ConfigError("model.rope_scaling = dynamic rebuilds RoPE for each batch's longest document, so it runs "
                      "colocated without pipeline or context parallelism (parallel.pp = " +
                      std::to_string(p.layout.pp) + ", parallel.cp = " + std::to_string(p.layout.cp) +
                      ", attention.placement = " + placement_name(c.attention.placement) + ")");
  if (const std::string e =
          split_pipeline_stages(p.model.num_hidden_layers, p.layout.pp, par.pp_layers, p.stages);
      !e.empty())
    throw ConfigError(e);

  const CadConfig& cc = c.attention.cad;
  const bool cad = c.attention.placement == Placement::cad && world > 1;
  p.placement = cad ? Placement::cad
                : p.layout.cp > 1 ? Placement::context_parallel
                                  : Placement::colocated;

  plan_cp_exchange(p, par);
  plan_cad(p, par, cc, cad);
  if (par.dp_balance == DpBalance::packing) {
    if (p.layout.cp > 1 || c.attention.placement == Placement::cad)
      throw ConfigError("parallel.dp_balance = packing is a baseline for colocated attention "
                        "without context parallelism (parallel.cp = 1, attention.placement = colocated)");
    p.balance = p.layout.dp > 1 ? DpBalance::packing : DpBalance::none;
  }

  return p;
}

std::string describe_run_plan(const RunPlan& p) {
  std::string s = std::to_string(p.world) + " rank(s) = " + layout_name(p.layout) + ", attention placement " +
                  placement_name(p.placement);
  if (p.placement == Placement::cad) {
    s += p.lanes == 2 ? " (ping-pong nano-batches" : " (one exchange at a time";
    s += p.lanes_reason.empty() ? ")" : "; " + p.lanes_reason + ")";
  }
  if (p.placement == Placement::context_parallel)
    s += std::string(" (") + cp_split_name(p.cp_split) + ", " + cp_comm_name(p.cp_comm) +
         (p.cp_comm == CpComm::hybrid        ? " " + std::to_string(p.cp_ulysses) + " x " +
                                                     std::to_string(p.layout.cp / p.cp_ulysses)
          : p.cp_comm == CpComm::double_ring ? " " + std::to_string(p.cp_inner_ring) + " x " +
                                                     std::to_string(p.layout.cp / p.cp_inner_ring)
                                             : std::string()) +
         ")";
  if (p.balance == DpBalance::packing) s += ", data-parallel balance packing";
  if (p.pipelined()) {
    s += std::string(", pipeline schedule ") + pipeline_schedule_name(p.schedule);
    if (!p.schedule_reason.empty()) s += ": " + p.schedule_reason;
  }
  return s;
}

std::string describe_activations(const RunPlan& p) {
  std::string s = std::string("recompute ") + recompute_name(p.recompute.mode);
  if (p.recompute.mode != Recompute::none)
    s += p.recompute.layers == 0 ? " (every layer)" : " (layers 0-" + std::to_string(p.recompute.layers - 1) + ")";
  return s + ", token tiles of " + std::to_string(p.tile_tokens) + " rows";
}

}  // namespace lct
