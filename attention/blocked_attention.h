// The blocked ("flash-style") kernel behind core_attention.h; see there for layouts
// and the task contract.
//
// Forward: one work item is (task, kv head g, query block). The query rows of all
// G = H/KV heads reading kv head g are packed into one [G*n, hd] tile (pre-scaled by
// the softmax scale), so each key block costs two GEMMs with
// M = G*n: S = Qp K^T and acc += P V. K and V are read in place through strided
// pointers (GQA never replicates them). Key blocks entirely in the future of a query
// block are never visited, so work tracks the attended pairs (sum L_i^2 / 2).
//
// Backward (FlashAttention-2 order): one work item is (kv head g, key block) of a
// group of tasks sharing key rows. It owns dK/dV of its rows, streams the query
// blocks that can see them, recomputes P = exp(S - LSE) and uses D = rowsum(dO * O):
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dK += scale dS^T Q,  dQ += scale dS K.
// dQ rows are shared between items, so each thread beyond the first accumulates dQ in
// a private buffer that is summed into dq at the end. Items are assigned to threads
// by a deterministic longest-first greedy, so results are bit-identical for a given
// thread count.
//
// Non-finite inputs (core_attention.h): a row that reads a NaN or an infinity in a score
// or a value gets O = LSE = NaN, decided at the row's end from its sum and accumulator
// (softmax_row); a value block that holds one is multiplied from a copy without it where a
// row of the tile must not read it; the backward's P is NaN where the score or LSE is.
//
// Threads: OpenMP over work items (train.threads / OMP_NUM_THREADS); block GEMMs are
// single-threaded calls made from inside the parallel region: OpenBLAS in fp32, the
// AVX512-BF16 microkernel in bf16 (compute/bf16_tiles.h; its backward computes the
// transposed tiles, blocked_attention_bf16.cpp), or OpenBLAS on bf16-rounded tiles on
// a CPU without it. With one thread (one MPI rank per core) nothing extra is allocated
// for dQ.
#pragma once

#include "attention/core_attention.h"

namespace lct {

void blocked_attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                               const float* q, const float* k, const float* v, float* out,
                               float* lse);

void blocked_attention_backward(const AttentionParams& params,
                                std::span<const AttentionTask> tasks, const float* q,
                                const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv);

void blocked_attention_release_workspace();

}  // namespace lct
