#include "parallel/cad_attention.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <span>
#include <stdexcept>

#include "attention/block_sparse.h"
#include "data/key_runs.h"
#include "parallel/collectives.h"
#include "parallel/mpi_util.h"

namespace lct {
namespace {
int count_of(int64_t n) { return mpi_count(n, "a CAD exchange with one rank"); }

// One blocking exchange of int32 records (out[r] to rank r; nothing to oneself): what
// each rank sent this one. Adds the bytes sent and the time blocked.
std::vector<std::vector<int32_t>> exchange_ints(MPI_Comm comm, const std::vector<std::vector<int32_t>>& out,
                                                int64_t& bytes_sent, double& exposed_seconds) {
  const size_t n = out.size();
  std::vector<int> sn(n), rn(n), sd(n), rd(n);
  for (size_t r = 0; r < n; ++r) sn[r] = count_of(int64_t(out[r].size()));
  const auto t0 = SteadyClock::now();
  MPI_Alltoall(sn.data(), 1, MPI_INT, rn.data(), 1, MPI_INT, comm);
  std::vector<int32_t> send;
  int64_t total = 0;
  for (size_t r = 0; r < n; ++r) {
    sd[r] = count_of(int64_t(send.size()));
    send.insert(send.end(), out[r].begin(), out[r].end());
    rd[r] = count_of(total);
    total += rn[r];
  }
  std::vector<int32_t> recv(static_cast<size_t>(total));
  MPI_Alltoallv(send.data(), sn.data(), sd.data(), MPI_INT, recv.data(), rn.data(), rd.data(), MPI_INT, comm);
  exposed_seconds += waited_since(t0, "CAD block_sparse selection exchange");
  bytes_sent += int64_t(sizeof(int32_t)) * (int64_t(send.size()) + int64_t(n) - 1);
  std::vector<std::vector<int32_t>> in(n);
  for (size_t r = 0; r < n; ++r) in[r].assign(recv.begin() + rd[r], recv.begin() + rd[r] + rn[r]);
  return in;
}
}  // namespace

CadAttention::CadAttention(MPI_Comm comm, double tolerance, std::optional<CadCostModel> cost,
                           bool rank_speeds, bool align_every_cut, MPI_Comm cp_comm)
    : comm_(comm), cp_comm_(cp_comm == MPI_COMM_NULL ? MPI_COMM_SELF : cp_comm), tolerance_(tolerance),
      cost_(std::move(cost)), rank_speeds_(rank_speeds && cost_), align_every_cut_(align_every_cut) {
  if (comm_ == MPI_COMM_NULL) throw std::invalid_argument("CAD needs a communicator");
  if (!(tolerance > 0)) throw std::invalid_argument("attention.cad_tolerance must be > 0");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_size(cp_comm_, &cp_size_);
  MPI_Comm_rank(cp_comm_, &cp_rank_);
  bytes_per_second_ = probe_ring_bandwidth(comm_);
  reset_stats();
}

PlacementStats CadAttention::stats() const {
  return with_hidden_estimate(stats_, bytes_per_second_);
}

CadAttention::Lane& CadAttention::lane_at(int lane) {
  if (lane != 0 && lane != 1) throw std::logic_error("CAD: lane must be 0 or 1");
  return lanes_[lane];
}

void CadAttention::reset_stats() {
  stats_ = {};
  modelled_seconds_ = 0;
  plans_counted_ = layers_ = 0;
}

void CadAttention::observe_step(double compute_seconds, int64_t tokens) {
  if (!rank_speeds_) return;
  const double mine[3] = {compute_seconds, double(tokens), modelled_seconds_};
  std::vector<double> all(size_t(3 * size_));
  MPI_Allgather(mine, 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, comm_);
  // compute_r = f_r (l t_r + P_r) with mean f = 1: l from the sums, then each f_r
  double c = 0, t = 0, m = 0;
  for (int r = 0; r < size_; ++r) c += all[size_t(3 * r)], t += all[size_t(3 * r + 1)], m += all[size_t(3 * r + 2)];
  const double l = t > 0 ? (c - m) / t : 0;
  if (!(l > 0)) return;  // nothing to learn from (no tokens, or the model over-predicts)
  std::vector<double> f(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const double expected = l * all[size_t(3 * r + 1)] + all[size_t(3 * r + 2)];
    // within [1/2, 2]: a disturbed step (a rank descheduled, a page-fault storm) must not
    // hand a rank all or none of the attention
    f[size_t(r)] = expected > 0 ? std::clamp(all[size_t(3 * r)] / expected, 0.5, 2.0) : 1.0;
  }
  if (plans_counted_ > 0) layers_per_plan_ = std::max(1.0, double(layers_) / double(plans_counted_));
  // smoothed (half the last step's figure), so one disturbed step moves the plan little
  if (speed_.empty()) {
    speed_ = f;
    linear_per_token_ = l;
  } else {
    for (int r = 0; r < size_; ++r) speed_[size_t(r)] = 0.5 * speed_[size_t(r)] + 0.5 * f[size_t(r)];
    linear_per_token_ = 0.5 * linear_per_token_ + 0.5 * l;
  }
}

void CadAttention::make_plan(const AttentionInput& in, bool counted) {
  // per piece: row, len, pos, document length, document index in the sequence, the
  // first rank of the context-parallel group sharing the sequence (ranks of a group are
  // consecutive, cp fastest): (that rank, document) names a document over the job; and
  // its mask data (prefix or question length, segment start)
  constexpr int kFields = 8;
  std::vector<int32_t> mine;
  const int32_t leader = int32_t(rank_ - in.batch.cp_rank);
  for (const DocPiece& p : in.batch.pieces)
    mine.insert(mine.end(), {p.row, p.len, p.pos, p.doc_len, p.doc, leader, p.prefix_len, p.segment_pos});
  int count = int(mine.size());
  std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  const auto t0 = SteadyClock::now();  // a synchronisation point: waiting here is exposed
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_);
  int total = 0;
  for (int r = 0; r < size_; ++r) displs[size_t(r)] = total, total += counts[size_t(r)];
  std::vector<int32_t> all(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), count, MPI_INT, all.data(), counts.data(), displs.data(), MPI_INT, comm_);
  stats_.exposed_seconds += waited_since(t0, "CAD plan all-gather");

  Plan p;
  std::map<std::pair<int32_t, int32_t>, int32_t> number;  // (leader, doc) -> document
  for (int r = 0; r < size_; ++r) {
    p.first_doc.push_back(p.docs.size());
    for (int i = 0; i < counts[size_t(r)] / kFields; ++i) {
      const int32_t* f = all.data() + displs[size_t(r)] + kFields * i;
      p.docs.push_back({r, i, f[0], f[1], f[2], f[6], f[7], f[3]});
      const auto [it, added] = number.emplace(std::make_pair(f[5], f[4]), int32_t(p.doc_len.size()));
      if (added) p.doc_len.push_back(f[3]);
      p.gdoc.push_back(it->second);
    }
  }
  CadPlanOptions o = cad_plan_options(in.params, tolerance_, cost_ ? &*cost_ : nullptr);
  o.align_short_pieces = align_every_cut_;
  if (rank_speeds_ && !speed_.empty()) {  // every rank has the same speeds: the same plan
    // one plan serves every layer of the stage: its base is one layer's share of the
    // token-linear time, to set against one layer's attention cost
    o.speed = speed_;
    o.base_seconds.assign(size_t(size_), 0.0);
    for (const CadPiece& d : p.docs)
      o.base_seconds[size_t(d.origin)] +=
          speed_[size_t(d.origin)] * linear_per_token_ * d.len / layers_per_plan_;
  }
  p.plan = plan_core_attention(p.docs, size_, o);
  route(p);
  if (counted) ++plans_counted_;
  plans_[in.round] = std::move(p);
}

