#include "parallel/cad_attention.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <span>
#include <stdexcept>

#include "parallel/mpi_util.h"

namespace lct {
namespace {
int count_of(int64_t n) { return mpi_count(n, "a CAD exchange with one rank"); }
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

CadAttention::CadAttention(MPI_Comm comm, double tolerance, std::optional<CaCostModel> cost)
    : comm_(comm), tolerance_(tolerance), cost_(std::move(cost)) {
  if (comm_ == MPI_COMM_NULL) throw std::invalid_argument("CAD needs a communicator");
  if (!(tolerance > 0)) throw std::invalid_argument("attention.cad_tolerance must be > 0");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  reset_stats();
}

CadAttention::Lane& CadAttention::lane_at(int lane) {
  if (lane != 0 && lane != 1) throw std::logic_error("CAD: lane must be 0 or 1");
  return lanes_[lane];
}

void CadAttention::reset_stats() {
  stats_ = {};
  pairs_before_.assign(size_t(size_), 0);
  pairs_after_.assign(size_t(size_), 0);
}

void CadAttention::make_plan(const AttentionInput& in, bool counted) {
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
  o.cost = cost_ ? &*cost_ : nullptr;
  p.plan = plan_core_attention(p.docs, size_, o);
  for (int s = 0; counted && s < size_; ++s) {
    pairs_before_[size_t(s)] += p.plan.pairs_before[size_t(s)];
    pairs_after_[size_t(s)] += p.plan.pairs_after[size_t(s)];
  }
  plans_[in.group] = std::move(p);
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


int64_t CadAttention::message_floats(const Plan& p, int origin, int server, const Widths& w) const {
  const Rows r = rows_between(p, origin, server);
  int64_t n = 0;
  for (int64_t x : w.q) n += r.q * x;
  for (int64_t x : w.kv) n += r.kv * x;
  return n;
}

const CadAttention::Plan& CadAttention::plan_of(const AttentionInput& in) const {
  const auto it = plans_.find(in.group);
  if (it == plans_.end()) throw std::logic_error("CAD: no plan for this group");
  return it->second;
}

// ---- one exchange ---------------------------------------------------------------------

void CadAttention::start_alltoallv(Lane& L, const std::vector<float>& send,
                                   const std::vector<int>& send_counts, std::vector<float>& recv,
                                   const std::vector<int>& recv_counts) {
  if (L.request != MPI_REQUEST_NULL) throw std::logic_error("CAD: lane already has an exchange in flight");
  L.sdispl.assign(size_t(size_), 0);
  L.rdispl.assign(size_t(size_), 0);
  int64_t s = 0, r = 0;
  for (int i = 0; i < size_; ++i) {
    L.sdispl[size_t(i)] = count_of(s);
    L.rdispl[size_t(i)] = count_of(r);
    s += send_counts[size_t(i)];
    r += recv_counts[size_t(i)];
  }
  if (recv.size() < size_t(r)) recv.resize(size_t(r));
  MPI_Ialltoallv(send.data(), send_counts.data(), L.sdispl.data(), MPI_FLOAT, recv.data(),
                 recv_counts.data(), L.rdispl.data(), MPI_FLOAT, comm_, &L.request);
  stats_.bytes_sent += s * int64_t(sizeof(float));  // nothing is sent to oneself
}

// Drives every exchange in flight (OpenMPI progresses them only inside MPI calls).
void CadAttention::progress() {
  for (Lane& L : lanes_)
    if (L.request != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Test(&L.request, &done, MPI_STATUS_IGNORE);
    }
}

void CadAttention::wait(Lane& L) {
  const auto t0 = SteadyClock::now();
  MPI_Wait(&L.request, MPI_STATUS_IGNORE);
  stats_.exposed_seconds += seconds_since(t0);
}

// ---- the lane's phases ------------------------------------------------------------------
// Between an origin and a server, a message is, for the plan's tasks from that origin
// to that server in plan order: every per-query-row array ([task rows, width] each,
// back to back), then every per-key-row array over each document's prefix (once per
// document). Both sides derive the same layout from the plan.

void CadAttention::start_lane(Lane& L, const std::vector<RowArray>& q_arrays,
                              const std::vector<RowArray>& kv_arrays) {
  const Plan& p = *L.plan;
  L.own.clear();
  for_exchange(p.plan.tasks, rank_, rank_, [&](const CaTask& t, int64_t, int64_t) {
    const CaDocument& d = doc_of(p, t);
    L.own.push_back({d.row + t.q_begin, d.row, t.q_len, t.kv_len(), t.q_begin, 0, d.len});
  });
  L.in = {};
  for (const RowArray& a : q_arrays) L.in.q.push_back(a.width);
  for (const RowArray& a : kv_arrays) L.in.kv.push_back(a.width);
  L.send.clear();
  L.send_counts.assign(size_t(size_), 0);
  L.recv_counts.assign(size_t(size_), 0);
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    L.send_counts[size_t(s)] = count_of(message_floats(p, rank_, s, L.in));
    L.recv_counts[size_t(s)] = count_of(message_floats(p, s, rank_, L.in));
    const Rows r = rows_between(p, rank_, s);
    const size_t base = L.send.size();
    L.send.resize(base + size_t(L.send_counts[size_t(s)]));
    float* at = L.send.data() + base;
    std::vector<float*> q_dst, kv_dst;
    for (const RowArray& a : q_arrays) q_dst.push_back(at), at += r.q * a.width;
    for (const RowArray& a : kv_arrays) kv_dst.push_back(at), at += r.kv * a.width;
    for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      const CaDocument& d = doc_of(p, t);
      const int64_t src = d.row + t.q_begin;
      for (size_t x = 0; x < q_arrays.size(); ++x) {
        const int64_t wd = q_arrays[x].width;
        std::copy(q_arrays[x].data + src * wd, q_arrays[x].data + (src + t.q_len) * wd,
                  q_dst[x] + q_row * wd);
      }
      for (size_t x = 0; x < kv_arrays.size(); ++x) {  // (a longer prefix overwrites a shorter)
        const int64_t wd = kv_arrays[x].width;
        std::copy(kv_arrays[x].data + int64_t(d.row) * wd,
                  kv_arrays[x].data + (d.row + t.kv_len()) * wd, kv_dst[x] + kv_row * wd);
      }
    });
  }
  start_alltoallv(L, L.send, L.send_counts, L.recv, L.recv_counts);
}

