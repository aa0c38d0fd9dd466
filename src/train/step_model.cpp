#include "src/train/step_model.h"

#include "data/balance.h"
#include "data/context_shards.h"
#include "src/train/flops.h"

namespace lct {

double document_work(const RunPlan& plan, int64_t tokens) {
  return forward_flops(plan.model, tokens, prefix_pairs(0, tokens, plan.model.attention_mask));
}

std::vector<LocalBatch> step_micro_batches(const RunPlan& plan, const SequenceAt& sequence, int64_t first,
                                           int dp_rank, int cp_rank) {
  const int64_t mb = plan.micro_batches;
  const Layout& layout = plan.layout;
  std::vector<LocalBatch> local;
  if (plan.balance == DpBalance::packing) {
    // the whole global batch, re-packed by work over the dp ranks (the plan allows packing
    // only without context parallelism)
    std::vector<PackedBatch> global;
    for (int64_t s = 0; s < layout.dp * mb; ++s) global.push_back(sequence(first + s));
    local = pack_for_balance(global, layout.dp, int(mb), dp_rank,
                             [&plan](int64_t L) { return document_work(plan, L); });
  } else {
    local.resize(size_t(mb));
    for (int64_t m = 0; m < mb; ++m) {
      const PackedBatch packed = sequence(first + dp_rank * mb + m);
      if (layout.cp > 1)
        local[size_t(m)] = shard_sequence(packed, layout.cp, cp_rank, plan.cp_split, plan.cp_split_work);
      else
        whole_sequence(packed, local[size_t(m)]);
    }
  }
  if (plan.loss_on == LossOn::answers)
    for (LocalBatch& b : local) keep_answer_targets(b);
  return local;
}

MicroBatchCost micro_batch_cost(const RunPlan& plan, const LocalBatch& batch) {
  MicroBatchCost c;
  c.tokens = batch.num_tokens();
  c.pairs = batch.attention_pairs(plan.model.attention_mask);
  c.forward_flops = forward_flops(plan.model, c.tokens, c.pairs);
  return c;
}

}  // namespace lct