size_t CadAttention::piece_of(const Plan& p, const CadTask& t) {
  return p.first_doc[size_t(t.origin)] + size_t(t.doc);
}

// A task runs in place when its server holds the keys it reads as one local run of
// consecutive pieces from position 0 (always so without context parallelism; pieces of
// shared_question segments follow each other): the run's first row, else -1.
int64_t CadAttention::in_place_row(const Plan& p, const CadTask& t) {
  if (t.origin != t.server) return -1;
  int64_t row = -1, end = 0, next_row = 0;  // the run from position 0: first row, end position
  for (const auto& [holder, i] : p.doc_pieces[size_t(p.gdoc[piece_of(p, t)])]) {
    const CadPiece& d = p.docs[i];
    if (holder != t.server) continue;
    if (d.pos == 0) row = d.row, end = d.len, next_row = d.row + d.len;
    else if (row >= 0 && d.pos == end && d.row == next_row) end += d.len, next_row += d.len;
    if (row >= 0 && end >= t.kv_end) return row + t.kv_begin();
  }
  return -1;
}

int64_t CadAttention::Plan::ws_at(int32_t gdoc, int32_t pos) const {
  for (const WsRun& r : ws_runs.at(gdoc))
    if (pos >= r.begin && pos < r.end) return r.row + (pos - r.begin);
  throw std::logic_error("CAD: a key position outside the server's workspace");
}

void CadAttention::route(Plan& p) const {
  const size_t n = size_t(size_);
  // every document's pieces by position: (holder, index in docs)
  p.doc_pieces.assign(p.doc_len.size(), {});
  for (size_t i = 0; i < p.docs.size(); ++i) p.doc_pieces[size_t(p.gdoc[i])].push_back({p.docs[i].origin, i});
  for (auto& list : p.doc_pieces)
    std::sort(list.begin(), list.end(), [&](const auto& x, const auto& y) {
      return p.docs[x.second].pos < p.docs[y.second].pos;
    });
  // What each server needs of each document for its tasks not run in place: the runs
  // their kernels read ([kv_begin, kv_end), merged: the workspace's layout) and the keys
  // they read (what moves; the rest of the layout, between sinks and a window, is zeros)
  struct Need {
    KeySpans layout, read;
  };
  std::vector<std::map<int32_t, Need>> need(n);
  for (const CadTask& t : p.plan.tasks)
    if (t.q_len > 0 && in_place_row(p, t) < 0) {
      Need& x = need[size_t(t.server)][p.gdoc[piece_of(p, t)]];
      x.layout.emplace_back(t.kv_begin(), t.kv_end);
      add_key_spans(t.keys(), x.read);
    }
  for (auto& server : need)
    for (auto& [g, x] : server) merge_spans(x.layout), merge_spans(x.read);
  const auto flow = [&](int h, int s) {
    Flow f;
    for (size_t i = 0; i < p.plan.tasks.size(); ++i) {
      const CadTask& t = p.plan.tasks[i];
      if (t.q_len > 0 && t.origin == h && t.server == s && (h != s || in_place_row(p, t) < 0)) {
        f.tasks.push_back(int32_t(i));
        f.q_rows += t.q_len;
      }
    }
    for (const auto& [g, x] : need[size_t(s)])
      for (const auto& [a, b] : x.read)
        for (const auto& [holder, i] : p.doc_pieces[size_t(g)]) {
          const CadPiece& d = p.docs[i];
          const int32_t lo = int32_t(std::max<int64_t>(a, d.pos)), hi = int32_t(std::min<int64_t>(b, d.pos + d.len));
          if (holder != h || lo >= hi) continue;
          f.kv.push_back({g, d.row + (lo - d.pos), lo, hi - lo});
          f.kv_rows += hi - lo;
        }
    return f;
  };
  p.out.assign(n, Flow{});
  p.in.assign(n, Flow{});
  for (int r = 0; r < size_; ++r)
    if (r != rank_) p.out[size_t(r)] = flow(rank_, r), p.in[size_t(r)] = flow(r, rank_);
  p.ws_rows = 0;
  int64_t zeros = 0;
  for (const auto& [g, x] : need[size_t(rank_)]) {
    std::vector<Plan::WsRun>& runs = p.ws_runs[g];
    for (const auto& [a, b] : x.layout) {
      runs.push_back({int32_t(a), int32_t(b), p.ws_rows});
      // the layout's rows no task reads: zeros
      int64_t at = a;
      for (const auto& [ra, rb] : x.read) {
        if (rb <= a || ra >= b) continue;
        if (ra > at) p.ws_zero.push_back({p.ws_rows + (at - a), ra - at}), zeros += ra - at;
        at = std::max(at, rb);
      }
      if (at < b) p.ws_zero.push_back({p.ws_rows + (at - a), b - at}), zeros += b - at;
      p.ws_rows += b - a;
    }
  }
  const Flow own = flow(rank_, rank_);  // own tasks on the workspace and own key rows
  p.own_kv = own.kv;
  // every workspace row comes from exactly one holder's segment (the pieces of a
  // document tile it) or is a zero, else the kernels would read stale keys
  int64_t covered = own.kv_rows + zeros;
  for (int o = 0; o < size_; ++o)
    if (o != rank_) covered += p.in[size_t(o)].kv_rows;
  if (covered != p.ws_rows)
    throw std::logic_error("CAD: the holders' key segments and the zeros cover " + std::to_string(covered) +
                           " of " + std::to_string(p.ws_rows) + " workspace rows");
  list_tasks(p, own);
}

