// lct bench: the cp_balance and cad_balance sections, the balance of the context-parallel
// splits and of the CAD planner over the configured stream (no timing).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/context_shards.h"
#include "data/doc_lengths.h"
#include "parallel/cad_plan.h"
#include "src/cli/bench_common.h"
#include "src/train/run_objects.h"

namespace lct::bench {
namespace {

std::vector<BalanceRow> cp_balance(const RunPlan& plan, const BenchOptions& o) {
  DocumentStream stream(plan);
  std::vector<PackedBatch> sequences;
  for (int64_t k = 0; k < o.balance_sequences; ++k) sequences.push_back(stream.sequence(k));
  std::vector<BalanceRow> rows;
  for (int64_t cp : o.cp_degrees)
    for (CpSplit split : {CpSplit::zigzag, CpSplit::contiguous}) {
      BalanceRow r{cp, cp_split_name(split), 0, 0};
      for (const PackedBatch& b : sequences) {
        double max_pairs = 0, sum_pairs = 0;
        for (int64_t rank = 0; rank < cp; ++rank) {
          const double p = double(shard_sequence(b, int(cp), int(rank), split, plan.cp_split_work).attention_pairs(plan.model.attention_mask));
          max_pairs = std::max(max_pairs, p);
          sum_pairs += p;
        }
        const double ratio = max_pairs / (sum_pairs / double(cp));
        r.mean_max_over_mean += ratio / double(sequences.size());
        r.worst_max_over_mean = std::max(r.worst_max_over_mean, ratio);
      }
      rows.push_back(r);
    }
  return rows;
}

std::vector<CadBalanceRow> cad_balance(const RunPlan& plan, const BenchOptions& o) {
  DocumentStream stream(plan);
  const CadPlanOptions opt = cad_plan_options(plan.attention, plan.cad.tolerance, nullptr);
  std::vector<CadBalanceRow> rows;
  for (int64_t n : o.cad_ranks) {
    CadBalanceRow r{n, 0, 0, 0, 0};
    const int64_t ticks = std::max<int64_t>(1, o.balance_sequences / n);
    for (int64_t tick = 0; tick < ticks; ++tick) {
      std::vector<CadPiece> docs;
      for (int64_t rank = 0; rank < n; ++rank) {
        int32_t i = 0;  // whole documents (one piece per shared_question segment)
        for (const DocPiece& d : whole_sequence(stream.sequence(tick * n + rank)).pieces)
          docs.push_back({int32_t(rank), i++, d.row, d.len, d.pos, d.prefix_len, d.segment_pos, d.doc_len});
      }
      const CadPlan plan = plan_core_attention(docs, int(n), opt);
      const auto ratio = [](const std::vector<int64_t>& v) {
        double mx = 0, sum = 0;
        for (int64_t x : v) mx = std::max(mx, double(x)), sum += double(x);
        return mx / (sum / double(v.size()));
      };
      r.before += ratio(plan.pairs_before) / double(ticks);
      r.after += ratio(plan.pairs_after) / double(ticks);
      r.worst_after = std::max(r.worst_after, ratio(plan.pairs_after));
      r.mib_per_layer += double(plan.bytes_moved) / 1048576.0 / double(ticks);
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

void cp_balance_section(const RunPlan& plan, const BenchOptions& o, BenchResults& res) {
  say(o, "\ncp_balance  attention pairs per context-parallel rank, max/mean, over {} sequences of "
      "{} tokens ({} documents)\n",
      o.balance_sequences, plan.data.seq_len, doc_length_dist_name(plan.data.doc_lengths));
  say(o, "  {:>4} {:<11} {:>10} {:>10}\n", "cp", "split", "mean", "worst");
  res.cp_balance = cp_balance(plan, o);
  for (const BalanceRow& r : res.cp_balance)
    say(o, "  {:4} {:<11} {:>10.3f} {:>10.3f}\n", r.cp, r.split, r.mean_max_over_mean, r.worst_max_over_mean);
}

void cad_balance_section(const RunPlan& plan, const BenchOptions& o, BenchResults& res) {
  say(o, "\ncad_balance  CAD planner on the stream (one {}-token sequence per rank and tick, {} "
      "documents, tolerance {:.3g}): attention pairs max/mean per rank\n",
      plan.data.seq_len, doc_length_dist_name(plan.data.doc_lengths), plan.cad.tolerance);
  say(o, "  {:>6} {:>10} {:>10} {:>12} {:>24}\n", "ranks", "colocated", "cad", "cad worst", "MiB moved/layer, all");
  res.cad_balance = cad_balance(plan, o);
  for (const CadBalanceRow& r : res.cad_balance)
    say(o, "  {:6} {:>10.3f} {:>10.3f} {:>12.3f} {:>24.2f}\n", r.ranks, r.before, r.after, r.worst_after,
        r.mib_per_layer);
}

}  // namespace lct::bench
