// Data-parallel balance by packing (the WLB-LLM heuristic, OSDI'25, as DistCA's
// "WLB-ideal" baseline uses it): the documents of a step's global batch are re-packed
// over the data-parallel ranks and their micro-batches so that each holds about the
// same work (attention is quadratic in a document's length, the rest linear), at the
// cost of unequal token counts. The global batch is the same, and the loss is
// normalised by its global target count, so the gradient is the one of no balancing.
//
// Documents, longest first, go to the bin with the least work whose tokens stay within
// twice the even share; if none, to the bin with the fewest tokens. Ties go to the
// lowest bin; documents of equal length keep stream order. Deterministic: every rank
// computes the same packing and keeps its own bins.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compute/enum_names.h"
#include "data/context_shards.h"
#include "data/packing.h"

namespace lct {

// parallel.dp_balance
enum class DpBalance { none, packing };
inline constexpr EnumName<DpBalance> kDpBalanceNames[] = {
    {DpBalance::none, "none"},
    {DpBalance::packing, "packing", "re-pack the global batch's documents over dp ranks by work, WLB-LLM"},
};
inline DpBalance parse_dp_balance(const std::string& name) { return parse_enum(kDpBalanceNames, name, "data-parallel balance"); }
inline const char* dp_balance_name(DpBalance value) { return enum_name(kDpBalanceNames, value); }

// ranks x micro_batches bins of whole documents; bin (r, m) is rank r's micro-batch m.
// work(L) is the cost of one document of L tokens. Empty bins are dropped from a rank's
// list (a rank always keeps at least one micro-batch when it has any document).
std::vector<LocalBatch> pack_for_balance(const std::vector<PackedBatch>& sequences, int ranks,
                                         int micro_batches, int rank,
                                         const std::function<double(int64_t)>& work);

}  // namespace lct