// This rank's attention tasks: its own run in place, its own on the workspace, and the
// ones it serves for each origin (in the order of that origin's message).
void CadAttention::list_tasks(Plan& p, const Flow& own) const {
  const auto task_of = [&](const CadTask& t, int64_t q_row, int64_t kv_row) {
    return t.attention_task(q_row, kv_row, p.doc_len[size_t(p.gdoc[piece_of(p, t)])]);
  };
  const auto local_row = [&](const CadTask& t) {
    const CadPiece& d = p.docs[piece_of(p, t)];
    return int64_t(d.row) + (t.q_begin - d.pos);
  };
  for (const CadTask& t : p.plan.tasks) {
    const int64_t row = in_place_row(p, t);
    if (t.server == rank_ && row >= 0) p.own_local.push_back(task_of(t, local_row(t), row));
  }
  p.own_ws_tasks = own.tasks;
  for (int32_t i : own.tasks) {
    const CadTask& t = p.plan.tasks[size_t(i)];
    p.own_ws.push_back(task_of(t, local_row(t), p.ws_at(p.gdoc[piece_of(p, t)], t.kv_begin())));
  }
  p.served.assign(size_t(size_), {});
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    int64_t q_row = 0;
    for (int32_t i : p.in[size_t(o)].tasks) {
      const CadTask& t = p.plan.tasks[size_t(i)];
      p.served[size_t(o)].push_back(task_of(t, q_row, p.ws_at(p.gdoc[piece_of(p, t)], t.kv_begin())));
      q_row += t.q_len;
    }
  }
}

CadAttention::Request CadAttention::request_of(const std::vector<float*>& a, bool backward) {
  return backward ? Request{a[0], a[1], a[2], a[3]} : Request{a[0]};
}

CadAttention::Reply CadAttention::reply_of(const std::vector<float*>& a, bool backward) {
  return backward ? Reply{nullptr, nullptr, a[0], a[1], a[2]} : Reply{a[0], a[1]};
}

int64_t CadAttention::message_floats(int64_t q_rows, int64_t kv_rows, const Widths& w) {
  int64_t n = 0;
  for (size_t i = 0; i < w.q.size(); ++i) n += q_rows * Widths::floats(w.q[i], w.q_bf16[i]);
  for (int64_t x : w.kv) n += kv_rows * Widths::floats(x, w.kv_bf16);
  return n;
}

std::vector<float*> CadAttention::arrays_of(float* base, int64_t q_rows, int64_t kv_rows, const Widths& w) {
  std::vector<float*> a;
  for (size_t i = 0; i < w.q.size(); ++i) a.push_back(base), base += q_rows * Widths::floats(w.q[i], w.q_bf16[i]);
  for (int64_t x : w.kv) a.push_back(base), base += kv_rows * Widths::floats(x, w.kv_bf16);
  return a;
}

namespace {
// n values into a message array at value `at`: copied, or as bf16 bits (two to a float
// of the array); and n values out of one, widened from bf16 or copied
void put_rows(const float* from, int64_t n, bool bf16, float* array, int64_t at) {
  if (!bf16) {
    std::copy(from, from + n, array + at);
    return;
  }
  to_bf16_bits(from, n, reinterpret_cast<uint16_t*>(array) + at);
}
void get_rows(const float* array, int64_t at, int64_t n, bool bf16, float* to) {
  if (!bf16) {
    std::copy(array + at, array + at + n, to);
    return;
  }
  from_bf16_bits(reinterpret_cast<const uint16_t*>(array) + at, n, to);
}
}  // namespace

const CadAttention::Plan& CadAttention::plan_of(const AttentionInput& in) const {
  const auto it = plans_.find(in.round);
  if (it == plans_.end()) throw std::logic_error("CAD: no plan for this round");
  return it->second;
}

// ---- the key rows a layer moves ---------------------------------------------------------

void CadAttention::Keys::reset(size_t ranks, bool selects) {
  selected = selects;
  out.assign(ranks, {});
  in.assign(ranks, {});
  own.clear();
  out_kv_rows.assign(ranks, 0);
  in_kv_rows.assign(ranks, 0);
  means_out.assign(ranks, {});
  means_in.assign(ranks, {});
  out_means_floats.assign(ranks, 0);
  in_means_floats.assign(ranks, 0);
}

void CadAttention::plan_keys(Lane& L) const {
  const Plan& p = *L.plan;
  Keys& ks = L.keys;
  const size_t n = size_t(size_);
  ks.reset(n, false);
  for (size_t r = 0; r < n; ++r) {
    ks.out[r] = p.out[r].kv, ks.out_kv_rows[r] = p.out[r].kv_rows;
    ks.in[r] = p.in[r].kv, ks.in_kv_rows[r] = p.in[r].kv_rows;
  }
  ks.own = p.own_kv;
}

