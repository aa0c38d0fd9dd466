#include "parallel/cad_attention.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <stdexcept>

namespace lct {
namespace {
using Clock = std::chrono::steady_clock;
int checked_int(int64_t n) {
  if (n > INT_MAX)
    throw std::runtime_error("CAD exchange of " + std::to_string(n) +
                             " floats with one rank exceeds MPI's int count");
  return int(n);
}
// Calls f(task) for the plan's tasks from `origin` to `server`, in plan order, with the
// offset of the task's first query row and of its document's prefix within the exchange
// (each document's prefix is sent once: the longest its tasks need).
template <typename F>
void for_exchange(const std::vector<CaTask>& tasks, int origin, int server, F f) {
  int64_t q_row = 0, kv_row = 0;
  int32_t doc = -1;
  int64_t doc_kv_row = 0, doc_kv_len = 0;
  for (const CaTask& t : tasks) {
    if (t.origin != origin || t.server != server) continue;
    if (t.doc != doc) {  // tasks of one document are adjacent (plan order)
      kv_row += doc_kv_len;
      doc = t.doc;
      doc_kv_row = kv_row;
      doc_kv_len = 0;
    }
    f(t, q_row, doc_kv_row);
    q_row += t.q_len;
    doc_kv_len = std::max<int64_t>(doc_kv_len, t.kv_len());
  }
}
}  // namespace

CadAttention::CadAttention(MPI_Comm comm, double tolerance) : comm_(comm), tolerance_(tolerance) {
  if (comm_ == MPI_COMM_NULL) throw std::invalid_argument("CAD needs a communicator");
  if (!(tolerance > 0)) throw std::invalid_argument("attention.cad_tolerance must be > 0");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  reset_stats();
}

void CadAttention::reset_stats() {
  stats_ = {};
  pairs_before_.assign(size_t(size_), 0);
  pairs_after_.assign(size_t(size_), 0);
}

void CadAttention::make_plan(const AttentionInput& in) {
  std::vector<int32_t> mine;
  for (const DocPiece& p : in.batch.pieces) {
    if (p.pos != 0 || p.len != p.doc_len)
      throw std::logic_error("CAD plans whole documents (context-parallel shards are not supported)");
    mine.push_back(p.row);
    mine.push_back(p.len);
  }
  int count = int(mine.size());
  std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_);
  int total = 0;
  for (int r = 0; r < size_; ++r) displs[size_t(r)] = total, total += counts[size_t(r)];
  std::vector<int32_t> all(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), count, MPI_INT, all.data(), counts.data(), displs.data(), MPI_INT, comm_);

  Plan p;
  for (int r = 0; r < size_; ++r) {
    p.first_doc.push_back(p.docs.size());
    for (int i = 0; i < counts[size_t(r)] / 2; ++i)
      p.docs.push_back({r, i, all[size_t(displs[size_t(r)] + 2 * i)],
                        all[size_t(displs[size_t(r)] + 2 * i + 1)]});
  }
  const AttentionParams& prm = in.params;
  const int64_t qd = int64_t(prm.num_heads) * prm.head_dim, kvd = int64_t(prm.num_kv_heads) * prm.head_dim;
  CaPlanOptions o;
  o.tolerance = tolerance_;
  o.q_bytes_per_row = (2 * qd + prm.num_heads) * int64_t(sizeof(float));  // Q there, O + LSE back
  o.kv_bytes_per_row = 2 * kvd * int64_t(sizeof(float));
  p.plan = plan_core_attention(p.docs, size_, o);
  for (int s = 0; s < size_; ++s) {
    pairs_before_[size_t(s)] += p.plan.pairs_before[size_t(s)];
    pairs_after_[size_t(s)] += p.plan.pairs_after[size_t(s)];
  }
  plans_[in.micro_batch] = std::move(p);
}

