#include "parallel/context_parallel.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "data/key_runs.h"
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
  plan(in, q, k);
  if (method_ == CpComm::allgather)
    allgather_forward(in, q, k, v, out, lse);
  else if (method_ == CpComm::ring)
    direct_forward(in, q, k, v, out, lse);
  else
    relay_forward(in, q, k, v, out, lse);
}

void ContextParallelAttention::backward(const AttentionInput& in, const float* q,
                                        const float* k, const float* v, const float* out,
                                        const float* lse, const float* dout, float* dq,
                                        float* dk, float* dv) {
  plan(in, q, k);
  if (method_ == CpComm::allgather)
    allgather_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
  else if (method_ == CpComm::ring)
    direct_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
  else
    relay_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
}

bool ContextParallelAttention::selects(const AttentionInput& in) const {
  return in.params.mask.kind == MaskKind::block_sparse;
}

// The rows to move, and under block_sparse the block means: the all-gather and the
// direct ring move the rows their plan names (exchange_; under block_sparse the selected
// ones), the double ring what its relay plan names (relay_: the rows the ranks ahead
// read; under block_sparse the selected ones, every rank's reads gathered).
void ContextParallelAttention::plan(const AttentionInput& in, const float* q, const float* k) {
  const bool relay = method_ == CpComm::double_ring;
  if (!selects(in)) {
    if (relay)
      relay_ = plan_relay(in.batch.group_pieces, inner_, rank_, in.params.mask);
    else
      exchange_.plan(in.batch.group_pieces, rank_, in.params.mask);
    return;
  }
  plan_selected_keys(comm_, rank_, in.params, in.batch, q, k, &exchange_, selected_);
  if (relay) {
    gather_selected_reads(comm_, rank_, exchange_, relay_reads_, selected_);
    relay_ = plan_relay(relay_reads_, inner_, rank_);
  }
  stats_.bytes_sent += selected_.bytes_sent;
  stats_.exposed_seconds += selected_.exposed_seconds;
}

// ---- all-gather -------------------------------------------------------------------