// attention.mask = block_sparse: each origin selects the key blocks of its tasks' queries
// (where the queries are), and only those rows, with the block means the servers' kernels
// select from, move. Collective over comm_ (and the context-parallel group).
//   1. the block means of this rank's pieces' documents: its own key rows' exact sums,
//      and within a context-parallel group the other holders' (plan_selected_keys);
//   2. per task not run in place, the keys its rows read: its queries' own blocks
//      causally ([first row's block start, last row]) and the blocks they select, merged
//      per (server, document);
//   3. with context parallelism, the other holders of a document told which of those
//      spans each server reads (origin -> holder: server, document, begin, end);
//   4. every holder's rows of what each server reads, and one exchange telling each
//      server which rows (document, position, length) and which means (document, blocks)
//      its requests bring, so that both sides lay out the request the same way.
// Selection is deterministic (block_sparse.h), so the server's kernel, given the same
// means, reads exactly the rows that came; the rest of its workspace is zeros.
void CadAttention::select_keys(Lane& L, const AttentionInput& in, const float* q, const float* k) {
  const Plan& p = *L.plan;
  const AttentionParams& prm = in.params;
  Keys& ks = L.keys;
  const size_t n = size_t(size_);
  const int64_t B = prm.mask.block_size, KV = prm.num_kv_heads, K = prm.mask.top_blocks;
  const int64_t kvd = KV * prm.head_dim;
  ks.reset(n, true);

  // 1. (a pipeline tick's dummy has no pieces and names no group: every rank of its
  // group is at the same dummy, and takes part with nothing)
  LocalBatch none;
  const LocalBatch* batch = &in.batch;
  if (int(in.batch.group_pieces.size()) != cp_size_) {
    if (!in.batch.pieces.empty()) throw std::logic_error("CAD: a batch's context-parallel group is not the placement's");
    none.group_pieces.assign(size_t(cp_size_), {});
    none.cp_rank = cp_rank_;
    batch = &none;
  }
  plan_selected_keys(cp_comm_, batch->cp_rank, prm, *batch, q, k, nullptr, ks.sel);
  stats_.bytes_sent += ks.sel.bytes_sent;
  stats_.exposed_seconds += ks.sel.exposed_seconds;

  // 2.
  std::map<std::pair<int32_t, int32_t>, KeySpans> spans;  // (server, document) -> spans
  std::vector<int32_t> selected;
  std::vector<char> used;
  for (const CadTask& t : p.plan.tasks) {
    if (t.origin != rank_ || t.q_len <= 0 || in_place_row(p, t) >= 0) continue;
    const size_t piece = piece_of(p, t);
    const int32_t g = p.gdoc[piece];
    const CadPiece& d = p.docs[piece];
    const BlockMeans& means = ks.sel.means[size_t(t.doc)];
    KeySpans& s = spans[{t.server, g}];
    s.emplace_back(int64_t(t.q_begin) / B * B, int64_t(t.q_begin) + t.q_len);
    const AttentionTask a = t.attention_task(int64_t(d.row) + (t.q_begin - d.pos), 0, p.doc_len[size_t(g)]);
    for (int64_t lo = a.q_row, end = a.q_row + a.q_len; lo < end; lo += prm.chunk_rows) {
      const int64_t hi = std::min(end, lo + prm.chunk_rows);
      int64_t width = 0;  // min(top_blocks, the blocks before), whatever top_blocks is
      select_blocks(prm, a, lo, hi, q, nullptr, selected, &means, &width);
      used.assign(static_cast<size_t>(int64_t(t.q_begin + t.q_len - 1) / B), 0);
      for (int64_t e = 0; e < (hi - lo) * KV * width; ++e)
        if (const int32_t m = selected[size_t(e)]; m >= 0) used.at(size_t(m)) = 1;
      for (size_t m = 0; m < used.size(); ++m)
        if (used[m]) s.emplace_back(int64_t(m) * B, int64_t(m + 1) * B);
      merge_spans(s);
    }
    auto& mo = ks.means_out[size_t(t.server)];  // (top_blocks 0 selects nothing: no means)
    if (K > 0 && t.server != rank_ && std::none_of(mo.begin(), mo.end(), [&](const auto& x) { return x.first == g; }))
      mo.push_back({g, size_t(t.doc)});
  }

  // 3.
  if (cp_size_ > 1) {
    std::vector<std::vector<int32_t>> told(n);
    for (const auto& [key, s] : spans) {
      std::vector<char> done(n, 0);
      for (const auto& [h, i] : p.doc_pieces[size_t(key.second)])
        if (h != rank_ && !done[size_t(h)]) {
          done[size_t(h)] = 1;
          for (const auto& [a, b] : s) told[size_t(h)].insert(told[size_t(h)].end(), {key.first, key.second, int32_t(a), int32_t(b)});
        }
    }
    const auto got = exchange_ints(comm_, told, stats_.bytes_sent, stats_.exposed_seconds);
    for (const std::vector<int32_t>& from : got)
      for (size_t i = 0; i + 4 <= from.size(); i += 4) spans[{from[i], from[i + 1]}].emplace_back(from[i + 2], from[i + 3]);
    for (auto& [key, s] : spans) merge_spans(s);
  }

  // 4.
  for (const auto& [key, s] : spans) {
    const auto [server, g] = key;
    for (const auto& [h, i] : p.doc_pieces[size_t(g)]) {
      if (h != rank_) continue;
      const CadPiece& d = p.docs[i];
      for (const auto& [a, b] : s) {
        const int32_t lo = int32_t(std::max<int64_t>(a, d.pos)), hi = int32_t(std::min<int64_t>(b, d.pos + d.len));
        if (lo < hi) (server == rank_ ? ks.own : ks.out[size_t(server)]).push_back({g, d.row + (lo - d.pos), lo, hi - lo});
      }
    }
  }
  std::vector<std::vector<int32_t>> head(n);
  for (size_t s = 0; s < n; ++s) {
    if (int(s) == rank_) continue;
    std::vector<int32_t>& h = head[s];
    h.push_back(int32_t(ks.out[s].size()));
    for (const KvPiece& x : ks.out[s]) h.insert(h.end(), {x.gdoc, x.pos, x.len});
    h.push_back(int32_t(ks.means_out[s].size()));
    for (const auto& [g, piece] : ks.means_out[s]) h.insert(h.end(), {g, int32_t(ks.sel.means[piece].stride)});
  }
  const auto got = exchange_ints(comm_, head, stats_.bytes_sent, stats_.exposed_seconds);
  const auto bad = [] { throw std::logic_error("CAD: a malformed block_sparse key header"); };
  for (size_t o = 0; o < n; ++o) {
    for (const KvPiece& x : ks.out[o]) ks.out_kv_rows[o] += x.len;
    for (const auto& [g, piece] : ks.means_out[o]) ks.out_means_floats[o] += 2 * kvd * ks.sel.means[piece].stride;
    if (int(o) == rank_) continue;
    const std::vector<int32_t>& h = got[o];
    size_t at = 0;
    if (h.empty()) bad();
    const int32_t pieces = h[at++];
    if (pieces < 0 || h.size() < at + 3 * size_t(pieces) + 1) bad();
    for (int32_t i = 0; i < pieces; ++i, at += 3) {
      ks.in[o].push_back({h[at], -1, h[at + 1], h[at + 2]});
      ks.in_kv_rows[o] += h[at + 2];
    }
    const int32_t means = h[at++];
    if (means < 0 || h.size() != at + 2 * size_t(means)) bad();
    for (int32_t i = 0; i < means; ++i, at += 2) {
      ks.means_in[o].push_back({h[at], h[at + 1]});
      ks.in_means_floats[o] += 2 * kvd * h[at + 1];
    }
  }
}

