#include "parallel/selected_keys.h"

#include <algorithm>
#include <map>

#include "parallel/mpi_util.h"

namespace lct {
namespace {

// The rows a rank holds of one document block: positions [lo, hi) of block `block`,
// from local row `row`. Only blocks some query may select (every block but a document's
// last) of documents whose queries choose (more than top_blocks earlier blocks) are
// summed.
struct BlockPart {
  int32_t doc;
  int64_t block, lo, hi, row;
};

void block_parts(const std::vector<DocPiece>& pieces, int64_t B, int64_t K, std::vector<BlockPart>& out) {
  out.clear();
  if (K == 0) return;  // nothing is chosen
  for (const DocPiece& p : pieces) {
    if (p.len <= 0) continue;
    const int64_t selectable = (std::max<int64_t>(p.doc_len, p.end()) - 1) / B;
    if (selectable <= K) continue;  // its queries take every earlier block: no scores
    for (int64_t m = p.pos / B; m < selectable && m * B < p.end(); ++m) {
      const int64_t lo = std::max<int64_t>(p.pos, m * B), hi = std::min<int64_t>(p.end(), (m + 1) * B);
      out.push_back({p.doc, m, lo, hi, p.row + (lo - p.pos)});
    }
  }
}

int count_of(int64_t n) { return mpi_count(n, "a block_sparse selection message"); }

}  // namespace

void plan_selected_keys(MPI_Comm comm, int me, const AttentionParams& params, const LocalBatch& batch,
                        const float* q, const float* k, KeyExchange* exchange, SelectedKeys& out) {
  const int size = int(batch.group_pieces.size());
  const int64_t B = params.mask.block_size, width = int64_t(params.num_kv_heads) * params.head_dim;
  const int64_t part_bytes = width * int64_t(sizeof(KeySum));
  out.bytes_sent = 0;
  out.exposed_seconds = 0;

  // 1. the block sums each rank needs: for every document it holds queries of that
  // choose (in a block after the first top_blocks), the blocks before its last query's
  // block. Sender and receiver both derive who needs what from the group's pieces.
  const int64_t K = params.mask.top_blocks;
  const size_t n_ranks = static_cast<size_t>(size);
  std::vector<std::map<int32_t, int64_t>> need(n_ranks);  // per rank: doc -> blocks [0, upto)
  for (int r = 0; r < size; ++r)
    for (const DocPiece& p : batch.group_pieces[size_t(r)])
      if (const int64_t upto = p.len > 0 ? (int64_t(p.end()) - 1) / B : 0; K > 0 && upto > K) {
        int64_t& u = need[size_t(r)][p.doc];
        u = std::max(u, upto);
      }
  const auto needs = [&](int r, const BlockPart& part) {
    const auto it = need[size_t(r)].find(part.doc);
    return it != need[size_t(r)].end() && part.block < it->second;
  };
  std::vector<std::vector<BlockPart>> parts(n_ranks);
  for (int r = 0; r < size; ++r) block_parts(batch.group_pieces[size_t(r)], B, K, parts[size_t(r)]);
  const std::vector<BlockPart>& own = parts[size_t(me)];
  out.mine.assign(own.size() * size_t(width), KeySum(0));
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < own.size(); ++i) {
    bool used = false;
    for (int r = 0; r < size && !used; ++r) used = needs(r, own[i]);
    if (used) add_key_sums(params, k + own[i].row * width, own[i].hi - own[i].lo, out.mine.data() + i * size_t(width));
  }
  std::vector<int> send_n(n_ranks), recv_n(n_ranks), sdispl(n_ranks), rdispl(n_ranks);
  std::vector<KeySum> send;
  int64_t received = 0;
  for (int r = 0; r < size; ++r) {
    sdispl[size_t(r)] = count_of(int64_t(send.size() * sizeof(KeySum)));
    if (r != me)
      for (size_t i = 0; i < own.size(); ++i)
        if (needs(r, own[i])) send.insert(send.end(), out.mine.begin() + i * size_t(width), out.mine.begin() + (i + 1) * size_t(width));
    send_n[size_t(r)] = count_of(int64_t(send.size() * sizeof(KeySum)) - sdispl[size_t(r)]);
    int64_t n = 0;
    if (r != me)
      for (const BlockPart& part : parts[size_t(r)]) n += needs(me, part);
    rdispl[size_t(r)] = count_of(received);
    recv_n[size_t(r)] = count_of(n * part_bytes);
    received += recv_n[size_t(r)];
  }
  out.all.resize(size_t(received) / sizeof(KeySum));
  auto t0 = SteadyClock::now();
  MPI_Alltoallv(send.data(), send_n.data(), sdispl.data(), MPI_BYTE, out.all.data(), recv_n.data(), rdispl.data(),
                MPI_BYTE, comm);
  out.exposed_seconds += waited_since(t0, "context-parallel exchange");
  out.bytes_sent += int64_t(send.size() * sizeof(KeySum));

