// Ping-pong nano-batches (DistCA §4.1): a micro-batch cut into two, so that while one
// half's attention traffic is in flight the other half's token-linear layers compute.
//
// Whole documents only: a document's queries need the keys of its whole causal prefix,
// which must sit in the same nano-batch. Documents go, longest first, to the half with
// fewer tokens so far (ties to the first half), which equalises the token-linear work
// (what hides the traffic); attention work is balanced across ranks per nano-batch by
// the CAD planner. With context parallelism the documents are those of the whole
// sequence (from the group's pieces), so every rank of the group puts a document in
// the same half and keeps its own pieces of it there. Each half keeps its documents
// in their original order. A micro-batch of one document leaves the second half empty
// (zero tokens): it still takes part in every collective, so all ranks run the same
// sequence of exchanges.
#pragma once

#include <array>

#include "data/context_shards.h"

namespace lct {

// The two halves of `batch`. Rows are renumbered from 0 within each half (and the
// half's sequence is its documents back to back, in their original order).
std::array<LocalBatch, 2> split_nano_batches(const LocalBatch& batch);

}  // namespace lct