void CadAttention::run_forward(const Lane& L, std::span<const AttentionTask> tasks, int who, const float* q,
                               const float* k, const float* v, float* out, float* lse) const {
  if (L.keys.selected && L.params->mask.top_blocks > 0)  // (top_blocks 0 reads no means)
    block_sparse_forward(*L.params, tasks, q, k, v, out, lse, L.keys.task_means[size_t(who)]);
  else
    attention_forward(*L.params, tasks, q, k, v, out, lse);
}

void CadAttention::run_backward(const Lane& L, std::span<const AttentionTask> tasks, int who, const float* q,
                                const float* k, const float* v, const float* out, const float* lse,
                                const float* dout, float* dq, float* dk, float* dv) const {
  if (L.keys.selected && L.params->mask.top_blocks > 0)
    block_sparse_backward(*L.params, tasks, q, k, v, out, lse, dout, dq, dk, dv, L.keys.task_means[size_t(who)]);
  else
    attention_backward(*L.params, tasks, q, k, v, out, lse, dout, dq, dk, dv);
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
  stats_.exposed_seconds += waited_since(t0, "CAD all-to-all");
}

// ---- the lane's phases ------------------------------------------------------------------
// A message from a rank to a server is its Flow: every per-query-row array over the
// flow's tasks ([rows, width] each, back to back), then every per-key-row array over
// its segments. Both sides derive the same layout from the plan.

void CadAttention::start_lane(Lane& L, const std::vector<RowArray>& q_arrays,
                              const std::vector<RowArray>& kv_arrays) {
  const Plan& p = *L.plan;
  L.in = {};
  for (const RowArray& a : q_arrays) L.in.q.push_back(a.width), L.in.q_bf16.push_back(a.bf16);
  for (const RowArray& a : kv_arrays) L.in.kv.push_back(a.width);
  L.in.kv_bf16 = L.params->precision == Precision::bf16;
  const Keys& ks = L.keys;
  const int64_t kvd = int64_t(L.params->num_kv_heads) * L.params->head_dim;
  L.send.clear();
  L.send_counts.assign(size_t(size_), 0);
  L.recv_counts.assign(size_t(size_), 0);
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Flow& f = p.out[size_t(s)];
    const int64_t rows_floats = message_floats(f.q_rows, ks.out_kv_rows[size_t(s)], L.in);
    L.send_counts[size_t(s)] = count_of(rows_floats + ks.out_means_floats[size_t(s)]);
    L.recv_counts[size_t(s)] = count_of(message_floats(p.in[size_t(s)].q_rows, ks.in_kv_rows[size_t(s)], L.in) +
                                        ks.in_means_floats[size_t(s)]);
    const size_t base = L.send.size();
    L.send.resize(base + size_t(L.send_counts[size_t(s)]));
    const std::vector<float*> dst = arrays_of(L.send.data() + base, f.q_rows, ks.out_kv_rows[size_t(s)], L.in);
    int64_t q_row = 0;
    for (int32_t i : f.tasks) {
      const CadTask& t = p.plan.tasks[size_t(i)];
      const CadPiece& d = p.docs[p.first_doc[size_t(rank_)] + size_t(t.doc)];
      const int64_t src = d.row + (t.q_begin - d.pos);
      for (size_t x = 0; x < q_arrays.size(); ++x) {
        const int64_t wd = q_arrays[x].width;
        put_rows(q_arrays[x].data + src * wd, t.q_len * wd, q_arrays[x].bf16, dst[x], q_row * wd);
      }
      q_row += t.q_len;
    }
    int64_t kv_row = 0;
    for (const KvPiece& g : ks.out[size_t(s)]) {
      for (size_t x = 0; x < kv_arrays.size(); ++x) {
        const int64_t wd = kv_arrays[x].width;
        put_rows(kv_arrays[x].data + int64_t(g.row) * wd, int64_t(g.len) * wd, L.in.kv_bf16,
                 dst[q_arrays.size() + x], kv_row * wd);
      }
      kv_row += g.len;
    }
    float* means = L.send.data() + base + rows_floats;  // block_sparse: the block means, as doubles
    for (const auto& [g, piece] : ks.means_out[size_t(s)]) {
      const BlockMeans& m = ks.sel.means[piece];
      if (m.stride > 0) std::memcpy(means, m.kbar, size_t(kvd * m.stride) * sizeof(double));
      means += 2 * kvd * m.stride;
    }
  }
  start_alltoallv(L, L.send, L.send_counts, L.recv, L.recv_counts);
}