CadAttention::Rows CadAttention::rows_between(const Plan& p, int origin, int server) const {
  Rows r;
  int64_t last_kv_end = 0;
  for_exchange(p.plan.tasks, origin, server, [&](const CaTask& t, int64_t, int64_t kv_row) {
    r.q += t.q_len;
    last_kv_end = std::max(last_kv_end, kv_row + t.kv_len());
  });
  r.kv = last_kv_end;
  return r;
}

void CadAttention::alltoallv(const std::vector<float>& send, const std::vector<int>& send_counts,
                             std::vector<float>& recv, const std::vector<int>& recv_counts) {
  sdispl_.assign(size_t(size_), 0);
  rdispl_.assign(size_t(size_), 0);
  int64_t s = 0, r = 0;
  for (int i = 0; i < size_; ++i) {
    sdispl_[size_t(i)] = checked_int(s);
    rdispl_[size_t(i)] = checked_int(r);
    s += send_counts[size_t(i)];
    r += recv_counts[size_t(i)];
  }
  if (recv.size() < size_t(r)) recv.resize(size_t(r));
  const auto t0 = Clock::now();
  MPI_Alltoallv(send.data(), send_counts.data(), sdispl_.data(), MPI_FLOAT, recv.data(),
                recv_counts.data(), rdispl_.data(), MPI_FLOAT, comm_);
  stats_.exposed_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.bytes_sent += s * int64_t(sizeof(float));  // nothing is sent to oneself
}

void CadAttention::forward(const AttentionInput& in, const float* q, const float* k,
                           const float* v, float* out, float* lse) {
  if (in.first_layer) make_plan(in);  // every rank is at the same first layer
  const auto it = plans_.find(in.micro_batch);
  if (it == plans_.end()) throw std::logic_error("CAD: no plan for this micro-batch");
  const Plan& p = it->second;
  const AttentionParams& prm = in.params;
  const int64_t H = prm.num_heads, qd = H * prm.head_dim, kvd = int64_t(prm.num_kv_heads) * prm.head_dim;
  stats_.pairs_served += double(p.plan.pairs_after[size_t(rank_)]);

  // origin -> server: Q rows, then K and V of each document's prefix
  send_.clear();
  send_counts_.assign(size_t(size_), 0);
  recv_counts_.assign(size_t(size_), 0);
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Rows out_rows = rows_between(p, rank_, s), in_rows = rows_between(p, s, rank_);
    send_counts_[size_t(s)] = checked_int(out_rows.q * qd + 2 * out_rows.kv * kvd);
    recv_counts_[size_t(s)] = checked_int(in_rows.q * qd + 2 * in_rows.kv * kvd);
    const size_t base = send_.size();
    send_.resize(base + size_t(send_counts_[size_t(s)]));
    float* qs = send_.data() + base;
    float* ks = qs + out_rows.q * qd;
    float* vs = ks + out_rows.kv * kvd;
    for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      const CaDocument& d = doc_of(p, t);
      const int64_t src = d.row + t.q_begin;
      std::copy(q + src * qd, q + (src + t.q_len) * qd, qs + q_row * qd);
      std::copy(k + int64_t(d.row) * kvd, k + (d.row + t.kv_len()) * kvd, ks + kv_row * kvd);
      std::copy(v + int64_t(d.row) * kvd, v + (d.row + t.kv_len()) * kvd, vs + kv_row * kvd);
    });
  }
  alltoallv(send_, send_counts_, recv_, recv_counts_);

  // The exchange comes first, so every rank starts its share of the plan at the same
  // time: its own tasks in place, then the other origins' tasks, whose O and LSE go
  // straight into the reply buffer.
  tasks_.clear();
  for_exchange(p.plan.tasks, rank_, rank_, [&](const CaTask& t, int64_t, int64_t) {
    const CaDocument& d = doc_of(p, t);
    tasks_.push_back({d.row + t.q_begin, d.row, t.q_len, t.kv_len(), t.q_begin, 0, d.len});
  });
  if (!tasks_.empty()) attention_forward(prm, tasks_, q, k, v, out, lse);
  std::vector<int> back_counts(size_t(size_), 0), back_recv_counts(size_t(size_), 0);
  int64_t back_total = 0;
  for (int o = 0; o < size_; ++o)
    if (o != rank_) {
      back_counts[size_t(o)] = checked_int(rows_between(p, o, rank_).q * (qd + H));
      back_recv_counts[size_t(o)] = checked_int(rows_between(p, rank_, o).q * (qd + H));
      back_total += back_counts[size_t(o)];
    }
  if (back_.size() < size_t(back_total)) back_.resize(size_t(back_total));
  int64_t in_at = 0, back_at = 0;
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    const Rows r = rows_between(p, o, rank_);
    const float* qs = recv_.data() + in_at;
    const float* ks = qs + r.q * qd;
    const float* vs = ks + r.kv * kvd;
    float* os = back_.data() + back_at;
    float* ls = os + r.q * qd;
    tasks_.clear();
    for_exchange(p.plan.tasks, o, rank_, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      tasks_.push_back({q_row, kv_row, t.q_len, t.kv_len(), t.q_begin, 0, doc_of(p, t).len});
    });
    if (!tasks_.empty()) attention_forward(prm, tasks_, qs, ks, vs, os, ls);
    in_at += recv_counts_[size_t(o)];
    back_at += back_counts[size_t(o)];
  }
  alltoallv(back_, back_counts, back_recv_, back_recv_counts);

  // results of this rank's tasks served elsewhere
  int64_t at = 0;
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Rows r = rows_between(p, rank_, s);
    const float* os = back_recv_.data() + at;
    const float* ls = os + r.q * qd;
    for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t) {
      const int64_t dst = doc_of(p, t).row + t.q_begin;
      std::copy(os + q_row * qd, os + (q_row + t.q_len) * qd, out + dst * qd);
      std::copy(ls + q_row * H, ls + (q_row + t.q_len) * H, lse + dst * H);
    });
    at += back_recv_counts[size_t(s)];
  }
}