void CadAttention::compute_own(Lane& L, std::span<const AttentionTask> t) {
  if (L.backward)
    attention_backward(*L.params, t, L.q, L.k, L.v, L.out_in, L.lse_in, L.dout, L.dq, L.dk, L.dv);
  else
    attention_forward(*L.params, t, L.q, L.k, L.v, L.out, L.lse);
}

// in:  forward Q | K, V;  backward Q, O, dO, LSE | K, V
// out: forward O, LSE;    backward dQ | dK, dV
void CadAttention::compute_served(Lane& L, std::span<const AttentionTask> t,
                                  const std::vector<const float*>& x, const std::vector<float*>& y) {
  if (L.backward)
    attention_backward(*L.params, t, x[0], x[4], x[5], x[1], x[3], x[2], y[0], y[1], y[2]);
  else
    attention_forward(*L.params, t, x[0], x[1], x[2], y[0], y[1]);
}

// This rank's own tasks in `parts` kernel calls (split by attention pairs), driving the
// exchanges in flight between them: part `part` of `parts`.
void CadAttention::run_own(Lane& L, int part, int parts) {
  int64_t total = 0;
  for (const AttentionTask& t : L.own) total += task_pairs(t);
  int64_t seen = 0;
  size_t begin = L.own.size(), end = L.own.size();
  for (size_t i = 0; i < L.own.size(); ++i) {
    const int64_t before = seen;
    seen += task_pairs(L.own[i]);
    // task i belongs to the part its first pair falls in
    const int at = total > 0 ? int((before * parts) / total) : 0;
    if (at == part && begin == L.own.size()) begin = i;
    if (at > part && end == L.own.size()) end = i;
  }
  if (begin >= end) return;
  const std::span<const AttentionTask> all(L.own);
  constexpr size_t kPieces = 4;  // kernel calls per part, the exchanges tested in between
  const size_t n = end - begin;
  for (size_t c = 0; c < kPieces; ++c) {
    const size_t a = begin + c * n / kPieces, b = begin + (c + 1) * n / kPieces;
    if (a < b) compute_own(L, all.subspan(a, b - a));
    progress();
  }
}

