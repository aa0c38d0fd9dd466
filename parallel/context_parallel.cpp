#include "parallel/context_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "parallel/collectives.h"
#include "parallel/mpi_util.h"

namespace lct {
namespace {
int count_of(int64_t n) { return mpi_count(n, "a context-parallel message"); }
int64_t rows_of(const std::vector<DocPiece>& pieces) {
  int64_t n = 0;
  for (const DocPiece& p : pieces) n += p.len;
  return n;
}
int64_t kv_width(const AttentionParams& p) { return int64_t(p.num_kv_heads) * p.head_dim; }
}  // namespace

ContextParallelAttention::ContextParallelAttention(MPI_Comm cp_comm, CpComm method, int inner_ring)
    : comm_(cp_comm), method_(method) {
  if (comm_ == MPI_COMM_NULL) throw std::invalid_argument("context parallelism needs a cp communicator");
  if (method_ != CpComm::ring && method_ != CpComm::double_ring && method_ != CpComm::allgather)
    throw std::invalid_argument("ContextParallelAttention runs ring, double_ring or allgather");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  inner_ = method_ == CpComm::double_ring ? inner_ring : size_;
  if (inner_ < 1 || size_ % inner_ != 0)
    throw std::invalid_argument("double ring: inner rings of " + std::to_string(inner_) + " ranks do not divide the " +
                                std::to_string(size_) + " ranks of the context-parallel group");
  outer_ = size_ / inner_;
  // tags: inner steps below 4 size + 4, outer steps from kOuterTag, all within the
  // 32767 every MPI allows
  if (4 * size_ + 4 > kOuterTag || kOuterTag + 2 * outer_ > 32767)
    throw std::invalid_argument("context parallelism over " + std::to_string(size_) +
                                " ranks: more ring steps than lct's message tags allow (at most 7499)");
  g_ = rank_ / inner_;
  u_ = rank_ % inner_;
  bytes_per_second_ = probe_ring_bandwidth(comm_);
}

PlacementStats ContextParallelAttention::stats() const {
  return with_hidden_estimate(stats_, bytes_per_second_);
}

void ContextParallelAttention::forward(const AttentionInput& in, const float* q, const float* k,
                                       const float* v, float* out, float* lse) {
  if (int(in.batch.group_pieces.size()) != size_ || in.batch.cp_rank != rank_)
    throw std::logic_error("context-parallel batch was split for another group");
  if (!in.recomputed) stats_.pairs_served += double(in.batch.attention_pairs(in.params.mask));
  if (method_ == CpComm::allgather)
    allgather_forward(in, q, k, v, out, lse);
  else
    ring_forward(in, q, k, v, out, lse);
}

void ContextParallelAttention::backward(const AttentionInput& in, const float* q,
                                        const float* k, const float* v, const float* out,
                                        const float* lse, const float* dout, float* dq,
                                        float* dk, float* dv) {
  if (method_ == CpComm::allgather)
    allgather_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
  else
    ring_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
}

// ---- all-gather -------------------------------------------------------------------

// K and V of the whole sequence, in sequence order, into ks_ / vs_; tasks_ = every local
// piece against its document's key prefix.
void ContextParallelAttention::gather_sequence_kv(const AttentionInput& in, const float* k,
                                                  const float* v) {
  const int64_t w = kv_width(in.params);
  const auto& group = in.batch.group_pieces;
  counts_.assign(size_t(size_), 0);
  displs_.assign(size_t(size_), 0);
  int64_t total = 0;
  for (int j = 0; j < size_; ++j) {
    counts_[size_t(j)] = count_of(2 * rows_of(group[size_t(j)]) * w);
    displs_[size_t(j)] = count_of(total);
    total += counts_[size_t(j)];
  }
  if (gathered_.size() < size_t(total)) gathered_.resize(size_t(total));
  const int64_t mine = rows_of(in.batch.pieces) * w;
  const bool wire16 = in.params.precision == Precision::bf16;
  if (wire16 && gathered16_.size() < size_t(total)) gathered16_.resize(size_t(total));
  const auto t0 = SteadyClock::now();
  if (wire16) {
    uint16_t* slot = gathered16_.data() + displs_[size_t(rank_)];
    to_bf16_bits(k, mine, slot);
    to_bf16_bits(v, mine, slot + mine);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gathered16_.data(), counts_.data(),
                   displs_.data(), MPI_UINT16_T, comm_);
  } else {
    float* slot = gathered_.data() + displs_[size_t(rank_)];
    std::copy(k, k + mine, slot);
    std::copy(v, v + mine, slot + mine);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gathered_.data(), counts_.data(),
                   displs_.data(), MPI_FLOAT, comm_);
  }
  stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  stats_.bytes_sent += int64_t(size_ - 1) * 2 * mine * int64_t(wire16 ? sizeof(uint16_t) : sizeof(float));

  const size_t seq = size_t(in.batch.sequence_tokens * w);
  if (ks_.size() < seq) ks_.resize(seq), vs_.resize(seq);
  for (int j = 0; j < size_; ++j) {
    const int64_t rows_j = rows_of(group[size_t(j)]);
    const int64_t at = displs_[size_t(j)];
    for (const DocPiece& p : group[size_t(j)]) {
      float* kd = ks_.data() + p.seq_row() * w;
      float* vd = vs_.data() + p.seq_row() * w;
      const int64_t k_at = at + p.row * w, v_at = at + (rows_j + p.row) * w, n = p.len * w;
      if (wire16) {
        from_bf16_bits(gathered16_.data() + k_at, n, kd);
        from_bf16_bits(gathered16_.data() + v_at, n, vd);
      } else {
        std::copy_n(gathered_.data() + k_at, n, kd);
        std::copy_n(gathered_.data() + v_at, n, vd);
      }
    }
  }
  tasks_.clear();
  for (const DocPiece& p : in.batch.pieces) tasks_.push_back(p.task(p.doc_start, 0, p.key_end(in.params.mask)));
}

