#include "src/train/memory_budget.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include <omp.h>

#include "attention/core_attention.h"
#include "model/llama.h"
#include "parallel/pipeline_schedule.h"
#include "src/tune/gemm_choice.h"
#include "src/train/run_objects.h"
#include "src/util/machine.h"

namespace fs = std::filesystem;

namespace lct {
namespace {

// Most activation slots one stage holds at once, from the schedule's own action list.
int peak_slots(PipelineSchedule schedule, int pp, int stage, int m) {
  int held = 0, peak = 0;
  for (const PipeAction& a : pipeline_actions(schedule, pp, stage, m)) {
    if (a.micro_batch < 0) continue;  // tick dummies: counted separately
    if (a.op == PipeOp::forward) peak = std::max(peak, ++held);
    if (a.op == PipeOp::backward) --held;
  }
  return std::max(peak, 1);
}

double corpus_bytes(const DataConfig& d) {
  if (d.source == DataSource::synthetic) return 0;
  std::error_code ec;
  if (fs::is_regular_file(d.path, ec)) return double(fs::file_size(d.path, ec));
  double total = 0;
  for (const auto& e : fs::recursive_directory_iterator(d.path, ec))
    if (e.is_regular_file(ec)) total += double(e.file_size(ec));
  return total;
}
// The context-parallel exchange's buffers on one rank holding T rows of the sequence
// (parallel/context_parallel.h, parallel/ulysses_attention.h).
double cp_exchange_bytes(const RunPlan& plan, double T) {
  const LlamaConfig& mc = plan.model;
  const double f = sizeof(float), hd = double(mc.head_dim());
  const double H = double(mc.num_attention_heads), KV = double(mc.num_key_value_heads), kvdim = KV * hd;
  const double seq = double(plan.data.seq_len);
  const double partial = T * H * (hd + 1) * f;  // the ring's partial O and LSE of a block
  switch (plan.cp_comm) {
    // the ring: the packed rows out, and per step in flight (one at cp = 2, else two) the
    // rows in (and their bf16 wire copies), the dK/dV out and back; this rank's dK/dV
    // sum (a peer's rows at most ~T)
    case CpComm::ring: {
      const double steps = std::min(2, plan.layout.cp - 1);
      const double wire = plan.precision == Precision::bf16 ? 1 : 0;
      return (4 + steps * (6 + wire)) * T * kvdim * f + partial;
    }
    case CpComm::double_ring: return 6 * T * 2 * kvdim * f + partial;  // + the outer ring's two blocks
    // the rows read, sent and received, placed in sequence order, their dK/dV, this rank's sums
    case CpComm::allgather: return 4 * seq * 2 * kvdim * f + 2 * T * kvdim * f;
    case CpComm::ulysses:
    case CpComm::hybrid: {
      const double U = plan.cp_ulysses, hq = H / U, hk = KV >= U ? KV / U : 1;
      const double rows = T * U;  // the group's rows for H / U heads
      const double arrays = rows * (4 * hq * hd + 4 * hk * hd + hq) * f;  // Q, O, dO, dQ; K, V, dK, dV; LSE
      const double wire = 2 * rows * ((3 * hq + 2 * hk) * hd + hq) * f;   // send and receive buffers
      const double ring = plan.cp_comm == CpComm::hybrid ? 4 * rows * 2 * hk * hd * f + rows * hq * (hd + 1) * f : 0;
      return arrays + wire + ring;
    }
  }
  return 0;
}
// A bf16 run's product scratch at T tokens per slot: the copies of a product's two
// operands (compute/gemm.cpp), dense bf16 ones on the native kernel, fp32 ones on the
// rounded kernel, whose bf16-output products (gate/up) also keep their fp32 sums; and the
// rounded output gradient of a product pair (model/ops.cpp). The kernel: the one
// resolved, set, or cached for this setup (train.bf16_kernel = auto,
// src/tune/gemm_choice.h); when auto has not measured yet, the rounded kernel's, the larger.
double bf16_product_scratch(const RunPlan& plan, double T) {
  const LlamaConfig& mc = plan.model;
  const double hd = double(mc.head_dim());
  const double qdim = double(mc.num_attention_heads) * hd, kvdim = double(mc.num_key_value_heads) * hd;
  const double widest = std::max({2.0 * double(mc.intermediate_size), double(mc.hidden_size), qdim + 2 * kvdim});
  const double rows = std::min(T, double(plan.tile_tokens));
  const double operand = std::max(rows * widest, std::min(T, 512.0) * double(mc.vocab_size));
  const std::optional<Bf16Kernel> kernel =
      plan.machine.resolved ? std::optional<Bf16Kernel>(plan.machine.bf16_kernel)
                            : known_bf16_kernel(plan.bf16_kernel, plan.fp32_gemm, mc,
                                                std::min(plan.data.seq_len, plan.tile_tokens));
  const bool native = kernel == Bf16Kernel::native;
  return 2 * operand * (native ? 2 : 4) + (native ? 0 : rows * 2.0 * double(mc.intermediate_size) * 4) + operand * 2;
}
}  // namespace

MemoryEstimate estimate_rank_memory(const RunPlan& plan) {
  const LlamaConfig& mc = plan.model;
  const Layout& layout = plan.layout;
  const double f = sizeof(float);
  const double hd = double(mc.head_dim());
  const double qdim = double(mc.num_attention_heads) * hd, kvdim = double(mc.num_key_value_heads) * hd;
  const double params = double(build_llama_table(mc).total());
  const bool cad = plan.placement == Placement::cad;
  const int lanes = plan.lanes;
  const int m = int(std::min<int64_t>(plan.micro_batches, std::numeric_limits<int>::max()));
  const double T = std::ceil(double(plan.data.seq_len) / layout.cp);  // tokens per rank and slot
  // a colocated layer runs piece by piece (model/llama.h): its recomputation workspace and
  // attention gradients hold two of the kernel's runs and three token tiles, and the key
  // side a long document's keys too; the other placements see the whole slot. Runs span
  // at most 64K rows, or a longer document's query slices (attention_runs), which the
  // masks that keep a document's queries together (shared_question's segments,
  // prefix_lm's prefix) may make as long as the document; a slice's keys reach back to
  // its first query's first key (attention_run_key_reach: a window's, or the document's).
  const int64_t longest = longest_document_piece(plan.data);
  const int64_t chunk = plan.attention.chunk_rows;
  AttentionRows window{int64_t(T), int64_t(T)};
  if (plan.placement == Placement::colocated && lanes == 1) {
    const int64_t reach = attention_run_key_reach(plan.attention, longest);
    window = LlamaModel::attention_window_rows(int64_t(T), attention_run_query_rows(plan.attention, longest), reach,
                                               plan.tile_tokens);
  }

  MemoryEstimate e;
  e.weights = 2 * params * f + (plan.precision == Precision::bf16 ? params * 2 : 0);  // + bf16 copies
  e.optimizer = plan.optimizer.kind == OptimizerKind::adamw ? 2 * params * f : 0;

  // activations: the stage holding the most (stage 0 holds the most slots, the last one
  // the head's rows)
  const std::vector<StageSpec>& stages = plan.stages;
  const PipelineSchedule schedule = plan.schedule;
  for (int s = 0; s < layout.pp; ++s) {
    const double per_token =
        double(LlamaModel::activation_floats_per_token(mc, stages[size_t(s)], plan.precision, plan.recompute));
    int slots = layout.pp > 1 ? peak_slots(schedule, layout.pp, s, m) : 1;
    if (schedule == PipelineSchedule::ticks && layout.pp > 1) slots += 1;  // the dummies' own
    // ping-pong: two slots per micro-batch, whose halves differ by at most the longest
    // document (data/nano_batches.h), so together they hold T + min(T, longest) / 2 tokens
    const double tokens =
        lanes == 2 ? T + std::min(T, double(plan.data.max_doc_len)) / 2 : T;
    const double bytes = double(slots) * per_token * tokens * f * (1 + 1.0 / 64);  // slot headroom
    // the recomputation workspace: one per lane, for the attention rows of one layer
    const AttentionRows rows = lanes == 2 ? AttentionRows{int64_t(tokens), int64_t(tokens)} : window;
    const double workspace = double(LlamaModel::workspace_floats(mc, stages[size_t(s)], plan.recompute, rows)) * f;
    if (bytes + workspace > e.activations + e.workspace) {
      e.activations = bytes, e.workspace = workspace, e.slots = slots * lanes;
      e.stored_per_token = per_token * f + workspace / tokens;
    }
  }
  e.tokens_per_slot = int64_t(T);

  // the RoPE table: a row per in-document position the run can meet (positions restart in
  // every document and a sequence cuts a longer one: the longest document, at most the
  // sequence; text and token files have no such bound but the sequence)
  double rope_rows = double(longest);
  if (mc.attention_kernel == AttentionKernel::dca) rope_rows = std::max(rope_rows, double(mc.dca_chunk_size) + 1);
  e.scratch = (double(LlamaModel::scratch_floats(mc, int64_t(T), plan.tile_tokens, plan.precision, window)) +
               (lanes == 2 ? double(LlamaModel::attention_grads_floats(mc, {int64_t(T), int64_t(T)})) : 0) + rope_rows * hd) * f;
  e.scratch_per_token = (e.scratch - rope_rows * hd * f) / T;
  // the attention kernel's own scratch: runs of at most 64K query rows (or a document's,
  // attention_run_query_rows) and as many key rows plus how far a query slice's keys
  // reach back (attention_run_key_reach; attention/core_attention.h), on every core of
  // the rank at most
  const int64_t query_rows =
      std::min<int64_t>(plan.data.seq_len, attention_run_query_rows(plan.attention, plan.data.max_doc_len));
  const int64_t key_rows = std::min<int64_t>(
      plan.data.seq_len,
      std::max<int64_t>({chunk, query_rows,
                         std::min<int64_t>(plan.data.max_doc_len,
                                           chunk + attention_run_key_reach(plan.attention, plan.data.max_doc_len))}));
  const int threads = plan.run.threads > 0 ? int(std::min<int64_t>(plan.run.threads, 1 << 16))
                                               : std::max(1, omp_get_num_procs());
  e.scratch += double(attention_workspace_bytes(plan.attention, query_rows, key_rows, threads));
  if (plan.precision == Precision::bf16) e.scratch += bf16_product_scratch(plan, T);
  // what the libraries touch on first use and keep: OpenBLAS's and oneDNN's per-thread
  // working buffers and primitive scratchpads (more on a run that first measures the
  // fp32 library, src/tune/gemm_choice.h), and OpenMPI's shared-memory segments between
  // ranks; an allowance (not derived: the libraries do not say), set from peak RSS
  // measured above the other parts at 8K-16K tokens (up to 29 MiB for one thread, 16-28
  // MiB per rank under MPI; tests/cli/memory_budget.sh keeps the estimate an upper bound)
  e.libraries = 32.0 * 1048576 * threads + (plan.world > 1 ? 16.0 * 1048576 : 0);
  if (plan.placement == Placement::context_parallel) e.attention = cp_exchange_bytes(plan, T);
  if (cad) e.attention = double(plan.data.seq_len) * (4 * kvdim + 3 * qdim) * f;
  // the step's micro-batches (tokens, targets, positions, mask) and the corpus in memory
  e.data = double(m) * T * 13 + corpus_bytes(plan.data);
  // rank 0 builds the checkpoint in memory (HDF5's copy and the image), then verifies it
  e.checkpoint = 2 * (params + (plan.optimizer.kind == OptimizerKind::adamw ? 2 * params : 0)) * f + params * f;
  e.process = process_resident_bytes();
  return e;
}

namespace {
struct ProcessFigures {
  double resident = 0, file_backed = 0;
};
const ProcessFigures& process_figures() {
  static const ProcessFigures figures = [] {
    ProcessFigures f;
    f.resident = std::max(0.0, proc_kib_field("/proc/self/status", "VmRSS"));
    const double file = proc_kib_field("/proc/self/status", "RssFile");
    f.file_backed = file >= 0 ? file : f.resident / 4;  // (Linux before 4.5: a quarter of the whole)
    return f;
  }();
  return figures;
}
}  // namespace

double process_resident_bytes() { return process_figures().resident; }
double process_headroom_bytes() { return process_figures().file_backed; }

std::string describe_estimate(const MemoryEstimate& e, const MemoryAvailable& a) {
  std::ostringstream o;
  o << "memory per rank (estimate, largest rank): " << bytes_text(e.total()) << " of "
    << (std::isfinite(a.bytes) ? bytes_text(a.bytes) + " available (" + a.limit + ")" : std::string("unknown"))
    << "\n  weights + gradients " << bytes_text(e.weights) << " | optimizer " << bytes_text(e.optimizer)
    << " | activations " << bytes_text(e.activations) << " (" << e.slots << " slot(s) x " << e.tokens_per_slot
    << " tokens) | recompute workspace " << bytes_text(e.workspace) << "\n  scratch " << bytes_text(e.scratch) << " | attention buffers " << bytes_text(e.attention)
    << " | data " << bytes_text(e.data) << " | checkpoint image (rank 0) " << bytes_text(e.checkpoint)
    << " | libraries " << bytes_text(e.libraries) << " | process " << bytes_text(e.process);
  o << fmt::format("\n  stored per token: {:.1f} KiB kept for backward, {:.1f} KiB scratch", e.stored_per_token / 1024,
                   e.scratch_per_token / 1024);
  return o.str();
}

std::string check_memory_budget(const MemoryEstimate& e, const MemoryAvailable& a) {
  if (!(e.total() > a.bytes)) return "";
  // the three largest parts, largest first
  std::vector<std::pair<double, std::string>> parts = {
      {e.weights + e.optimizer, "weights, gradients and optimizer"}, {e.activations + e.workspace, "activations"},
      {e.scratch, "scratch and RoPE table"}, {e.attention, "attention buffers"},
      {e.data, "micro-batches and corpus"}, {e.checkpoint, "checkpoint image"}, {e.process + e.libraries, "process and libraries"}};
  std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string largest;
  for (size_t i = 0; i < 3; ++i) largest += (i ? ", " : "") + parts[i].second + " " + bytes_text(parts[i].first);
  return "not enough memory: a rank needs about " + bytes_text(e.total()) + " (" + largest + ") but " +
         bytes_text(a.bytes) + " is available (" + a.limit +
         "); reduce data.seq_len, train.micro_batches or the model, or add ranks (lct train --dry-run shows the estimate)";
}

double command_memory_bytes(double bytes) {
  return bytes + std::max(0.0, proc_kib_field("/proc/self/status", "VmRSS"));
}

std::string check_command_memory(const std::string& what, double bytes, const std::string& parts,
                                 const std::string& advice) {
  const MemoryAvailable a = available_memory(1);
  // (the process's own part as available_memory counts it: both hold it)
  const double need = command_memory_bytes(bytes);
  if (!(need > a.bytes)) return "";
  return "not enough memory: " + what + " needs about " + bytes_text(need) + " (" + parts + ", and the " +
         bytes_text(need - bytes) + " the process holds) but " + bytes_text(a.bytes) + " is available (" + a.limit +
         "); " + advice;
}

double eval_bytes(const LlamaConfig& model, Precision precision, int64_t T, int64_t L) {
  const double f = sizeof(float);
  const StageSpec whole = whole_model_stage(model);
  const double weights = 2.0 * double(build_llama_table(model).total()) * f;  // parameters, gradients
  const double activations = double(LlamaModel::activation_floats_per_token(model, whole, precision)) * double(T) * f;
  // the RoPE table: a row per position, under DCA at least C + 1 (as a run's estimate)
  double rope_rows = double(L);
  if (model.attention_kernel == AttentionKernel::dca) rope_rows = std::max(rope_rows, double(model.dca_chunk_size) + 1);
  const double head_dim = double(model.hidden_size / std::max(1, model.num_attention_heads));
  const double scratch = (double(LlamaModel::scratch_floats(model, T, LlamaModel::kTileTokens, precision)) + rope_rows * head_dim) * f;
  AttentionParams params = attention_params_of(model);
  params.precision = precision;
  const int64_t longest_run = std::min<int64_t>(T, std::max<int64_t>(params.chunk_rows, L));
  const double kernel = double(attention_workspace_bytes(
      params, std::min<int64_t>(longest_run, attention_run_query_rows(params, L)), longest_run, omp_get_max_threads()));
  const double batch = double(T) * 32;  // tokens, targets, positions, masks, per-token loss
  const double libraries = 32.0 * 1048576 * omp_get_max_threads();  // as estimate_rank_memory allows
  return weights + activations + scratch + kernel + batch + libraries;
}

}  // namespace lct