void CadAttention::serve_lane(Lane& L, bool with_own) {
  if (!L.plan) throw std::logic_error("CAD: serve before start");
  wait(L);  // the requests
  const Plan& p = *L.plan;
  L.reply_counts.assign(size_t(size_), 0);
  L.reply_recv_counts.assign(size_t(size_), 0);
  int64_t total = 0;
  for (int o = 0; o < size_; ++o)
    if (o != rank_) {
      L.reply_counts[size_t(o)] = count_of(message_floats(p, o, rank_, L.reply));
      L.reply_recv_counts[size_t(o)] = count_of(message_floats(p, rank_, o, L.reply));
      total += L.reply_counts[size_t(o)];
    }
  L.back.assign(size_t(total), 0.0f);  // kernels write (forward) or accumulate (backward)
  int64_t in_at = 0, back_at = 0;
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    const Rows r = rows_between(p, o, rank_);
    std::vector<const float*> src;
    std::vector<float*> dst;
    const float* a = L.recv.data() + in_at;
    for (int64_t w : L.in.q) src.push_back(a), a += r.q * w;
    for (int64_t w : L.in.kv) src.push_back(a), a += r.kv * w;
    float* b = L.back.data() + back_at;
    for (int64_t w : L.reply.q) dst.push_back(b), b += r.q * w;
    for (int64_t w : L.reply.kv) dst.push_back(b), b += r.kv * w;
    L.served.clear();
    for_exchange(p.plan.tasks, o, rank_, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
      L.served.push_back({q_row, kv_row, t.q_len, t.kv_len(), t.q_begin, 0, doc_of(p, t).len});
    });
    if (!L.served.empty()) compute_served(L, L.served, src, dst);
    progress();
    in_at += L.recv_counts[size_t(o)];
    back_at += L.reply_counts[size_t(o)];
  }
  start_alltoallv(L, L.back, L.reply_counts, L.back_recv, L.reply_recv_counts);
  if (with_own) run_own(L, 0, 1);  // while the replies travel
}

template <typename F>
void CadAttention::for_replies(const Lane& L, F f) const {
  int64_t at = 0;
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Rows r = rows_between(*L.plan, rank_, s);
    std::vector<const float*> y;
    const float* a = L.back_recv.data() + at;
    for (int64_t w : L.reply.q) y.push_back(a), a += r.q * w;
    for (int64_t w : L.reply.kv) y.push_back(a), a += r.kv * w;
    f(s, y);
    at += L.reply_recv_counts[size_t(s)];
  }
}

void CadAttention::finish_lane(Lane& L) {
  if (!L.plan) throw std::logic_error("CAD: finish before start");
  wait(L);  // the replies
  const Plan& p = *L.plan;
  const int64_t H = L.params->num_heads, qd = H * L.params->head_dim,
                kvd = int64_t(L.params->num_kv_heads) * L.params->head_dim;
  if (!L.backward) {
    // results of this rank's tasks served elsewhere
    for_replies(L, [&](int s, const std::vector<const float*>& y) {
      for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t) {
        const int64_t dst = doc_of(p, t).row + t.q_begin;
        std::copy(y[0] + q_row * qd, y[0] + (q_row + t.q_len) * qd, L.out + dst * qd);
        std::copy(y[1] + q_row * H, y[1] + (q_row + t.q_len) * H, L.lse + dst * H);
      });
    });
  } else {
    // add the servers' shares after this rank's own, in server rank order
    for_replies(L, [&](int s, const std::vector<const float*>& y) {
      const float *dqs = y[0], *dks = y[1], *dvs = y[2];
      // each document's prefix came once: the longest its tasks on s need
      std::map<int32_t, std::pair<int64_t, int64_t>> prefix;  // doc -> (kv_row, rows)
      for_exchange(p.plan.tasks, rank_, s, [&](const CaTask& t, int64_t q_row, int64_t kv_row) {
        const int64_t dst = doc_of(p, t).row + t.q_begin;
        for (int64_t i = 0; i < t.q_len * qd; ++i) L.dq[dst * qd + i] += dqs[q_row * qd + i];
        auto& e = prefix[t.doc];
        e.first = kv_row;
        e.second = std::max<int64_t>(e.second, t.kv_len());
      });
      for (const auto& [doc, e] : prefix) {
        const int64_t row = p.docs[p.first_doc[size_t(rank_)] + size_t(doc)].row;
        for (int64_t i = 0; i < e.second * kvd; ++i) {
          L.dk[row * kvd + i] += dks[e.first * kvd + i];
          L.dv[row * kvd + i] += dvs[e.first * kvd + i];
        }
      }
    });
  }
  L.plan = nullptr;
}