  // the means of the documents this rank holds queries of (its own parts and the
  // received ones, added in any order: integer sums)
  std::map<int32_t, size_t> doc_index;
  std::vector<int64_t> doc_blocks;
  std::vector<std::vector<KeySum>> doc_sums;
  out.doc_kbar.resize(batch.pieces.size());
  for (const DocPiece& p : batch.pieces) {  // L: the blocks before its last local query's block
    if (p.len <= 0) continue;
    const int64_t L = (int64_t(p.end()) - 1) / B;
    if (!doc_index.count(p.doc)) {
      doc_index[p.doc] = doc_blocks.size();
      doc_blocks.push_back(L);
    }
    int64_t& l = doc_blocks[doc_index[p.doc]];
    l = std::max(l, L);
  }
  for (const int64_t L : doc_blocks) doc_sums.emplace_back(size_t(L * width), KeySum(0));
  for (int r = 0; r < size; ++r) {
    const KeySum* at = r == me ? out.mine.data() : out.all.data() + rdispl[size_t(r)] / int64_t(sizeof(KeySum));
    for (const BlockPart& part : parts[size_t(r)]) {
      if (!needs(me, part)) {
        if (r == me) at += width;  // own parts are all in `mine`
        continue;
      }
      KeySum* sums = doc_sums[doc_index.at(part.doc)].data() + part.block * width;
      for (int64_t x = 0; x < width; ++x) sums[x] += at[x];
      at += width;
    }
  }
  for (size_t d = 0; d < doc_blocks.size(); ++d) {
    const int64_t L = doc_blocks[d];
    std::vector<double>& kbar = out.doc_kbar[d];
    kbar.resize(size_t(L * width));
    for (int64_t m = 0; m < L; ++m)
      for (int64_t c = 0; c < width; ++c) kbar[size_t(c * L + m)] = key_mean(doc_sums[d][size_t(m * width + c)], B);
  }

  out.means.assign(batch.pieces.size(), BlockMeans{});
  for (size_t i = 0; i < batch.pieces.size(); ++i)
    if (const DocPiece& p = batch.pieces[i]; p.len > 0) {
      const size_t d = doc_index.at(p.doc);
      out.means[i] = {out.doc_kbar[d].data(), doc_blocks[d]};
    }
  if (!exchange) return;

  // 2. the local selection: the keys this rank reads, per document (in-document spans)
  std::map<int32_t, KeySpans> spans;
  const int64_t KV = params.num_kv_heads;
  std::vector<char> used;
  for (size_t i = 0; i < batch.pieces.size(); ++i) {
    const DocPiece& p = batch.pieces[i];
    if (p.len <= 0) continue;
    const size_t d = doc_index.at(p.doc);
    KeySpans& s = spans[p.doc];
    s.emplace_back(p.pos / B * B, p.end());  // the own blocks, causally
    const AttentionTask t = p.task(0, 0, p.end());
    for (int64_t lo = t.q_row, end = t.q_row + t.q_len; lo < end; lo += params.chunk_rows) {
      const int64_t hi = std::min(end, lo + params.chunk_rows);
      // sized by what the document can select, not by top_blocks (which may be any number)
      int64_t width = 0;
      select_blocks(params, t, lo, hi, q, nullptr, out.selected, &out.means[i], &width);
      used.assign(static_cast<size_t>(doc_blocks[d]), 0);
      for (int64_t e = 0; e < (hi - lo) * KV * width; ++e)
        if (const int32_t m = out.selected[size_t(e)]; m >= 0) used[size_t(m)] = 1;
      for (int64_t m = 0; m < doc_blocks[d]; ++m)
        if (used[size_t(m)]) s.emplace_back(m * B, (m + 1) * B);
      merge_spans(s);
    }
  }

