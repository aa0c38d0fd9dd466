// The step model: which documents each rank trains in a step, and what each costs. One
// function for the run and its prediction: the trainer trains what step_micro_batches
// gives its rank, and `lct simulate` predicts the step from the same batches.
//
// A step's global batch is dp x micro_batches sequences of the stream, from sequence
// `first` (the trainer's next_sequence). Data-parallel replica d trains sequences
// first + d x mb + m (m < mb) on every pipeline stage alike, and context-parallel rank c
// its shard of each (parallel.cp_split). With parallel.dp_balance = packing the global
// batch's documents are re-packed over the replicas by work (document_work, data/balance.h).
// Under train.loss_on = answers only the answers' targets train.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/local_batch.h"
#include "data/packing.h"
#include "src/train/run_plan.h"

namespace lct {

// The stream's packed sequence `index` (DocumentStream::sequence, or a test's).
using SequenceAt = std::function<PackedBatch(int64_t index)>;

// The micro-batches rank (dp_rank, cp_rank) trains in the step whose global batch starts
// at sequence `first`. Asks `sequence` for its replica's sequences only, or for the whole
// global batch under packing.
std::vector<LocalBatch> step_micro_batches(const RunPlan& plan, const SequenceAt& sequence, int64_t first,
                                           int dp_rank, int cp_rank);

// The work of one document of `tokens` tokens under the plan's mask: its forward FLOPs
// (src/train/flops.h). What packing balances.
double document_work(const RunPlan& plan, int64_t tokens);

// What one rank's micro-batch costs: its tokens, the attention pairs its queries read
// under the mask, and their forward FLOPs.
struct MicroBatchCost {
  int64_t tokens = 0, pairs = 0;
  double forward_flops = 0;
};
MicroBatchCost micro_batch_cost(const RunPlan& plan, const LocalBatch& batch);

}  // namespace lct
