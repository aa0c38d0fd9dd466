// The double ring's relay under a mask (parallel.cp_comm = double_ring, LoongTrain): which
// rows of a block each hop carries. The relay passes rank j's K/V block from rank to rank
// (inner rings of `inner` consecutive ranks, an outer ring across them: rank = g inner +
// u), and every rank computes its queries against every block once; a hop need carry only
// the rows that some rank still to come reads (data/key_runs.h: read_runs), and a dK/dV
// accumulator only the rows some rank that computed on the block before has read (the
// others are zeros). Both sides of every hop compute the same rows from the group's
// pieces, which every rank knows, so nothing but the rows travels, and `lct simulate`
// prices the same rows (src/sim/costs.cpp).
//
// The topology (parallel/context_parallel.h): at step s = o inner + i rank (g, u) computes
// on the block of rank (g - o, u - i); the block it holds travels on to (g, u + 1) while
// i + 1 < inner (the inner hop), and at i = 0 also to (g + 1, u) while o + 1 < outer (the
// outer hop). So after the inner hop at step s the block is read by (g, u + 1 + t), t <
// inner - 1 - i; after the outer hop by every rank of groups g + 1 ... g + outer - 1 - o.
// The visitors of block j (at (gj, uj)) in step order are (gj + s / inner, uj + s % inner),
// its owner first (s = 0), who adds its own part at home: the accumulator after step s
// carries the rows visitors 1 ... s read, and comes home with the rows any other rank read.
#pragma once

#include <vector>

#include "data/key_runs.h"

namespace lct {

// Row spans [a, b) of one rank's block (its local rows), sorted and merged.
using RowSpans = std::vector<std::pair<int64_t, int64_t>>;
int64_t rows_in(const RowSpans& spans);

struct RelayStep {
  int block = 0;          // whose block this rank computes on
  RowSpans arrive;        // s > 0: the rows of it that arrived (inner or outer hop)
  bool inner = false, outer = false;  // whether it travels on from here
  RowSpans inner_rows, outer_rows;    // the rows each hop carries
  RowSpans acc_arrive;    // s > 0 (backward): the accumulator rows that arrive with it
  RowSpans acc_send;      // backward: the accumulator rows sent on after this step (none at step 0)
};

struct RelayPlan {
  std::vector<RelayStep> steps;  // [cp]
  RowSpans home;                 // backward: the rows of this rank's own accumulator coming back (other ranks' reads)
};

// reads[r][j]: the rows of rank j's block that rank r's queries read.
using RelayReads = std::vector<std::vector<RowSpans>>;
// What the mask lets each rank read (read_runs; under block_sparse the causal shape,
// a superset of any selection).
RelayReads relay_reads(const std::vector<std::vector<DocPiece>>& group, const AttentionMask& mask);

// The plan of rank `me` of a group of reads.size() ranks in inner rings of `inner`.
RelayPlan plan_relay(const RelayReads& reads, int inner, int me);
inline RelayPlan plan_relay(const std::vector<std::vector<DocPiece>>& group, int inner, int me,
                            const AttentionMask& mask) {
  return plan_relay(relay_reads(group, mask), inner, me);
}

}  // namespace lct