// Every rank sends every other rank the rows of its K and V that rank reads (exchange_,
// data/key_runs.h) in one MPI_Alltoallv, placed in sequence order into ks_ / vs_ next to
// the rank's own rows; tasks_ = every local piece against the keys it reads, from its
// document's first row if it reads sinks (the keys between are zeros the mask hides)
// or from the first key of its run.
void ContextParallelAttention::gather_read_kv(const AttentionInput& in, const float* k, const float* v) {
  const int64_t w = kv_width(in.params);
  const bool wire16 = in.params.precision == Precision::bf16;
  counts_.assign(size_t(size_), 0);
  displs_.assign(size_t(size_), 0);
  recv_counts_.assign(size_t(size_), 0);
  recv_displs_.assign(size_t(size_), 0);
  int64_t sent = 0, received = 0;
  for (int j = 0; j < size_; ++j) {
    const int64_t out_n = 2 * rows_of(exchange_.to[size_t(j)]) * w, in_n = 2 * rows_of(exchange_.from[size_t(j)]) * w;
    counts_[size_t(j)] = count_of(out_n);
    displs_[size_t(j)] = count_of(sent);
    recv_counts_[size_t(j)] = count_of(in_n);
    recv_displs_[size_t(j)] = count_of(received);
    sent += out_n;
    received += in_n;
  }
  // pack: for each rank, K of its runs then V of its runs
  if (wire16) {
    if (send16_.size() < size_t(sent)) send16_.resize(size_t(sent));
    if (gathered16_.size() < size_t(received)) gathered16_.resize(size_t(received));
  } else {
    if (send_.size() < size_t(sent)) send_.resize(size_t(sent));
    if (gathered_.size() < size_t(received)) gathered_.resize(size_t(received));
  }
  for (int j = 0; j < size_; ++j) {
    const std::vector<KeyRun>& runs = exchange_.to[size_t(j)];
    const int64_t half = rows_of(runs) * w;
    int64_t at = displs_[size_t(j)];
    for (const KeyRun& r : runs) {
      const int64_t n = int64_t(r.len) * w, src = int64_t(r.row) * w;
      if (wire16) {
        to_bf16_bits(k + src, n, send16_.data() + at);
        to_bf16_bits(v + src, n, send16_.data() + at + half);
      } else {
        std::copy_n(k + src, n, send_.data() + at);
        std::copy_n(v + src, n, send_.data() + at + half);
      }
      at += n;
    }
  }
  const auto t0 = SteadyClock::now();
  if (wire16)
    MPI_Alltoallv(send16_.data(), counts_.data(), displs_.data(), MPI_UINT16_T, gathered16_.data(),
                  recv_counts_.data(), recv_displs_.data(), MPI_UINT16_T, comm_);
  else
    MPI_Alltoallv(send_.data(), counts_.data(), displs_.data(), MPI_FLOAT, gathered_.data(), recv_counts_.data(),
                  recv_displs_.data(), MPI_FLOAT, comm_);
  stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  stats_.bytes_sent += sent * int64_t(wire16 ? sizeof(uint16_t) : sizeof(float));

  const size_t seq = size_t(in.batch.sequence_tokens * w);
  if (ks_.size() < seq) ks_.resize(seq), vs_.resize(seq);
  const AttentionMask& mask = in.params.mask;
  tasks_.clear();
  int32_t zeroed_doc = -1;
  for (const DocPiece& p : in.batch.pieces) {
    const MaskKeys keys = p.keys(mask);
    const int64_t first = first_key(keys);
    if (selects(in) && p.doc != zeroed_doc) {  // only the rows read arrive: the others are zeros
      zeroed_doc = p.doc;
      const int64_t a = int64_t(p.doc_start) * w, b = (int64_t(p.doc_start) + std::max(p.doc_len, p.end())) * w;
      std::fill(ks_.data() + a, ks_.data() + std::min<int64_t>(b, int64_t(seq)), 0.0f);
      std::fill(vs_.data() + a, vs_.data() + std::min<int64_t>(b, int64_t(seq)), 0.0f);
    }
    if (keys.sink_end < keys.lo && keys.sink_end > 0) {  // the keys between sinks and window: zeros
      std::fill(ks_.data() + (p.doc_start + keys.sink_end) * w, ks_.data() + (p.doc_start + keys.lo) * w, 0.0f);
      std::fill(vs_.data() + (p.doc_start + keys.sink_end) * w, vs_.data() + (p.doc_start + keys.lo) * w, 0.0f);
    }
    tasks_.push_back(p.task(p.doc_start + first, int32_t(first), int32_t(keys.hi - first)));
  }
  for (const DocPiece& p : in.batch.pieces) {  // own rows
    std::copy_n(k + int64_t(p.row) * w, int64_t(p.len) * w, ks_.data() + int64_t(p.seq_row()) * w);
    std::copy_n(v + int64_t(p.row) * w, int64_t(p.len) * w, vs_.data() + int64_t(p.seq_row()) * w);
  }
  for (int j = 0; j < size_; ++j) {
    const std::vector<KeyRun>& runs = exchange_.from[size_t(j)];
    const int64_t half = rows_of(runs) * w;
    int64_t at = recv_displs_[size_t(j)];
    for (const KeyRun& r : runs) {
      const int64_t n = int64_t(r.len) * w, dst = (int64_t(r.doc_start) + r.pos) * w;
      if (wire16) {
        from_bf16_bits(gathered16_.data() + at, n, ks_.data() + dst);
        from_bf16_bits(gathered16_.data() + at + half, n, vs_.data() + dst);
      } else {
        std::copy_n(gathered_.data() + at, n, ks_.data() + dst);
        std::copy_n(gathered_.data() + at + half, n, vs_.data() + dst);
      }
      at += n;
    }
  }
}

void ContextParallelAttention::allgather_forward(const AttentionInput& in, const float* q,
                                                 const float* k, const float* v, float* out,
                                                 float* lse) {
  gather_read_kv(in, k, v);
  if (selects(in))
    block_sparse_forward(in.params, tasks_, q, ks_.data(), vs_.data(), out, lse, selected_.means);
  else
    attention_forward(in.params, tasks_, q, ks_.data(), vs_.data(), out, lse);
}