// ---- forward and backward -----------------------------------------------------------

// Q rows and K/V prefixes go to the servers, O and LSE come back from them.
void CadAttention::start_forward(const AttentionInput& in, const float* q, const float* k,
                                 const float* v, float* out, float* lse) {
  if (in.starts_group) make_plan(in, true);  // every rank is at its stage's first layer
  Lane& L = lane_at(in.lane);
  if (L.plan) throw std::logic_error("CAD: lane started twice");
  L.plan = &plan_of(in);
  L.params = &in.params;
  L.backward = false;
  L.q = q, L.k = k, L.v = v, L.out = out, L.lse = lse;
  const int64_t H = in.params.num_heads, qd = H * in.params.head_dim,
                kvd = int64_t(in.params.num_kv_heads) * in.params.head_dim;
  stats_.pairs_served += double(L.plan->plan.pairs_after[size_t(rank_)]);
  L.reply = {{qd, H}, {}};
  start_lane(L, {{q, qd}}, {{k, kvd}, {v, kvd}});
}

// Servers keep nothing between forward and backward: Q, O, dO, LSE and the K/V
// prefixes go out again, dQ and the prefixes' dK, dV come back.
void CadAttention::start_backward(const AttentionInput& in, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse,
                                  const float* dout, float* dq, float* dk, float* dv) {
  // a backward pipeline tick (its own set of micro-batches): every stage at its last layer
  if (in.starts_group) make_plan(in, false);
  Lane& L = lane_at(in.lane);
  if (L.plan) throw std::logic_error("CAD: lane started twice");
  L.plan = &plan_of(in);
  L.params = &in.params;
  L.backward = true;
  L.q = q, L.k = k, L.v = v, L.out_in = out, L.lse_in = lse, L.dout = dout;
  L.dq = dq, L.dk = dk, L.dv = dv;
  const int64_t H = in.params.num_heads, qd = H * in.params.head_dim,
                kvd = int64_t(in.params.num_kv_heads) * in.params.head_dim;
  L.reply = {{qd}, {kvd, kvd}};
  start_lane(L, {{q, qd}, {out, qd}, {dout, qd}, {lse, H}}, {{k, kvd}, {v, kvd}});
}

// Without ping-pong: the first half of this rank's own tasks runs while the requests
// travel, the second half while the replies travel.
void CadAttention::forward(const AttentionInput& in, const float* q, const float* k,
                           const float* v, float* out, float* lse) {
  start_forward(in, q, k, v, out, lse);
  Lane& L = lane_at(in.lane);
  run_own(L, 0, 2);
  serve_lane(L, false);
  run_own(L, 1, 2);
  finish_lane(L);
}

void CadAttention::backward(const AttentionInput& in, const float* q, const float* k,
                            const float* v, const float* out, const float* lse,
                            const float* dout, float* dq, float* dk, float* dv) {
  start_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
  Lane& L = lane_at(in.lane);
  run_own(L, 0, 2);
  serve_lane(L, false);
  run_own(L, 1, 2);
  finish_lane(L);
}

void CadAttention::forward_start(const AttentionInput& in, const float* q, const float* k,
                                 const float* v, float* out, float* lse) {
  start_forward(in, q, k, v, out, lse);
}

void CadAttention::backward_start(const AttentionInput& in, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse,
                                  const float* dout, float* dq, float* dk, float* dv) {
  start_backward(in, q, k, v, out, lse, dout, dq, dk, dv);
}

}  // namespace lct
