// A measured cost model of core attention for the CAD planner: kernel time (forward +
// backward) of a CA-task by its query rows q and key rows kv (a query shard at the end
// of its causal prefix), per attention pair, on a grid of (q, kv) measured by
// `lct bench --sections profile`, interpolated bilinearly in (log q, log kv) and clamped
// at the grid's edges. Pairs alone miss what small tasks cost beyond their pairs (tile
// padding, per-task overhead); the profile sees it.
//
// Its file format (TOML) is src/tune/cad_profile.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/core_attention.h"

namespace lct {

struct CadCostModel {
  std::string cpu, blas, kernel;
  int threads = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<int64_t> q_grid, kv_grid;     // ascending, >= 1
  std::vector<double> seconds_per_pair;     // [q_grid.size()][kv_grid.size()]

  // Seconds of forward + backward of a task of q_len query rows ending a prefix of
  // kv_len >= q_len key rows: the measured time per pair (measured on causal tasks) times
  // the pairs the mask lets through.
  double seconds(int64_t q_len, int64_t kv_len, const AttentionMask& mask = {}) const;
  // The same for any task whose keys start at its document's start (kv_pos = 0; a CAD
  // task): per pair at (q_len, kv_len), times the pairs it attends under `mask`.
  double seconds(const AttentionTask& task, const AttentionMask& mask) const;
  // What makes it unusable ("" when nothing): grids not ascending from 1, a time that
  // is not positive, not one time per grid cell, or no kernel and shape.
  std::string problem() const;
  // Measured for the same attention (kernel and shape) on the same machine (cpu, BLAS)
  // with the same threads: the fields that say where its times hold.
  bool same_setup(const CadCostModel& other) const;
  // Its grids reach cad_cost_grid(longest)'s last entry: a run whose tasks have at most
  // `longest` query and key rows never looks up past them.
  bool reaches(int64_t longest) const;
};

// The (q, kv) grid measured for tasks of at most `longest` rows: 16, 64, 256, 1024, 4096
// up to the first entry >= longest (4096 beyond: per-pair time is flat there, clamped).
// A task within the grid is interpolated between the same two entries as on the whole
// grid, so a run balances as it would with every entry measured.
std::vector<int64_t> cad_cost_grid(int64_t longest);

// Measures the cost model of `params` with the calling thread's OpenMP threads
// (cpu and blas only label it): forward + backward of tasks of q query rows ending a
// kv-row prefix on cad_cost_grid(longest) for both q and kv; a row's cells with kv <= q
// are one task, at kv = q, measured once. Each cell runs enough identical tasks (own
// query rows, shared key rows) for about `pairs` attention pairs, best of `repeats`.
CadCostModel measure_cost_model(const AttentionParams& params, const std::string& cpu,
                               const std::string& blas, int threads, int64_t longest,
                               int64_t pairs = int64_t(1) << 20, int repeats = 2);

}  // namespace lct