// dK/dV of the rows each rank read go back to their holder in a second MPI_Alltoallv
// (fp32); the holder sums its own part and then every other rank's in rank order.
void ContextParallelAttention::allgather_backward(const AttentionInput& in, const float* q,
                                                  const float* k, const float* v,
                                                  const float* out, const float* lse,
                                                  const float* dout, float* dq, float* dk,
                                                  float* dv) {
  gather_read_kv(in, k, v);  // K and V are not kept between forward and backward
  const int64_t w = kv_width(in.params);
  const size_t seq = size_t(in.batch.sequence_tokens * w);
  dks_.assign(seq, 0.0f);
  dvs_.assign(seq, 0.0f);
  if (selects(in))
    block_sparse_backward(in.params, tasks_, q, ks_.data(), vs_.data(), out, lse, dout, dq, dks_.data(),
                          dvs_.data(), selected_.means);
  else
    attention_backward(in.params, tasks_, q, ks_.data(), vs_.data(), out, lse, dout, dq, dks_.data(),
                       dvs_.data());
  // the way back: what was received is sent, what was sent is received
  std::swap(counts_, recv_counts_);
  std::swap(displs_, recv_displs_);
  int64_t sent = 0, received = 0;
  for (int j = 0; j < size_; ++j) sent += counts_[size_t(j)], received += recv_counts_[size_t(j)];
  if (send_.size() < size_t(sent)) send_.resize(size_t(sent));
  if (gathered_.size() < size_t(received)) gathered_.resize(size_t(received));
  for (int j = 0; j < size_; ++j) {
    const std::vector<KeyRun>& runs = exchange_.from[size_t(j)];
    const int64_t half = rows_of(runs) * w;
    int64_t at = displs_[size_t(j)];
    for (const KeyRun& r : runs) {
      const int64_t n = int64_t(r.len) * w, src = (int64_t(r.doc_start) + r.pos) * w;
      std::copy_n(dks_.data() + src, n, send_.data() + at);
      std::copy_n(dvs_.data() + src, n, send_.data() + at + half);
      at += n;
    }
  }
  const auto t0 = SteadyClock::now();
  MPI_Alltoallv(send_.data(), counts_.data(), displs_.data(), MPI_FLOAT, gathered_.data(), recv_counts_.data(),
                recv_displs_.data(), MPI_FLOAT, comm_);
  stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  stats_.bytes_sent += sent * int64_t(sizeof(float));
  // this rank's own part, then every other rank's in rank order
  const int64_t mine = rows_of(in.batch.pieces) * w;
  if (reduced_.size() < size_t(2 * mine)) reduced_.resize(size_t(2 * mine));
  float* rk = reduced_.data();
  float* rv = rk + mine;
  for (const DocPiece& p : in.batch.pieces) {
    std::copy_n(dks_.data() + int64_t(p.seq_row()) * w, int64_t(p.len) * w, rk + int64_t(p.row) * w);
    std::copy_n(dvs_.data() + int64_t(p.seq_row()) * w, int64_t(p.len) * w, rv + int64_t(p.row) * w);
  }
  for (int j = 0; j < size_; ++j) {
    const std::vector<KeyRun>& runs = exchange_.to[size_t(j)];
    const int64_t half = rows_of(runs) * w;
    int64_t at = recv_displs_[size_t(j)];
    for (const KeyRun& r : runs) {
      const int64_t n = int64_t(r.len) * w, dst = int64_t(r.row) * w;
      const float* gk = gathered_.data() + at;
      const float* gv = gk + half;
      for (int64_t e = 0; e < n; ++e) rk[dst + e] += gk[e], rv[dst + e] += gv[e];
      at += n;
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < mine; ++i) {
    dk[i] += rk[i];
    dv[i] += rv[i];
  }
}

// ---- ring: every rank sends each other rank the rows that rank reads ---------------

// The local pieces as runs of this rank's own rows (what step 0 computes on, in place).
void ContextParallelAttention::own_runs(const AttentionInput& in) {
  own_runs_.clear();
  for (const DocPiece& p : in.batch.pieces) own_runs_.push_back({p.doc, p.doc_start, p.pos, p.len, p.row});
}

// Calls of tasks of the local pieces against the runs `runs` they read, run i held from
// row run_at_[i] (its own row in place, or its row in a received block), split so that
// no two tasks of one call share query rows.
void ContextParallelAttention::run_calls(const AttentionInput& in, const std::vector<KeyRun>& runs, bool in_place) {
  clear_calls();
  run_at_.resize(runs.size());
  int64_t at = 0;
  for (size_t i = 0; i < runs.size(); ++i) run_at_[i] = in_place ? runs[i].row : at, at += runs[i].len;
  for (size_t pi = 0; pi < in.batch.pieces.size(); ++pi) {
    const DocPiece& p = in.batch.pieces[pi];
    auto it = std::lower_bound(runs.begin(), runs.end(), p.doc, [](const KeyRun& x, int32_t doc) { return x.doc < doc; });
    size_t call = 0;
    for (; it != runs.end() && it->doc == p.doc; ++it) {
      if (!reads(p, *it, in.params.mask)) continue;
      add_task(in, call++, pi, p.task(run_at_[size_t(it - runs.begin())], it->pos, it->len));
    }
  }
}

void ContextParallelAttention::clear_calls() {
  for (auto& c : calls_) c.clear();
  for (auto& c : call_means_) c.clear();
}

// Task t of local piece `piece` into call `call` (with the piece's block means under
// block_sparse).
void ContextParallelAttention::add_task(const AttentionInput& in, size_t call, size_t piece, const AttentionTask& t) {
  if (calls_.size() <= call) calls_.resize(call + 1), call_means_.resize(call + 1);
  calls_[call].push_back(t);
  if (selects(in)) call_means_[call].push_back(selected_.means[piece]);
}

// Step s's transfers: this rank's rows rank + s reads go to it, and the rows of rank - s
// this rank reads arrive into direct_slot_[s & 1]; tags 4 s, 4 s + 1. Nothing is posted
// for an empty direction (both sides know the counts).
void ContextParallelAttention::post_direct(const AttentionInput& in, int s, const float* k, const float* v) {
  const int64_t w = kv_width(in.params);
  const int dst = (rank_ + s) % size_, src = (rank_ - s + size_) % size_;
  const std::vector<KeyRun>& out_runs = exchange_.to[size_t(dst)];
  const int64_t n_out = rows_of(out_runs) * w, n_in = rows_of(exchange_.from[size_t(src)]) * w;
  const MPI_Datatype type = bf16_wire_ ? MPI_UINT16_T : MPI_FLOAT;
  requests_.clear();
  Slot& slot = direct_slot_[s & 1];
  if (n_in > 0) {
    void *rk, *rv;
    if (bf16_wire_) {
      if (slot.wire_k.size() < size_t(n_in)) slot.wire_k.resize(size_t(n_in)), slot.wire_v.resize(size_t(n_in));
      rk = slot.wire_k.data(), rv = slot.wire_v.data();
    } else {
      if (slot.k.size() < size_t(n_in)) slot.k.resize(size_t(n_in)), slot.v.resize(size_t(n_in));
      rk = slot.k.data(), rv = slot.v.data();
    }
    requests_.resize(2);
    MPI_Irecv(rk, count_of(n_in), type, src, 4 * s, comm_, &requests_[0]);
    MPI_Irecv(rv, count_of(n_in), type, src, 4 * s + 1, comm_, &requests_[1]);
  }
  if (n_out > 0) {
    const size_t el = bf16_wire_ ? sizeof(uint16_t) : sizeof(float);
    if (pack_.size() < size_t(2 * n_out) * el) pack_.resize(size_t(2 * n_out) * el);
    int64_t at = 0;
    for (const KeyRun& r : out_runs) {
      const int64_t n = int64_t(r.len) * w, from = int64_t(r.row) * w;
      if (bf16_wire_) {
        uint16_t* d = reinterpret_cast<uint16_t*>(pack_.data());
        to_bf16_bits(k + from, n, d + at);
        to_bf16_bits(v + from, n, d + n_out + at);
      } else {
        float* d = reinterpret_cast<float*>(pack_.data());
        std::copy_n(k + from, n, d + at);
        std::copy_n(v + from, n, d + n_out + at);
      }
      at += n;
    }
    const size_t r0 = requests_.size();
    requests_.resize(r0 + 2);
    MPI_Isend(pack_.data(), count_of(n_out), type, dst, 4 * s, comm_, &requests_[r0]);
    MPI_Isend(pack_.data() + size_t(n_out) * el, count_of(n_out), type, dst, 4 * s + 1, comm_, &requests_[r0 + 1]);
    stats_.bytes_sent += 2 * n_out * int64_t(el);
  }
}

// The K and V rows of step s (s >= 1) as the kernel reads them (fp32), once arrived.
ContextParallelAttention::Block ContextParallelAttention::direct_block(const AttentionInput& in, int s) {
  const int src = (rank_ - s + size_) % size_;
  return arrived(direct_slot_[s & 1], rows_of(exchange_.from[size_t(src)]) * kv_width(in.params));
}

void ContextParallelAttention::direct_forward(const AttentionInput& in, const float* q, const float* k,
                                              const float* v, float* out, float* lse) {
  const AttentionParams& prm = in.params;
  const int64_t T = rows_of(in.batch.pieces);
  begin_merge(prm, T, out, lse);
  bf16_wire_ = prm.precision == Precision::bf16;
  own_runs(in);
  for (int s = 0; s < size_; ++s) {
    Block cur{k, v, k, v};
    if (s > 0) {
      finish(requests_);  // step s's rows (posted during step s - 1)
      cur = direct_block(in, s);
    }
    if (s + 1 < size_) post_direct(in, s + 1, k, v);  // step s + 1's travel meanwhile
    run_calls(in, s == 0 ? own_runs_ : exchange_.from[size_t((rank_ - s + size_) % size_)], s == 0);
    merge_calls(prm, q, cur, T, out, lse);
  }
  finish(requests_);
}

// Backward: the rows travel again as in forward; the dK/dV of the rows this rank read
// of rank - s go back to it (fp32, tags 4 s + 2, 4 s + 3) while the next step computes,
// and a rank sums the returns in step order after its own part.
void ContextParallelAttention::direct_backward(const AttentionInput& in, const float* q, const float* k,
                                               const float* v, const float* out, const float* lse,
                                               const float* dout, float* dq, float* dk, float* dv) {
  const AttentionParams& prm = in.params;
  const int64_t w = kv_width(prm);
  const int64_t mine = rows_of(in.batch.pieces) * w;
  bf16_wire_ = prm.precision == Precision::bf16;
  own_runs(in);
  acc_k_[0].assign(size_t(mine), 0.0f);  // this rank's dK/dV: own part, then the returns
  acc_v_[0].assign(size_t(mine), 0.0f);
  MPI_Request sent[2][2] = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL}, {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
  MPI_Request back[2][2] = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL}, {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
  const auto wait_exposed = [&](MPI_Request* r) {
    const auto t0 = SteadyClock::now();
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  };
  // adds step t's return (the dK/dV of this rank's rows rank + t read) once arrived
  const auto add_return = [&](int t) {
    wait_exposed(back[t & 1]);
    const std::vector<KeyRun>& runs = exchange_.to[size_t((rank_ + t) % size_)];
    const int64_t half = rows_of(runs) * w;
    const float* gk = ret_[t & 1].data();
    int64_t at = 0;
    for (const KeyRun& r : runs) {
      const int64_t n = int64_t(r.len) * w, d = int64_t(r.row) * w;
      for (int64_t e = 0; e < n; ++e) acc_k_[0][size_t(d + e)] += gk[at + e], acc_v_[0][size_t(d + e)] += gk[half + at + e];
      at += n;
    }
  };
  for (int s = 0; s < size_; ++s) {
    const int src = (rank_ - s + size_) % size_, dst = (rank_ + s) % size_;
    Block cur{k, v, k, v};
    if (s > 0) {
      finish(requests_);
      cur = direct_block(in, s);
    }
    if (s + 1 < size_) post_direct(in, s + 1, k, v);
    const int64_t n_back = s > 0 ? rows_of(exchange_.to[size_t(dst)]) * w : 0;
    if (n_back > 0) {  // what rank + s computed on this rank's rows comes back
      std::vector<float>& buf = ret_[s & 1];
      if (buf.size() < size_t(2 * n_back)) buf.resize(size_t(2 * n_back));
      MPI_Irecv(buf.data(), count_of(n_back), MPI_FLOAT, dst, 4 * s + 2, comm_, &back[s & 1][0]);
      MPI_Irecv(buf.data() + n_back, count_of(n_back), MPI_FLOAT, dst, 4 * s + 3, comm_, &back[s & 1][1]);
    }
    if (s == 0) {
      run_calls(in, own_runs_, true);
      backward_calls(prm, q, k, v, out, lse, dout, dq, acc_k_[0].data(), acc_v_[0].data());
    } else {
      const std::vector<KeyRun>& runs = exchange_.from[size_t(src)];
      const int64_t n = rows_of(runs) * w;
      if (n > 0) {
        wait_exposed(sent[s & 1]);  // step s - 2's return has left this buffer
        std::vector<float>& buf = out_[s & 1];
        buf.assign(size_t(2 * n), 0.0f);
        run_calls(in, runs, false);
        backward_calls(prm, q, cur.k, cur.v, out, lse, dout, dq, buf.data(), buf.data() + n);
        MPI_Isend(buf.data(), count_of(n), MPI_FLOAT, src, 4 * s + 2, comm_, &sent[s & 1][0]);
        MPI_Isend(buf.data() + n, count_of(n), MPI_FLOAT, src, 4 * s + 3, comm_, &sent[s & 1][1]);
        stats_.bytes_sent += 2 * n * int64_t(sizeof(float));
      }
    }
    if (s >= 2) add_return(s - 1);  // in step order, one step behind
  }
  if (size_ >= 2) add_return(size_ - 1);
  finish(requests_);
  for (auto& pair : sent) wait_exposed(pair);
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < mine; ++e) {
    dk[e] += acc_k_[0][size_t(e)];
    dv[e] += acc_v_[0][size_t(e)];
  }
}