// This rank's own in-place tasks in `parts` kernel calls (split by attention pairs),
// driving the exchanges in flight between them: part `part` of `parts`.
void CadAttention::run_own(Lane& L, int part, int parts) {
  const std::vector<AttentionTask>& own = L.plan->own_local;
  int64_t total = 0;
  const AttentionMask& mask = L.params->mask;
  for (const AttentionTask& t : own) total += attention_pairs(t, mask);
  int64_t seen = 0;
  size_t begin = own.size(), end = own.size();
  for (size_t i = 0; i < own.size(); ++i) {
    const int64_t before = seen;
    seen += attention_pairs(own[i], mask);
    // task i belongs to the part its first pair falls in
    const int at = total > 0 ? int((before * parts) / total) : 0;
    if (at == part && begin == own.size()) begin = i;
    if (at > part && end == own.size()) end = i;
  }
  if (begin >= end) return;
  const std::span<const AttentionTask> all(own);
  constexpr size_t kPieces = 4;  // kernel calls per part, the exchanges tested in between
  const size_t n = end - begin;
  for (size_t c = 0; c < kPieces; ++c) {
    const size_t a = begin + c * n / kPieces, b = begin + (c + 1) * n / kPieces;
    if (a < b) {
      const std::span<const AttentionTask> t = all.subspan(a, b - a);
      if (L.backward)
        attention_backward(*L.params, t, L.q, L.k, L.v, L.out_in, L.lse_in, L.dout, L.dq, L.dk, L.dv);
      else
        attention_forward(*L.params, t, L.q, L.k, L.v, L.out, L.lse);
    }
    progress();
  }
}

// The key workspace of a lane being served: each needed document's prefix, from this
// rank's rows and the segments that came with the requests; returns each origin's
// request arrays (msg[o]; empty for this rank).
std::vector<std::vector<float*>> CadAttention::gather_keys(Lane& L) {
  const Plan& p = *L.plan;
  const AttentionParams& prm = *L.params;
  const int64_t kvd = int64_t(prm.num_kv_heads) * prm.head_dim;
  const size_t nq = L.in.q.size();
  const size_t ws = size_t(p.ws_rows * kvd);
  if (L.ws_k.size() < ws) L.ws_k.resize(ws), L.ws_v.resize(ws);
  Keys& ks = L.keys;
  if (ks.selected) {  // block_sparse: every row no selection reads is a zero
    std::fill_n(L.ws_k.data(), ws, 0.0f);
    std::fill_n(L.ws_v.data(), ws, 0.0f);
  } else {
    for (const auto& [row, len] : p.ws_zero) {  // between sinks and a window: masked, never sent
      std::fill_n(L.ws_k.data() + row * kvd, len * kvd, 0.0f);
      std::fill_n(L.ws_v.data() + row * kvd, len * kvd, 0.0f);
    }
  }
  const auto place = [&](const KvPiece& g, const float* k, const float* v, int64_t src_row, bool bf16) {
    const int64_t at = p.ws_at(g.gdoc, g.pos) * kvd, n = int64_t(g.len) * kvd;
    get_rows(k, src_row * kvd, n, bf16, L.ws_k.data() + at);
    get_rows(v, src_row * kvd, n, bf16, L.ws_v.data() + at);
  };
  for (const KvPiece& g : ks.own) place(g, L.k, L.v, g.row, false);
  std::vector<std::vector<float*>> msg(static_cast<size_t>(size_));
  ks.received.resize(size_t(size_));
  ks.task_means.assign(size_t(size_), {});
  int64_t in_at = 0;
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    const int64_t q_rows = p.in[size_t(o)].q_rows, kv_rows = ks.in_kv_rows[size_t(o)];
    msg[size_t(o)] = arrays_of(L.recv.data() + in_at, q_rows, kv_rows, L.in);
    int64_t row = 0;
    for (const KvPiece& g : ks.in[size_t(o)]) {
      place(g, msg[size_t(o)][nq], msg[size_t(o)][nq + 1], row, L.in.kv_bf16);
      row += g.len;
    }
    if (ks.selected && prm.mask.top_blocks > 0) {  // the origin's block means, then each served task's
      std::vector<double>& means = ks.received[size_t(o)];
      means.resize(size_t(ks.in_means_floats[size_t(o)] / 2));
      if (!means.empty())  // (documents with no earlier block send none)
        std::memcpy(means.data(), L.recv.data() + in_at + message_floats(q_rows, kv_rows, L.in),
                    means.size() * sizeof(double));
      for (int32_t i : p.in[size_t(o)].tasks) {
        const int32_t g = p.gdoc[piece_of(p, p.plan.tasks[size_t(i)])];
        int64_t at = 0;
        bool found = false;
        for (const auto& [d, stride] : ks.means_in[size_t(o)]) {
          if (d == g) {
            ks.task_means[size_t(o)].push_back({means.data() + at, stride});
            found = true;
            break;
          }
          at += kvd * stride;
        }
        if (!found) throw std::logic_error("CAD: a served block_sparse task came without its block means");
      }
    }
    in_at += L.recv_counts[size_t(o)];
  }
  if (ks.selected && prm.mask.top_blocks > 0)
    for (int32_t i : p.own_ws_tasks) ks.task_means[size_t(rank_)].push_back(ks.sel.means[size_t(p.plan.tasks[size_t(i)].doc)]);
  if (L.backward) {
    L.ws_dk.assign(ws, 0.0f);  // every task's key gradient, summed per document
    L.ws_dv.assign(ws, 0.0f);
  }
  return msg;
}