void ContextParallelAttention::allgather_forward(const AttentionInput& in, const float* q,
                                                 const float* k, const float* v, float* out,
                                                 float* lse) {
  gather_sequence_kv(in, k, v);
  attention_forward(in.params, tasks_, q, ks_.data(), vs_.data(), out, lse);
}

void ContextParallelAttention::allgather_backward(const AttentionInput& in, const float* q,
                                                  const float* k, const float* v,
                                                  const float* out, const float* lse,
                                                  const float* dout, float* dq, float* dk,
                                                  float* dv) {
  gather_sequence_kv(in, k, v);  // K and V are not kept between forward and backward
  const int64_t w = kv_width(in.params);
  const size_t seq = size_t(in.batch.sequence_tokens * w);
  dks_.assign(seq, 0.0f);
  dvs_.assign(seq, 0.0f);
  attention_backward(in.params, tasks_, q, ks_.data(), vs_.data(), out, lse, dout, dq,
                     dks_.data(), dvs_.data());
  // back to rank-block order, then each rank receives the sum for its own rows
  const auto& group = in.batch.group_pieces;
  if (reduced_.size() < gathered_.size()) reduced_.resize(gathered_.size());
  for (int j = 0; j < size_; ++j) {
    const int64_t rows_j = rows_of(group[size_t(j)]);
    float* kb = reduced_.data() + displs_[size_t(j)];
    float* vb = kb + rows_j * w;
    for (const DocPiece& p : group[size_t(j)]) {
      std::copy(dks_.data() + p.seq_row() * w, dks_.data() + (p.seq_row() + p.len) * w, kb + p.row * w);
      std::copy(dvs_.data() + p.seq_row() * w, dvs_.data() + (p.seq_row() + p.len) * w, vb + p.row * w);
    }
  }
  const int64_t mine = rows_of(in.batch.pieces) * w;
  const auto t0 = SteadyClock::now();
  MPI_Reduce_scatter(reduced_.data(), gathered_.data(), counts_.data(), MPI_FLOAT, MPI_SUM, comm_);
  stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  int64_t others = 0;
  for (int j = 0; j < size_; ++j)
    if (j != rank_) others += counts_[size_t(j)];
  stats_.bytes_sent += others * int64_t(sizeof(float));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < mine; ++i) {
    dk[i] += gathered_[size_t(i)];
    dv[i] += gathered_[size_t(mine + i)];
  }
}

// ---- ring -------------------------------------------------------------------------