// ---- double ring: blocks relayed rank to rank ------------------------------------

void ContextParallelAttention::relay_tasks(const AttentionInput& in, int j) {
  const std::vector<DocPiece>& theirs = in.batch.group_pieces[size_t(j)];
  clear_calls();
  for (size_t pi = 0; pi < in.batch.pieces.size(); ++pi) {
    const DocPiece& p = in.batch.pieces[pi];
    // j's pieces are in document order: find the ones of p's document
    auto it = std::lower_bound(theirs.begin(), theirs.end(), p.doc,
                               [](const DocPiece& x, int32_t doc) { return x.doc < doc; });
    size_t call = 0;
    const int32_t key_end = p.key_end(in.params.mask);
    for (; it != theirs.end() && it->doc == p.doc; ++it) {
      if (it->pos >= key_end) continue;  // p reads none of its keys
      add_task(in, call++, pi, p.task(it->row, it->pos, it->len));
    }
  }
}

// A forward's start: O = 0 and LSE = -inf for the T local rows (a row that sees no key
// keeps them), and room for one call's partial.
void ContextParallelAttention::begin_merge(const AttentionParams& prm, int64_t T, float* out, float* lse) {
  const int64_t H = prm.num_heads, hd = prm.head_dim;
  std::fill(out, out + T * H * hd, 0.0f);
  std::fill(lse, lse + T * H, -INFINITY);
  if (part_out_.size() < size_t(T * H * hd)) part_out_.resize(size_t(T * H * hd));
  if (part_lse_.size() < size_t(T * H)) part_lse_.resize(size_t(T * H));
}