// The replies' buffer (L.back) and each origin's arrays in it: O, LSE (forward) or dQ
// and the segments' dK, dV (backward).
std::vector<std::vector<float*>> CadAttention::reply_arrays(Lane& L) {
  const Plan& p = *L.plan;
  L.reply_counts.assign(size_t(size_), 0);
  L.reply_recv_counts.assign(size_t(size_), 0);
  int64_t total = 0;
  for (int o = 0; o < size_; ++o)
    if (o != rank_) {
      L.reply_counts[size_t(o)] = count_of(message_floats(p.in[size_t(o)].q_rows, L.keys.in_kv_rows[size_t(o)], L.reply));
      L.reply_recv_counts[size_t(o)] =
          count_of(message_floats(p.out[size_t(o)].q_rows, L.keys.out_kv_rows[size_t(o)], L.reply));
      total += L.reply_counts[size_t(o)];
    }
  L.back.assign(size_t(total), 0.0f);  // kernels write (forward) or accumulate (backward)
  std::vector<std::vector<float*>> reply(static_cast<size_t>(size_));
  int64_t back_at = 0;
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    reply[size_t(o)] = arrays_of(L.back.data() + back_at, p.in[size_t(o)].q_rows, L.keys.in_kv_rows[size_t(o)], L.reply);
    back_at += L.reply_counts[size_t(o)];
  }
  return reply;
}

// Backward: the holders' key gradients of the segments they sent, into their replies.
void CadAttention::return_key_gradients(Lane& L, const std::vector<std::vector<float*>>& reply) {
  const Plan& p = *L.plan;
  const AttentionParams& prm = *L.params;
  const int64_t kvd = int64_t(prm.num_kv_heads) * prm.head_dim;
  for (int o = 0; o < size_; ++o) {
    if (o == rank_) continue;
    int64_t row = 0;
    const Reply r = reply_of(reply[size_t(o)], true);
    for (const KvPiece& g : L.keys.in[size_t(o)]) {
      const int64_t at = p.ws_at(g.gdoc, g.pos) * kvd, n = int64_t(g.len) * kvd;
      std::copy(L.ws_dk.data() + at, L.ws_dk.data() + at + n, r.dk + row * kvd);
      std::copy(L.ws_dv.data() + at, L.ws_dv.data() + at + n, r.dv + row * kvd);
      row += g.len;
    }
  }
}


void CadAttention::serve_lane(Lane& L, bool with_own) {
  if (!L.plan) throw std::logic_error("CAD: serve before start");
  wait(L);  // the requests
  const Plan& p = *L.plan;
  const size_t nq = L.in.q.size();  // forward: Q | K, V;  backward: Q, O, dO, LSE | K, V

  const std::vector<std::vector<float*>> msg = gather_keys(L);
  const std::vector<std::vector<float*>> reply = reply_arrays(L);
  // origin o's query arrays as fp32 (bf16 ones widened into L.wide), and after them in
  // L.wide room for the fp32 O of a forward whose reply carries O in bf16
  float* wide_out = nullptr;
  const auto widened = [&](int o) {
    std::vector<float*> a = msg[size_t(o)];
    const int64_t rows = p.in[size_t(o)].q_rows;
    int64_t need = !L.backward && L.reply.q_bf16[0] ? rows * L.reply.q[0] : 0;
    for (size_t x = 0; x < nq; ++x)
      if (L.in.q_bf16[x]) need += rows * L.in.q[x];
    if (int64_t(L.wide.size()) < need) L.wide.resize(size_t(need));
    float* w = L.wide.data();
    for (size_t x = 0; x < nq; ++x)
      if (L.in.q_bf16[x]) {
        get_rows(a[x], 0, rows * L.in.q[x], true, w);
        a[x] = w;
        w += rows * L.in.q[x];
      }
    wide_out = w;
    return a;
  };
  const float *wk = L.ws_k.data(), *wv = L.ws_v.data();
  for (int o = 0; o < size_; ++o) {
    const std::vector<AttentionTask>& tasks = o == rank_ ? p.own_ws : p.served[size_t(o)];
    if (tasks.empty()) continue;
    if (o == rank_ && L.backward)  // own queries on the workspace: dQ in place
      run_backward(L, tasks, o, L.q, wk, wv, L.out_in, L.lse_in, L.dout, L.dq, L.ws_dk.data(), L.ws_dv.data());
    else if (o == rank_)
      run_forward(L, tasks, o, L.q, wk, wv, L.out, L.lse);
    else if (L.backward) {
      const Request x = request_of(widened(o), true);
      run_backward(L, tasks, o, x.q, wk, wv, x.out, x.lse, x.dout, reply_of(reply[size_t(o)], true).dq,
                   L.ws_dk.data(), L.ws_dv.data());
    } else {
      const Request x = request_of(widened(o), false);
      const Reply r = reply_of(reply[size_t(o)], false);
      const bool out_bf16 = L.reply.q_bf16[0];
      run_forward(L, tasks, o, x.q, wk, wv, out_bf16 ? wide_out : r.out, r.lse);
      if (out_bf16) put_rows(wide_out, p.in[size_t(o)].q_rows * L.reply.q[0], true, r.out, 0);
    }
    progress();
  }
  if (L.backward) return_key_gradients(L, reply);
  start_alltoallv(L, L.back, L.reply_counts, L.back_recv, L.reply_recv_counts);
  if (with_own) run_own(L, 0, 1);  // while the replies travel
}