void ContextParallelAttention::ring_tasks(const AttentionInput& in, int j) {
  const std::vector<DocPiece>& theirs = in.batch.group_pieces[size_t(j)];
  for (auto& c : calls_) c.clear();
  for (const DocPiece& p : in.batch.pieces) {
    // j's pieces are in document order: find the ones of p's document
    auto it = std::lower_bound(theirs.begin(), theirs.end(), p.doc,
                               [](const DocPiece& x, int32_t doc) { return x.doc < doc; });
    size_t call = 0;
    const int32_t key_end = p.key_end(in.params.mask);
    for (; it != theirs.end() && it->doc == p.doc; ++it) {
      if (it->pos >= key_end) continue;  // p reads none of its keys
      if (calls_.size() <= call) calls_.emplace_back();
      calls_[call++].push_back(p.task(it->row, it->pos, it->len));
    }
  }
}

// Tests the requests in flight: OpenMPI progresses them only inside MPI calls.
void ContextParallelAttention::progress() {
  int done = 0;
  if (!requests_.empty()) MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
  if (!outer_requests_.empty())
    MPI_Testall(int(outer_requests_.size()), outer_requests_.data(), &done, MPI_STATUSES_IGNORE);
}

// Waits for transfers still in flight; the time waited is exposed.
void ContextParallelAttention::finish(std::vector<MPI_Request>& requests) {
  if (requests.empty()) return;
  const auto t_wait = SteadyClock::now();
  MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  stats_.exposed_seconds += waited_since(t_wait, "context-parallel exchange");
  requests.clear();
}

int ContextParallelAttention::ring_rank(int g, int u) const {
  return ((g % outer_ + outer_) % outer_) * inner_ + (u % inner_ + inner_) % inner_;
}

int ContextParallelAttention::block_at(int s) const { return ring_rank(g_ - s / inner_, u_ - s % inner_); }

// This rank's own K and V block (n floats each): the kernel reads them in place; in a
// bf16 run they travel as bf16 copies.
ContextParallelAttention::Block ContextParallelAttention::own_block(const AttentionInput& in,
                                                                  const float* k, const float* v,
                                                                  int64_t n) {
  bf16_wire_ = in.params.precision == Precision::bf16;
  if (!bf16_wire_) return {k, v, k, v};
  if (own_k_.size() < size_t(n)) own_k_.resize(size_t(n)), own_v_.resize(size_t(n));
  to_bf16_bits(k, n, own_k_.data());
  to_bf16_bits(v, n, own_v_.data());
  return {own_k_.data(), own_v_.data(), k, v};
}

// The block a post_block into `slot` received (n elements each), once it has arrived.
ContextParallelAttention::Block ContextParallelAttention::arrived(Slot& slot, int64_t n) {
  if (!bf16_wire_) return {slot.k.data(), slot.v.data(), slot.k.data(), slot.v.data()};
  if (slot.k.size() < size_t(n)) slot.k.resize(size_t(n)), slot.v.resize(size_t(n));
  from_bf16_bits(slot.wire_k.data(), n, slot.k.data());
  from_bf16_bits(slot.wire_v.data(), n, slot.v.data());
  return {slot.wire_k.data(), slot.wire_v.data(), slot.k.data(), slot.v.data()};
}

// Sends the block in hand (K, V of n elements each) to rank dst and receives the block
// of n_next elements from rank src into slot; tags tag, tag + 1; requests appended.
void ContextParallelAttention::post_block(const Block& cur, int64_t n, int dst, int src, int64_t n_next,
                                          Slot& slot, int tag, std::vector<MPI_Request>& requests) {
  void *rk, *rv;
  if (bf16_wire_) {
    if (slot.wire_k.size() < size_t(n_next)) slot.wire_k.resize(size_t(n_next)), slot.wire_v.resize(size_t(n_next));
    rk = slot.wire_k.data(), rv = slot.wire_v.data();
  } else {
    if (slot.k.size() < size_t(n_next)) slot.k.resize(size_t(n_next)), slot.v.resize(size_t(n_next));
    rk = slot.k.data(), rv = slot.v.data();
  }
  const MPI_Datatype type = bf16_wire_ ? MPI_UINT16_T : MPI_FLOAT;
  const size_t at = requests.size();
  requests.resize(at + 4);
  MPI_Irecv(rk, count_of(n_next), type, src, tag, comm_, &requests[at]);
  MPI_Irecv(rv, count_of(n_next), type, src, tag + 1, comm_, &requests[at + 1]);
  MPI_Isend(cur.k_wire, count_of(n), type, dst, tag, comm_, &requests[at + 2]);
  MPI_Isend(cur.v_wire, count_of(n), type, dst, tag + 1, comm_, &requests[at + 3]);
  stats_.bytes_sent += 2 * n * int64_t(bf16_wire_ ? sizeof(uint16_t) : sizeof(float));
}