void CadAttention::backward(const AttentionInput& in, const float* q, const float* k,
                            const float* v, const float* out, const float* lse,
                            const float* dout, float* dq, float* dk, float* dv) {
  const auto it = plans_.find(in.micro_batch);
  if (it == plans_.end()) throw std::logic_error("CAD: no plan for this micro-batch");
  const Plan& p = it->second;
  const AttentionParams& prm = in.params;
  const int64_t H = prm.num_heads, qd = H * prm.head_dim, kvd = int64_t(prm.num_kv_heads) * prm.head_dim;

  // origin -> server: Q, O, dO, LSE rows, then K and V prefixes (servers keep nothing)
  const int64_t q_width = 3 * qd + H;
  send_.clear();
  send_counts_.assign(size_t(size_), 0);
  recv_counts_.assign(size_t(size_), 0);
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Rows out_rows = rows_between(p, rank_, s), in_rows = rows_between(p, s, rank_);
    send_counts_[size_t(s)] = checked_int(out_rows.q * q_width + 2 * out_rows.kv * kvd);
    recv_counts_[size_t(s)] = checked_int(in_rows.q * q_width + 2 * in_rows.kv * kvd);
    const size_t base = send_.size();
    send_.resize(base + size_t(send_counts_[size_t(s)]));
    float* qs = send_.data() + base;
    float* os = qs + out_rows.q * qd;
    float* dos = os + out_rows.q * qd;
    float* ls = dos + out_rows.q * qd;
    float* ks = ls + out_rows.q * H;
    float* vs = ks + out_rows.kv * kvd;
    for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      const CaDocument& d = doc_of(p, t);
      const int64_t src = d.row + t.q_begin, n = t.q_len;
      std::copy(q + src * qd, q + (src + n) * qd, qs + q_row * qd);
      std::copy(out + src * qd, out + (src + n) * qd, os + q_row * qd);
      std::copy(dout + src * qd, dout + (src + n) * qd, dos + q_row * qd);
      std::copy(lse + src * H, lse + (src + n) * H, ls + q_row * H);
      std::copy(k + int64_t(d.row) * kvd, k + (d.row + t.kv_len()) * kvd, ks + kv_row * kvd);
      std::copy(v + int64_t(d.row) * kvd, v + (d.row + t.kv_len()) * kvd, vs + kv_row * kvd);
    });
  }
  alltoallv(send_, send_counts_, recv_, recv_counts_);

  // exchange first (as in forward), then this rank's own tasks, then the others' whose
  // dQ, dK, dV go into the reply buffer
  tasks_.clear();
  for_exchange(p.plan.tasks, rank_, rank_, [&](const CaTask& t, int64_t, int64_t) {
    const CaDocument& d = doc_of(p, t);
    tasks_.push_back({d.row + t.q_begin, d.row, t.q_len, t.kv_len(), t.q_begin, 0, d.len});
  });
  if (!tasks_.empty()) attention_backward(prm, tasks_, q, k, v, out, lse, dout, dq, dk, dv);
  std::vector<int> back_counts(size_t(size_), 0), back_recv_counts(size_t(size_), 0);
  int64_t back_total = 0;
  for (int o = 0; o < size_; ++o)
    if (o != rank_) {
      const Rows r_in = rows_between(p, o, rank_), r_out = rows_between(p, rank_, o);
      back_counts[size_t(o)] = checked_int(r_in.q * qd + 2 * r_in.kv * kvd);
      back_recv_counts[size_t(o)] = checked_int(r_out.q * qd + 2 * r_out.kv * kvd);
      back_total += back_counts[size_t(o)];
    }
  back_.assign(size_t(back_total), 0.0f);  // the kernel accumulates
  int64_t in_at = 0, back_at = 0;
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    const Rows r = rows_between(p, o, rank_);
    const float* qs = recv_.data() + in_at;
    const float* os = qs + r.q * qd;
    const float* dos = os + r.q * qd;
    const float* ls = dos + r.q * qd;
    const float* ks = ls + r.q * H;
    const float* vs = ks + r.kv * kvd;
    float* dqs = back_.data() + back_at;
    float* dks = dqs + r.q * qd;
    float* dvs = dks + r.kv * kvd;
    tasks_.clear();
    for_exchange(p.plan.tasks, o, rank_, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      tasks_.push_back({q_row, kv_row, t.q_len, t.kv_len(), t.q_begin, 0, doc_of(p, t).len});
    });
    if (!tasks_.empty()) attention_backward(prm, tasks_, qs, ks, vs, os, ls, dos, dqs, dks, dvs);
    in_at += recv_counts_[size_t(o)];
    back_at += back_counts[size_t(o)];
  }
  alltoallv(back_, back_counts, back_recv_, back_recv_counts);

  // add the servers' shares after this rank's own, in server rank order
  int64_t at = 0;
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Rows r = rows_between(p, rank_, s);
    const float* dqs = back_recv_.data() + at;
    const float* dks = dqs + r.q * qd;
    const float* dvs = dks + r.kv * kvd;
    // each document's prefix came once: the longest its tasks on s need
    std::map<int32_t, std::pair<int64_t, int64_t>> prefix;  // doc -> (kv_row, rows)
    for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      const int64_t dst = doc_of(p, t).row + t.q_begin;
      for (int64_t i = 0; i < t.q_len * qd; ++i) dq[dst * qd + i] += dqs[q_row * qd + i];
      auto& e = prefix[t.doc];
      e.first = kv_row;
      e.second = std::max<int64_t>(e.second, t.kv_len());
    });
    for (const auto& [doc, e] : prefix) {
      const int64_t row = p.docs[p.first_doc[size_t(rank_)] + size_t(doc)].row;
      for (int64_t i = 0; i < e.second * kvd; ++i) {
        dk[row * kvd + i] += dks[e.first * kvd + i];
        dv[row * kvd + i] += dvs[e.first * kvd + i];
      }
    }
    at += back_recv_counts[size_t(s)];
  }
}

}  // namespace lct