void CadAttention::finish_lane(Lane& L) {
  if (!L.plan) throw std::logic_error("CAD: finish before start");
  wait(L);  // the replies
  const Plan& p = *L.plan;
  const int64_t H = L.params->num_heads, qd = H * L.params->head_dim,
                kvd = int64_t(L.params->num_kv_heads) * L.params->head_dim;
  const auto local_row = [&](const CadTask& t) {
    const CadPiece& d = p.docs[p.first_doc[size_t(rank_)] + size_t(t.doc)];
    return int64_t(d.row) + (t.q_begin - d.pos);
  };
  const auto add = [](float* dst, const float* src, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  };
  if (L.backward)  // key gradients of own rows from this rank's own workspace tasks first
    for (const KvPiece& g : L.keys.own) {
      const int64_t at = p.ws_at(g.gdoc, g.pos) * kvd, n = int64_t(g.len) * kvd;
      add(L.dk + int64_t(g.row) * kvd, L.ws_dk.data() + at, n);
      add(L.dv + int64_t(g.row) * kvd, L.ws_dv.data() + at, n);
    }
  // then the other servers' replies, in server rank order
  int64_t at = 0;
  for (int s = 0; s < size_; ++s) {
    if (s == rank_) continue;
    const Flow& f = p.out[size_t(s)];
    const Reply y =
        reply_of(arrays_of(L.back_recv.data() + at, f.q_rows, L.keys.out_kv_rows[size_t(s)], L.reply), L.backward);
    at += L.reply_recv_counts[size_t(s)];
    int64_t q_row = 0;
    for (int32_t i : f.tasks) {
      const CadTask& t = p.plan.tasks[size_t(i)];
      const int64_t dst = local_row(t);
      if (L.backward) {
        add(L.dq + dst * qd, y.dq + q_row * qd, t.q_len * qd);
      } else {
        get_rows(y.out, q_row * qd, t.q_len * qd, L.reply.q_bf16[0], L.out + dst * qd);
        std::copy(y.lse + q_row * H, y.lse + (q_row + t.q_len) * H, L.lse + dst * H);
      }
      q_row += t.q_len;
    }
    if (!L.backward) continue;
    int64_t row = 0;
    for (const KvPiece& g : L.keys.out[size_t(s)]) {
      add(L.dk + int64_t(g.row) * kvd, y.dk + row * kvd, int64_t(g.len) * kvd);
      add(L.dv + int64_t(g.row) * kvd, y.dv + row * kvd, int64_t(g.len) * kvd);
      row += g.len;
    }
  }
  L.plan = nullptr;
}

// ---- forward and backward -----------------------------------------------------------

// Q rows and K/V prefixes go to the servers, O and LSE come back from them.
void CadAttention::forward_start(const AttentionInput& in, const float* q, const float* k,
                                 const float* v, float* out, float* lse) {
  // every rank is at its stage's first layer (or, recomputing, at a backward tick's last)
  if (in.starts_round) make_plan(in, !in.recomputed);
  Lane& L = lane_at(in.lane);
  if (L.plan) throw std::logic_error("CAD: lane started twice");
  L.plan = &plan_of(in);
  L.params = &in.params;
  L.backward = false;
  L.q = q, L.k = k, L.v = v, L.out = out, L.lse = lse;
  const int64_t H = in.params.num_heads, qd = H * in.params.head_dim,
                kvd = int64_t(in.params.num_kv_heads) * in.params.head_dim;
  if (!in.recomputed) {
    stats_.pairs_served += double(L.plan->plan.pairs_after[size_t(rank_)]);
    modelled_seconds_ += L.plan->plan.load_after[size_t(rank_)];  // this layer's, fwd + bwd
    ++layers_;
  }
  if (in.params.mask.kind == MaskKind::block_sparse) select_keys(L, in, q, k);
  else plan_keys(L);
  const bool bf16 = in.params.precision == Precision::bf16;  // Q, K, V and O travel in bf16
  L.reply = {{qd, H}, {}, {bf16, false}};                      // Reply: O, LSE
  start_lane(L, {{q, qd, bf16}}, {{k, kvd}, {v, kvd}});        // Request: Q; then K, V
}

// Servers keep nothing between forward and backward: Q, O, dO, LSE and the K/V
// prefixes go out again, dQ and the prefixes' dK, dV come back.
void CadAttention::backward_start(const AttentionInput& in, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse,
                                  const float* dout, float* dq, float* dk, float* dv) {
  // a backward pipeline tick (its own set of micro-batches): every stage at its last layer
  if (in.starts_round) make_plan(in, false);
  Lane& L = lane_at(in.lane);
  if (L.plan) throw std::logic_error("CAD: lane started twice");
  L.plan = &plan_of(in);
  L.params = &in.params;
  L.backward = true;
  L.q = q, L.k = k, L.v = v, L.out_in = out, L.lse_in = lse, L.dout = dout;
  L.dq = dq, L.dk = dk, L.dv = dv;
  const int64_t H = in.params.num_heads, qd = H * in.params.head_dim,
                kvd = int64_t(in.params.num_kv_heads) * in.params.head_dim;
  if (in.params.mask.kind == MaskKind::block_sparse) select_keys(L, in, q, k);
  else plan_keys(L);
  const bool bf16 = in.params.precision == Precision::bf16;  // Q, O, dO, K and V travel in bf16
  L.reply = {{qd}, {kvd, kvd}, {false}};                       // Reply: dQ; dK, dV (fp32)
  start_lane(L, {{q, qd, bf16}, {out, qd, bf16}, {dout, qd, bf16}, {lse, H}},  // Request: Q, O, dO, LSE
             {{k, kvd}, {v, kvd}});                                         // then K, V
}

// Without ping-pong: the first half of this rank's own tasks runs while the requests
// travel, the second half while the replies travel.
void CadAttention::forward(const AttentionInput& in, const float* q, const float* k,
                           const float* v, float* out, float* lse) {
  forward_start(in, q, k, v, out, lse);
  Lane& L = lane_at(in.lane);
  run_own(L, 0, 2);
  serve_lane(L, false);
  run_own(L, 1, 2);
  finish_lane(L);
}

void CadAttention::backward(const AttentionInput& in, const float* q, const float* k,
                            const float* v, const float* out, const float* lse,
                            const float* dout, float* dq, float* dk, float* dv) {
  backward_start(in, q, k, v, out, lse, dout, dq, dk, dv);
  Lane& L = lane_at(in.lane);
  run_own(L, 0, 2);
  serve_lane(L, false);
  run_own(L, 1, 2);
  finish_lane(L);
}

}  // namespace lct
