// Core attention disaggregation (CAD, DistCA arXiv 2510.18121): which rank computes
// which piece of core attention. Pure and deterministic: no MPI, every rank computes
// the same plan from the same small metadata.
//
// A CA-task is a run of query rows of one document together with the keys they read
// under the mask (CadTask: the causal prefix [0, q_end), a window's last W keys, sinks,
// the question and the own answer, a bidirectional prefix). Its cost is its
// attention pairs (attention_pairs: those the mask lets through, with the document's
// prefix or segment). Every rank is
// an attention server, for its own documents first. The planner balances pairs over
// servers with the paper's communication-aware greedy: the most deficient server takes
// work from surplus servers, choosing the candidate with the most work per byte moved,
// and documents are split only as far as needed into head/tail pairs: about m query
// rows from each end of the document's remaining middle (a whole causal document's
// pair then costs about m (L + 1) pairs wherever the middle is), the cuts rounded to
// the kernel's query tile in pieces of at least kAlignedPieceTiles tiles, so that a
// row's O and LSE do not depend on the plan (CadPlanOptions::split_align). A
// context-parallel piece [pos, pos + len) is split the same way within its own rows
// (its head/tail pairs then cost more towards the end of the document; m is found by
// search either way). Work is attention pairs, or the measured kernel time of a
// profile (CadPlanOptions::cost); m is the largest that fits the wanted amount.
// Planning stops when every server is within tolerance x mean, or nothing helps.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/core_attention.h"

namespace lct {

// One document of a tick on the rank that holds its tokens, or, with context
// parallelism, one piece of it: in-document rows [pos, pos + len), whose keys are the
// document's prefix [0, pos + len) (held by several ranks; the placement moves them).
struct CadPiece {
  int32_t origin = 0;  // rank holding these tokens (and their token-linear layers)
  int32_t doc = 0;     // index among the origin's documents (pieces)
  int32_t row = 0;     // first row in the origin's local arrays
  int32_t len = 0;     // tokens
  int32_t pos = 0;     // in-document offset of the first token (0: a whole document)
  // per-document mask data, as DocPiece carries it (a piece lies in one shared_question
  // segment): prefix_lm's prefix or the question's length, and the segment's start
  int32_t prefix_len = 0, segment_pos = 0;
  int32_t doc_len = 0;  // tokens of the whole document (bounds the masks that read ahead)
};

struct CadTask {
  int32_t origin = 0, server = 0;
  int32_t doc = 0;      // index among the origin's documents (pieces)
  int32_t q_begin = 0;  // in-document offset of the first query row (>= the piece's pos)
  int32_t q_len = 0;
  int32_t prefix_len = 0, segment_pos = 0;  // its piece's (CadPiece)
  // The keys its queries read under the mask (mask_run_keys): [0, kv_sink_end) and
  // [kv_lo, kv_end). The kernel reads them as one run [kv_begin, kv_end): from 0 when
  // there are sinks (the keys between are masked: a server zeroes them, nobody sends
  // them), else from kv_lo. Causal: [0, q_end); a window: the W keys before each query.
  int32_t kv_sink_end = 0, kv_lo = 0, kv_end = 0;
  int32_t kv_begin() const { return kv_sink_end > 0 ? 0 : kv_lo; }
  int32_t kv_len() const { return kv_end - kv_begin(); }
  int32_t kv_read() const { return kv_sink_end + (kv_end - kv_lo); }  // the rows that move
  MaskKeys keys() const { return {kv_sink_end, kv_lo, kv_end}; }
  // The kernel's task of it: its queries at q_row, its keys from kv_row (the row of
  // position kv_begin).
  AttentionTask attention_task(int64_t q_row, int64_t kv_row, int32_t doc_len) const;
};

// The task of query rows [q_begin, q_begin + q_len) of piece `d` (the keys they read
// under `mask`), run by `server`.
CadTask cad_task(const CadPiece& d, int server, int64_t q_begin, int64_t q_len, const AttentionMask& mask);

struct CadCostModel;

constexpr int64_t kAlignedPieceTiles = 8;

struct CadPlanOptions {
  double tolerance = 0.1;       // stop when every server is within tolerance x mean cost
  int64_t q_bytes_per_row = 1;  // bytes moved per query row (Q there, O and LSE back)
  int64_t kv_bytes_per_row = 1; // bytes moved per key row (K and V)
  // Pieces of at least kAlignedPieceTiles x this many rows are cut only at in-document
  // positions that are multiples of it (and at their ends): the attention kernel's query
  // tile (attention_query_tile), so that their rows' O and LSE are the same bits
  // whichever plan cut them (cad_plan_options sets it; 1 = anywhere). Shorter pieces are
  // cut anywhere: a tile's granularity would cost them their balance.
  int64_t split_align = 1;
  // true: shorter pieces too are cut only at multiples of split_align (whole when shorter
  // than it). A row's O and LSE are then the same bits under any two plans even where the
  // BLAS's rows depend on the product's row count (OpenBLAS's Haswell SGEMM does; its
  // SkylakeX one does not): for plans that must agree bit for bit (full recomputation
  // under pipeline ticks).
  bool align_short_pieces = false;
  // Cost of a task: measured kernel time (parallel/cad_cost.h) when given, else its
  // attention pairs.
  const CadCostModel* cost = nullptr;
  // The attention mask: a task's pairs are those it lets through (attention_mask.h).
  AttentionMask mask;
  // Servers of unequal speed (with a cost model; empty: all equal, nothing else to do):
  // per server, the seconds it spends on other work of the same group (its token-linear
  // layers), and how much slower than the cost model its kernels run (1 = as measured).
  // The planner then balances base + speed x cost instead of cost alone.
  std::vector<double> base_seconds, speed;
};

// The options of every CAD plan of a model: the bytes a moved row costs follow from its
// attention shape and precision (Q there, O and LSE back; K and V of moved prefixes; bf16
// runs carry all but the LSE in bf16), the rest
// from the run (attention.cad_tolerance and the cost model, or pairs when null). The
// trainer, the simulator and lct bench all plan with these.
CadPlanOptions cad_plan_options(const AttentionParams& params, double tolerance,
                              const CadCostModel* cost);

struct CadPlan {
  std::vector<CadTask> tasks;        // every query row of every document exactly once
  std::vector<int64_t> pairs_before;  // per server: its own documents' pairs
  std::vector<int64_t> pairs_after;   // per server: the pairs of the tasks it runs
  std::vector<double> load_after;     // per server: the planner's cost of its tasks (no
                                      // base or speed: the cost model's own units)
  int64_t bytes_moved = 0;          // Q/O/LSE of moved rows + K/V of the keys they read
};

CadPlan plan_core_attention(const std::vector<CadPiece>& documents, int servers,
                           const CadPlanOptions& options);

}  // namespace lct
