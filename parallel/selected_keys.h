// attention.mask = block_sparse under context parallelism: each rank gets the block means
// its queries select from, and under the all-gather and the direct ring only the key
// blocks some query selects move (the "only selected key blocks move"), instead
// of every key before each rank's last query. The double ring gathers every rank's
// reads (gather_selected_reads) and relays the rows the ranks ahead read
// (data/relay_rows.h).
//
// Which blocks a query selects depends on the block means of every earlier block of its
// document, and those depend on keys held by other ranks. So, per exchange:
//   1. every rank sums, per document block, the key rows it holds of that block (exact
//      128-bit fixed-point sums, attention/block_sparse.h: KeySum), and one
//      MPI_Alltoallv sends each rank the sums of the blocks before its last query in
//      the documents where its queries choose (the counts follow from the group's
//      pieces, which every rank knows); a rank adds the parts of each block of
//      the documents it holds queries of, in any order, and gets the block means one
//      process computes, bit for bit;
//   2. each rank selects for its own queries (select_blocks over the means), and reads
//      the union of its queries' selected blocks and of their own blocks (the causal
//      run from the own block's first key to the last query);
//   3. an MPI_Alltoall of counts and an MPI_Alltoallv of runs tell every holder which of
//      its rows each reader reads (content-dependent, unlike data/key_runs.h's plan).
// The result is a KeyExchange the all-gather or the ring then uses as under any other
// mask, and the block means the kernel selects from (block_sparse_forward/backward's
// `means`): the gathered K is filled only in the rows read, and a ring step holds one
// rank's rows.
//
// CAD (parallel/cad_attention.h) takes step 1 only, within each context-parallel group,
// and selects where the queries are before they travel to their servers.
// The bytes of steps 1 and 3 count as exchange bytes, their waits as exposed time.
// `lct simulate` cannot know the content, so it prices block_sparse's all-gather as the
// causal superset (every key before a rank's last query), an estimate: a rank's union of
// selections is usually the whole prefix, and the sums and runs come on top.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "attention/block_sparse.h"
#include "data/key_runs.h"
#include "data/local_batch.h"
#include "data/relay_rows.h"

namespace lct {

struct SelectedKeys {
  std::vector<BlockMeans> means;   // per local piece (in LocalBatch::pieces order)
  int64_t bytes_sent = 0;          // steps 1 and 3, this rank
  double exposed_seconds = 0;      // waits in steps 1 and 3
  // scratch, kept between calls
  std::vector<KeySum> mine, all;
  std::vector<std::vector<double>> doc_kbar;
  std::vector<int32_t> selected;
};

// Plans one exchange (replaces `*exchange`; null: step 1 only, the means) for the local
// queries q and keys k (the rows of batch.pieces) of rank `me` of the context-parallel
// group `comm` (batch.group_pieces: every rank's), and gives the block means in `out`.
// Collective over `comm`.
void plan_selected_keys(MPI_Comm comm, int me, const AttentionParams& params, const LocalBatch& batch,
                        const float* q, const float* k, KeyExchange* exchange, SelectedKeys& out);

// The double ring (data/relay_rows.h): every rank's reads of every other rank's rows, from
// each rank's exchange.from (what plan_selected_keys found it reads), gathered with one
// MPI_Allgather of counts and one MPI_Allgatherv, so that a relay hop carries the
// selected and own rows of the ranks ahead. Adds its bytes and wait to out. Collective.
void gather_selected_reads(MPI_Comm comm, int me, const KeyExchange& exchange, RelayReads& reads, SelectedKeys& out);

}  // namespace lct