// Ring step s: the next block travels (inner pass, and at an outer step's first inner
// step the outer pass) while the block in hand is computed. Returns the slot the next
// block arrives in.
ContextParallelAttention::Slot& ContextParallelAttention::start_passes(const AttentionInput& in, int s,
                                                                       const Block& cur, int tag) {
  const int o = s / inner_, i = s % inner_;
  const int64_t w = kv_width(in.params);
  const auto rows = [&](int block) { return rows_of(in.batch.group_pieces[size_t(block)]) * w; };
  const int64_t n = rows(block_at(s));
  requests_.clear();
  if (i + 1 < inner_)
    post_block(cur, n, ring_rank(g_, u_ + 1), ring_rank(g_, u_ - 1), rows(block_at(s + 1)),
               inner_slot_[(s + 1) & 1], tag, requests_);
  if (i == 0 && o + 1 < outer_) {
    outer_requests_.clear();
    post_block(cur, n, ring_rank(g_ + 1, u_), ring_rank(g_ - 1, u_), rows(block_at(s + inner_)),
               outer_slot_[(o + 1) & 1], kOuterTag + 2 * o, outer_requests_);
  }
  return i + 1 < inner_ ? inner_slot_[(s + 1) & 1] : outer_slot_[(o + 1) & 1];
}

void ContextParallelAttention::ring_forward(const AttentionInput& in, const float* q,
                                            const float* k, const float* v, float* out,
                                            float* lse) {
  const AttentionParams& prm = in.params;
  const int64_t w = kv_width(prm), H = prm.num_heads, hd = prm.head_dim;
  const int64_t T = rows_of(in.batch.pieces);
  std::fill(out, out + T * H * hd, 0.0f);
  std::fill(lse, lse + T * H, -INFINITY);
  if (part_out_.size() < size_t(T * H * hd)) part_out_.resize(size_t(T * H * hd));
  if (part_lse_.size() < size_t(T * H)) part_lse_.resize(size_t(T * H));
  Block cur = own_block(in, k, v, T * w);
  for (int s = 0; s < size_; ++s) {
    const int j = block_at(s);
    Slot& next = start_passes(in, s, cur, 2 * s);  // the next block travels meanwhile
    ring_tasks(in, j);
    for (const std::vector<AttentionTask>& call : calls_) {
      if (call.empty()) continue;
      std::fill(part_lse_.begin(), part_lse_.begin() + T * H, -INFINITY);
      attention_forward(prm, call, q, cur.k, cur.v, part_out_.data(), part_lse_.data());
      progress();
      merge_attention_partial(out, lse, part_out_.data(), part_lse_.data(), T, int(H), int(hd));
      progress();
    }
    finish(requests_);
    if ((s + 1) % inner_ == 0) finish(outer_requests_);
    if (s + 1 < size_) cur = arrived(next, rows_of(in.batch.group_pieces[size_t(block_at(s + 1))]) * w);
  }
}

