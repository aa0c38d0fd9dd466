// The layout of a run: the degrees of data, pipeline and context parallelism, the rank
// order, and how a context-parallel group exchanges keys and values. Pure functions, no
// MPI: the run plan (src/train/run_plan.h) resolves a layout without a communicator, and
// parallel/process_grid.h builds the communicators from it.
//
// Degrees dp x pp x cp must equal the MPI world size (one degree may be -1: inferred).
// Rank order (fixed, documented): cp varies fastest, then dp, then pp:
//     world_rank = cp_rank + cp * (dp_rank + dp * pp_rank)
// so the ranks of one context-parallel group are neighbours (same node first) and a
// pipeline stage is a contiguous block of dp * cp ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/enum_names.h"

namespace lct {

struct LayoutRequest {
  int64_t dp = -1, pp = 1, cp = 1;  // parallel.* keys; -1 = infer from the world size
  std::vector<int64_t> pp_layers;   // layers per pipeline stage (empty = even split)
};

struct Layout {
  int dp = 1, pp = 1, cp = 1;
};

// Resolves -1 and checks every layout rule against the world size and the model; the
// error (empty when valid) is one line naming the keys and printing every factor.
std::string resolve_layout(const LayoutRequest& request, int world_size, int num_layers,
                           int64_t seq_len, Layout& layout);

struct GridCoordinates {
  int dp_rank = 0, pp_rank = 0, cp_rank = 0;
};
GridCoordinates grid_coordinates(const Layout& layout, int world_rank);
int world_rank_of(const Layout& layout, const GridCoordinates& c);
// "dp 2 x pp 1 x cp 2", and "rank 3 (dp 1, pp 0, cp 1)" (logs, timelines, simulate).
std::string layout_name(const Layout& layout);
std::string rank_name(const Layout& layout, int world_rank);

// parallel.cp_comm: how the ranks of a context-parallel group exchange keys and values
// (allgather, ring, and double_ring = inner rings of parallel.cp_inner_ring ranks x an
// outer ring: parallel/context_parallel.h) or trade sequence for heads (ulysses, and
// hybrid = ulysses inside groups of parallel.cp_ulysses ranks x ring across them:
// parallel/ulysses_attention.h).
enum class CpComm { allgather, ring, ulysses, hybrid, double_ring };
inline constexpr EnumName<CpComm> kCpCommNames[] = {
    {CpComm::allgather, "allgather", "every rank gathers the sequence's keys and values"},
    {CpComm::ring, "ring"},
    {CpComm::ulysses, "ulysses", "all-to-all: whole sequence, heads / cp per rank"},
    {CpComm::hybrid, "hybrid", "ulysses inside groups of parallel.cp_ulysses ranks, ring across them"},
    {CpComm::double_ring, "double_ring", "inner rings of parallel.cp_inner_ring ranks, outer ring across them"},
};
inline CpComm parse_cp_comm(const std::string& name) { return parse_enum(kCpCommNames, name, "context-parallel exchange"); }
inline const char* cp_comm_name(CpComm value) { return enum_name(kCpCommNames, value); }

// Where core attention runs. attention.placement chooses colocated or cad; the run plan
// (src/train/run_plan.h) turns colocated into context_parallel when parallel.cp > 1.
enum class Placement {
  colocated,         // with its tokens, on the rank that holds them
  context_parallel,  // the cp group exchanges keys and values (parallel.cp_comm)
  cad,               // disaggregated over every rank (parallel/cad_attention.h)
};
inline constexpr EnumName<Placement> kPlacementNames[] = {
    {Placement::colocated, "colocated"},
    {Placement::context_parallel, "context-parallel", "follows from parallel.cp > 1", false},
    {Placement::cad, "cad", "disaggregated over all ranks, DistCA"},
};
inline const char* placement_name(Placement value) { return enum_name(kPlacementNames, value); }
// attention.placement: colocated or cad (context-parallel follows from parallel.cp > 1).
inline Placement parse_placement(const std::string& name) {
  if (name == placement_name(Placement::context_parallel))
    throw std::invalid_argument("attention placement 'context-parallel' is not a setting: it follows from parallel.cp > 1 "
                                "(expected: " + enum_choices(kPlacementNames) + ")");
  return parse_enum(kPlacementNames, name, "attention placement");
}

}  // namespace lct