// The calls of calls_ against the K and V in hand, each partial (O, LSE) merged into
// (out, lse) in call order; MPI progress driven between kernel calls.
void ContextParallelAttention::merge_calls(const AttentionParams& prm, const float* q, const Block& cur, int64_t T,
                                           float* out, float* lse) {
  const int64_t H = prm.num_heads, hd = prm.head_dim;
  for (size_t c = 0; c < calls_.size(); ++c) {
    const std::vector<AttentionTask>& call = calls_[c];
    if (call.empty()) continue;
    std::fill(part_lse_.begin(), part_lse_.begin() + T * H, -INFINITY);
    if (prm.mask.kind == MaskKind::block_sparse)
      block_sparse_forward(prm, call, q, cur.k, cur.v, part_out_.data(), part_lse_.data(), call_means_[c]);
    else
      attention_forward(prm, call, q, cur.k, cur.v, part_out_.data(), part_lse_.data());
    progress();
    merge_attention_partial(out, lse, part_out_.data(), part_lse_.data(), T, int(H), int(hd));
    progress();
  }
}

// The backward of the calls of calls_ against keys k, v, adding into dq and dk, dv.
void ContextParallelAttention::backward_calls(const AttentionParams& prm, const float* q, const float* k,
                                              const float* v, const float* out, const float* lse,
                                              const float* dout, float* dq, float* dk, float* dv) {
  for (size_t c = 0; c < calls_.size(); ++c) {
    const std::vector<AttentionTask>& call = calls_[c];
    if (call.empty()) continue;
    if (prm.mask.kind == MaskKind::block_sparse)
      block_sparse_backward(prm, call, q, k, v, out, lse, dout, dq, dk, dv, call_means_[c]);
    else
      attention_backward(prm, call, q, k, v, out, lse, dout, dq, dk, dv);
    progress();
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

namespace {
// The rows `spans` of a block of w values a row (es bytes each), back to back in out.
void pack_rows(const void* block, const RowSpans& spans, int64_t w, size_t es, std::vector<unsigned char>& out) {
  const auto* src = static_cast<const unsigned char*>(block);
  out.resize(size_t(rows_in(spans) * w) * es);
  size_t at = 0;
  for (const auto& [a, b] : spans) {
    const size_t n = size_t((b - a) * w) * es;
    std::memcpy(out.data() + at, src + size_t(a * w) * es, n);
    at += n;
  }
}
// The inverse, into a block of `rows` rows: zeros in the rows that did not come.
template <typename T>
void unpack_rows(const unsigned char* in, const RowSpans& spans, int64_t w, int64_t rows, std::vector<T>& block) {
  if (block.size() < size_t(rows * w)) block.resize(size_t(rows * w));
  int64_t row = 0;
  for (const auto& [a, b] : spans) {
    std::fill(block.begin() + row * w, block.begin() + a * w, T(0));
    std::memcpy(block.data() + a * w, in, size_t((b - a) * w) * sizeof(T));
    in += size_t((b - a) * w) * sizeof(T);
    row = b;
  }
  std::fill(block.begin() + row * w, block.begin() + rows * w, T(0));
}
}  // namespace

ContextParallelAttention::Block ContextParallelAttention::arrived_rows(Slot& slot, const RowSpans& rows,
                                                                      int64_t block_rows, int64_t w) {
  if (bf16_wire_) {
    unpack_rows(slot.packed_k.data(), rows, w, block_rows, slot.wire_k);
    unpack_rows(slot.packed_v.data(), rows, w, block_rows, slot.wire_v);
  } else {
    unpack_rows(slot.packed_k.data(), rows, w, block_rows, slot.k);
    unpack_rows(slot.packed_v.data(), rows, w, block_rows, slot.v);
  }
  return arrived(slot, block_rows * w);
}

void ContextParallelAttention::post_block(const Block& cur, const RowSpans& send, int64_t w, int dst, int src,
                                          const RowSpans& recv, Slot& slot, std::vector<unsigned char>& send_k,
                                          std::vector<unsigned char>& send_v, int tag,
                                          std::vector<MPI_Request>& requests) {
  const size_t es = bf16_wire_ ? sizeof(uint16_t) : sizeof(float);
  const MPI_Datatype type = bf16_wire_ ? MPI_UINT16_T : MPI_FLOAT;
  pack_rows(cur.k_wire, send, w, es, send_k);
  pack_rows(cur.v_wire, send, w, es, send_v);
  const int64_t n = rows_in(send) * w, n_next = rows_in(recv) * w;
  slot.packed_k.resize(size_t(n_next) * es);
  slot.packed_v.resize(size_t(n_next) * es);
  const size_t at = requests.size();
  requests.resize(at + 4);
  MPI_Irecv(slot.packed_k.data(), count_of(n_next), type, src, tag, comm_, &requests[at]);
  MPI_Irecv(slot.packed_v.data(), count_of(n_next), type, src, tag + 1, comm_, &requests[at + 1]);
  MPI_Isend(send_k.data(), count_of(n), type, dst, tag, comm_, &requests[at + 2]);
  MPI_Isend(send_v.data(), count_of(n), type, dst, tag + 1, comm_, &requests[at + 3]);
  stats_.bytes_sent += 2 * n * int64_t(es);
}

// Ring step s: the next block travels (inner pass, and at an outer step's first inner
// step the outer pass) while the block in hand is computed, each hop with the rows the
// ranks ahead read (relay_). Returns the slot the next block arrives in.
ContextParallelAttention::Slot& ContextParallelAttention::start_passes(const AttentionInput& in, int s,
                                                                       const Block& cur, int tag) {
  const int o = s / inner_;
  const int64_t w = kv_width(in.params);
  const RelayStep& st = relay_.steps[size_t(s)];
  requests_.clear();
  if (st.inner)
    post_block(cur, st.inner_rows, w, ring_rank(g_, u_ + 1), ring_rank(g_, u_ - 1), relay_.steps[size_t(s + 1)].arrive,
               inner_slot_[(s + 1) & 1], inner_send_k_, inner_send_v_, tag, requests_);
  if (st.outer) {
    outer_requests_.clear();
    post_block(cur, st.outer_rows, w, ring_rank(g_ + 1, u_), ring_rank(g_ - 1, u_),
               relay_.steps[size_t(s + inner_)].arrive, outer_slot_[(o + 1) & 1], outer_send_k_, outer_send_v_,
               kOuterTag + 2 * o, outer_requests_);
  }
  return st.inner ? inner_slot_[(s + 1) & 1] : outer_slot_[(o + 1) & 1];
}

void ContextParallelAttention::relay_forward(const AttentionInput& in, const float* q,
                                            const float* k, const float* v, float* out,
                                            float* lse) {
  const AttentionParams& prm = in.params;
  const int64_t w = kv_width(prm);
  const int64_t T = rows_of(in.batch.pieces);
  begin_merge(prm, T, out, lse);
  Block cur = own_block(in, k, v, T * w);
  for (int s = 0; s < size_; ++s) {
    const int j = block_at(s);
    Slot& next = start_passes(in, s, cur, 2 * s);  // the next block travels meanwhile
    relay_tasks(in, j);
    merge_calls(prm, q, cur, T, out, lse);
    finish(requests_);
    if ((s + 1) % inner_ == 0) finish(outer_requests_);
    if (s + 1 < size_)
      cur = arrived_rows(next, relay_.steps[size_t(s + 1)].arrive,
                         rows_of(in.batch.group_pieces[size_t(block_at(s + 1))]), w);
  }
}

void ContextParallelAttention::relay_backward(const AttentionInput& in, const float* q,
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
  // adds packed accumulator rows (the spans' rows, back to back) into a whole block
  const auto add_rows = [w](float* block, const float* packed, const RowSpans& spans) {
    for (const auto& [a, b] : spans) {
      float* dst = block + a * w;
      const int64_t n = (b - a) * w;
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t e = 0; e < n; ++e) dst[e] += packed[e];
      packed += n;
    }
  };
  Block cur = own_block(in, k, v, rows_of(in.batch.pieces) * w);
  for (int s = 0; s < size_; ++s) {
    const int j = block_at(s);
    const RelayStep& st = relay_.steps[size_t(s)];
    const int64_t n_j = rows_of(in.batch.group_pieces[size_t(j)]) * w;
    const int b = s & 1;
    Slot& next = start_passes(in, s, cur, 4 * s);  // the next block travels meanwhile
    if (s > 0) {  // block j's accumulator rows, from the ranks that computed on it before
      const int64_t n_in = rows_in(st.acc_arrive) * w;
      if (acc_in_k_.size() < size_t(n_in)) acc_in_k_.resize(size_t(n_in)), acc_in_v_.resize(size_t(n_in));
      requests_.resize(requests_.size() + 2);
      MPI_Request* r = &requests_[requests_.size() - 2];
      MPI_Irecv(acc_in_k_.data(), count_of(n_in), MPI_FLOAT, acc_source(s), 4 * s + 2, comm_, &r[0]);
      MPI_Irecv(acc_in_v_.data(), count_of(n_in), MPI_FLOAT, acc_source(s), 4 * s + 3, comm_, &r[1]);
    }
    // this rank's contribution to block j's dK/dV
    wait_exposed(2, acc_sent[b]);
    std::vector<float>& ak = acc_k_[b];
    std::vector<float>& av = acc_v_[b];
    ak.assign(size_t(n_j), 0.0f);
    av.assign(size_t(n_j), 0.0f);
    relay_tasks(in, j);
    if (s == 0)  // its own block: its part stays home, added into dk, dv directly
      backward_calls(prm, q, cur.k, cur.v, out, lse, dout, dq, dk, dv);
    else
      backward_calls(prm, q, cur.k, cur.v, out, lse, dout, dq, ak.data(), av.data());
    finish(requests_);
    if ((s + 1) % inner_ == 0) finish(outer_requests_);
    if (s > 0) {  // this rank's part + the upstream sum (a fixed order; rows that did not come are 0)
      add_rows(ak.data(), acc_in_k_.data(), st.acc_arrive);
      add_rows(av.data(), acc_in_v_.data(), st.acc_arrive);
    }
    // on to the next visitor (after the last step, block j's owner), with the rows read so far
    std::vector<unsigned char>& pk = acc_send_k_[b];
    std::vector<unsigned char>& pv = acc_send_v_[b];
    pack_rows(ak.data(), st.acc_send, w, sizeof(float), pk);
    pack_rows(av.data(), st.acc_send, w, sizeof(float), pv);
    const int64_t n_out = rows_in(st.acc_send) * w;
    MPI_Isend(pk.data(), count_of(n_out), MPI_FLOAT, acc_dest(s), 4 * (s + 1) + 2, comm_, &acc_sent[b][0]);
    MPI_Isend(pv.data(), count_of(n_out), MPI_FLOAT, acc_dest(s), 4 * (s + 1) + 3, comm_, &acc_sent[b][1]);
    stats_.bytes_sent += 2 * n_out * int64_t(sizeof(float));
    if (s + 1 < size_)
      cur = arrived_rows(next, relay_.steps[size_t(s + 1)].arrive,
                         rows_of(in.batch.group_pieces[size_t(block_at(s + 1))]), w);
  }
  // this rank's own block comes back with every rank's contribution to the rows read
  const int64_t n_home = rows_in(relay_.home) * w;
  if (acc_in_k_.size() < size_t(n_home)) acc_in_k_.resize(size_t(n_home)), acc_in_v_.resize(size_t(n_home));
  MPI_Request last[2];
  MPI_Irecv(acc_in_k_.data(), count_of(n_home), MPI_FLOAT, acc_source(size_), 4 * size_ + 2, comm_, &last[0]);
  MPI_Irecv(acc_in_v_.data(), count_of(n_home), MPI_FLOAT, acc_source(size_), 4 * size_ + 3, comm_, &last[1]);
  wait_exposed(2, last);
  for (auto& pair : acc_sent) wait_exposed(2, pair);
  add_rows(dk, acc_in_k_.data(), relay_.home);
  add_rows(dv, acc_in_v_.data(), relay_.home);
}

}  // namespace lct