void ContextParallelAttention::ring_backward(const AttentionInput& in, const float* q,
                                             const float* k, const float* v, const float* out,
                                             const float* lse, const float* dout, float* dq,
                                             float* dk, float* dv) {
  const AttentionParams& prm = in.params;
  const int64_t w = kv_width(prm);
  // Block j's dK/dV accumulator follows it: from the rank that computed on j one step
  // before (the inner predecessor, or at an outer step's start the one diagonally
  // before) to the one that computes on it next, and after the last step to its owner.
  const auto acc_source = [&](int s) { return s % inner_ > 0 ? ring_rank(g_, u_ - 1) : ring_rank(g_ - 1, u_ - 1); };
  const auto acc_dest = [&](int s) {
    return (s + 1) % inner_ > 0 ? ring_rank(g_, u_ + 1) : ring_rank(g_ + 1, u_ + 1);
  };
  // accumulators sent on at step s (buffer s & 1) are reused two steps later
  MPI_Request acc_sent[2][2] = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL},
                                {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
  const auto wait_exposed = [&](int n, MPI_Request* r) {
    const auto t0 = SteadyClock::now();
    MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
    stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  };
  Block cur = own_block(in, k, v, rows_of(in.batch.pieces) * w);
  for (int s = 0; s < size_; ++s) {
    const int j = block_at(s);
    const int64_t n_j = rows_of(in.batch.group_pieces[size_t(j)]) * w;
    const int b = s & 1;
    Slot& next = start_passes(in, s, cur, 4 * s);  // the next block travels meanwhile
    if (s > 0) {  // block j's accumulator, from the ranks that computed on it before
      if (acc_in_k_.size() < size_t(n_j)) acc_in_k_.resize(size_t(n_j)), acc_in_v_.resize(size_t(n_j));
      requests_.resize(requests_.size() + 2);
      MPI_Request* r = &requests_[requests_.size() - 2];
      MPI_Irecv(acc_in_k_.data(), count_of(n_j), MPI_FLOAT, acc_source(s), 4 * s + 2, comm_, &r[0]);
      MPI_Irecv(acc_in_v_.data(), count_of(n_j), MPI_FLOAT, acc_source(s), 4 * s + 3, comm_, &r[1]);
    }
    // this rank's contribution to block j's dK/dV
    wait_exposed(2, acc_sent[b]);
    std::vector<float>& ak = acc_k_[b];
    std::vector<float>& av = acc_v_[b];
    ak.assign(size_t(n_j), 0.0f);
    av.assign(size_t(n_j), 0.0f);
    ring_tasks(in, j);
    for (const std::vector<AttentionTask>& call : calls_) {
      if (call.empty()) continue;
      attention_backward(prm, call, q, cur.k, cur.v, out, lse, dout, dq, ak.data(), av.data());
      progress();
    }
    finish(requests_);
    if ((s + 1) % inner_ == 0) finish(outer_requests_);
    if (s > 0) {  // upstream sum + this rank's part (a fixed order)
#pragma omp parallel for schedule(static)
      for (int64_t e = 0; e < n_j; ++e) {
        ak[size_t(e)] += acc_in_k_[size_t(e)];
        av[size_t(e)] += acc_in_v_[size_t(e)];
      }
    }
    // on to the next visitor; after the last step that is block j's owner
    MPI_Isend(ak.data(), count_of(n_j), MPI_FLOAT, acc_dest(s), 4 * (s + 1) + 2, comm_, &acc_sent[b][0]);
    MPI_Isend(av.data(), count_of(n_j), MPI_FLOAT, acc_dest(s), 4 * (s + 1) + 3, comm_, &acc_sent[b][1]);
    stats_.bytes_sent += 2 * n_j * int64_t(sizeof(float));
    if (s + 1 < size_) cur = arrived(next, rows_of(in.batch.group_pieces[size_t(block_at(s + 1))]) * w);
  }
  // this rank's own block comes back with every rank's contribution
  const int64_t n_mine = rows_of(in.batch.pieces) * w;
  if (acc_in_k_.size() < size_t(n_mine)) acc_in_k_.resize(size_t(n_mine)), acc_in_v_.resize(size_t(n_mine));
  MPI_Request last[2];
  MPI_Irecv(acc_in_k_.data(), count_of(n_mine), MPI_FLOAT, acc_source(size_), 4 * size_ + 2, comm_, &last[0]);
  MPI_Irecv(acc_in_v_.data(), count_of(n_mine), MPI_FLOAT, acc_source(size_), 4 * size_ + 3, comm_, &last[1]);
  wait_exposed(2, last);
  for (auto& pair : acc_sent) wait_exposed(2, pair);
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < n_mine; ++e) {
    dk[e] += acc_in_k_[size_t(e)];
    dv[e] += acc_in_v_[size_t(e)];
  }
}

}  // namespace lct