  // 3. the runs of each holder this rank reads, and the holders told
  exchange->to.assign(size_t(size), {});
  exchange->from.assign(size_t(size), {});
  for (int o = 0; o < size; ++o) {
    if (o == me) continue;
    for (const DocPiece& h : batch.group_pieces[size_t(o)]) {
      const auto it = spans.find(h.doc);
      if (h.len <= 0 || it == spans.end()) continue;
      KeySpans of_h = it->second;
      append_runs(h, of_h, exchange->from[size_t(o)]);
    }
  }
  for (int o = 0; o < size; ++o) send_n[size_t(o)] = count_of(int64_t(exchange->from[size_t(o)].size() * sizeof(KeyRun)));
  t0 = SteadyClock::now();
  MPI_Alltoall(send_n.data(), 1, MPI_INT, recv_n.data(), 1, MPI_INT, comm);
  int64_t sent = 0;
  received = 0;
  for (int o = 0; o < size; ++o) {
    sdispl[size_t(o)] = count_of(sent), rdispl[size_t(o)] = count_of(received);
    sent += send_n[size_t(o)], received += recv_n[size_t(o)];
  }
  std::vector<KeyRun> send_runs, recv_runs(size_t(received) / sizeof(KeyRun));
  for (int o = 0; o < size; ++o) send_runs.insert(send_runs.end(), exchange->from[size_t(o)].begin(), exchange->from[size_t(o)].end());
  MPI_Alltoallv(send_runs.data(), send_n.data(), sdispl.data(), MPI_BYTE, recv_runs.data(), recv_n.data(),
                rdispl.data(), MPI_BYTE, comm);
  out.exposed_seconds += waited_since(t0, "context-parallel exchange");
  out.bytes_sent += sent + int64_t(sizeof(int)) * (size - 1);
  for (int o = 0; o < size; ++o) {
    const KeyRun* first = recv_runs.data() + rdispl[size_t(o)] / int64_t(sizeof(KeyRun));
    exchange->to[size_t(o)].assign(first, first + recv_n[size_t(o)] / int64_t(sizeof(KeyRun)));
  }
}

void gather_selected_reads(MPI_Comm comm, int me, const KeyExchange& exchange, RelayReads& reads, SelectedKeys& out) {
  const int size = int(exchange.from.size());
  // this rank's reads: per holder, a count and (row, len) per run
  std::vector<int32_t> mine;
  for (int j = 0; j < size; ++j) {
    const std::vector<KeyRun>& runs = j == me ? std::vector<KeyRun>{} : exchange.from[size_t(j)];
    mine.push_back(int32_t(runs.size()));
    for (const KeyRun& r : runs) mine.insert(mine.end(), {r.row, r.len});
  }
  const int n = count_of(int64_t(mine.size()));
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  const auto t0 = SteadyClock::now();
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) displs[size_t(r)] = count_of(total), total += counts[size_t(r)];
  std::vector<int32_t> all(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), n, MPI_INT, all.data(), counts.data(), displs.data(), MPI_INT, comm);
  out.exposed_seconds += waited_since(t0, "context-parallel exchange");
  out.bytes_sent += int64_t(sizeof(int32_t)) * (int64_t(n) + 1) * (size - 1);
  reads.assign(size_t(size), std::vector<RowSpans>(size_t(size)));
  for (int r = 0; r < size; ++r) {
    size_t at = size_t(displs[size_t(r)]);
    const size_t end = at + size_t(counts[size_t(r)]);
    for (int j = 0; j < size; ++j) {
      if (at >= end) throw std::logic_error("block_sparse: a malformed gathered read list");
      const int32_t runs = all[at++];
      if (runs < 0 || at + 2 * size_t(runs) > end) throw std::logic_error("block_sparse: a malformed gathered read list");
      for (int32_t i = 0; i < runs; ++i, at += 2) reads[size_t(r)][size_t(j)].emplace_back(all[at], int64_t(all[at]) + all[at + 1]);
    }
  }
}

}  // namespace lct
