#include "src/sim/costs.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "data/context_shards.h"
#include "data/key_runs.h"
#include "data/nano_batches.h"
#include "data/relay_rows.h"
#include "model/llama.h"

namespace lct {

CadLayerCost::LaneCost CadLayerCost::lane_cost(const std::vector<LocalBatch>& group, std::vector<double>& served,
                                               std::vector<double>& rank_bytes) const {
  const int n = int(group.size());
  std::vector<CadPiece> docs;
  for (int r = 0; r < n; ++r) {
    int32_t i = 0;
    for (const DocPiece& d : group[size_t(r)].pieces) docs.push_back({r, i++, d.row, d.len, d.pos, d.prefix_len, d.segment_pos, d.doc_len});
  }
  const CadPlan plan = plan_core_attention(docs, n, po_);
  LaneCost lane;
  for (std::vector<double>* v : {&lane.linear, &lane.work, &lane.own, &lane.comm, &lane.remote}) v->assign(size_t(n), 0.0);
  // bytes each rank sends and receives, per phase of the exchange (forward there and
  // back, backward there and back: one MPI_Ialltoallv each, the next waiting for the
  // last) and link: [phase][0] within its host, [phase][1] with other hosts
  std::array<std::array<std::vector<double>, 2>, 4> sent, received;
  for (int ph = 0; ph < 4; ++ph)
    for (int k = 0; k < 2; ++k) {
      sent[size_t(ph)][size_t(k)].assign(size_t(n), 0.0);
      received[size_t(ph)][size_t(k)].assign(size_t(n), 0.0);
    }
  const auto ship = [&](int phase, int from, int to, double b) {
    const size_t k = net_.host_of(from) != net_.host_of(to) ? 1 : 0;
    sent[size_t(phase)][k][size_t(from)] += b;
    received[size_t(phase)][k][size_t(to)] += b;
  };
  for (int r = 0; r < n; ++r) lane.linear[size_t(r)] = cal_.linear_per_token_layer * double(group[size_t(r)].num_tokens());
  // (server, origin, doc) -> the keys its tasks there read (the trainer's spans)
  std::map<std::tuple<int32_t, int32_t, int32_t>, KeySpans> reads;
  const double H = double(mc_.num_attention_heads), f = sizeof(float);
  for (const CadTask& t : plan.tasks) {
    const AttentionTask task = t.attention_task(0, 0, 0);
    const double c = attn_(task);
    lane.work[size_t(t.server)] += c;
    served[size_t(t.server)] += double(attention_pairs(task, mc_.attention_mask));
    if (t.server == t.origin) {
      lane.own[size_t(t.server)] += c;
      continue;
    }
    // forward: Q there, O and LSE back; backward: Q, O, dO and LSE there, dQ back
    const double rows = double(t.q_len);
    ship(0, t.origin, t.server, rows * double(qd_) * f);
    ship(1, t.server, t.origin, rows * (double(qd_) + H) * f);
    ship(2, t.origin, t.server, rows * (3.0 * double(qd_) + H) * f);
    ship(3, t.server, t.origin, rows * double(qd_) * f);
    add_key_spans(t.keys(), reads[{t.server, t.origin, t.doc}]);
  }
  for (auto& [key, spans] : reads) {
    merge_spans(spans);
    int64_t rows = 0;  // rows of the union
    for (const auto& [a, b] : spans) rows += b - a;
    // K, V there in forward and again in backward, dK, dV back
    const double kv = double(rows) * 2.0 * double(kvd_) * f;
    const int server = std::get<0>(key), origin = std::get<1>(key);
    ship(0, origin, server, kv);
    ship(2, origin, server, kv);
    ship(3, server, origin, kv);
  }
  // a phase takes the larger of what the rank sends and receives in it (both ways at
  // once), the phases one after the other; four rounds of messages at the latency of
  // the farthest link the rank uses
  for (int r = 0; r < n; ++r) {
    std::array<double, 2> seconds{0.0, 0.0}, bytes{0.0, 0.0}, waited{0.0, 0.0};
    for (int ph = 0; ph < 4; ++ph)
      for (const size_t k : {size_t(0), size_t(1)}) {
        const double most = std::max(sent[size_t(ph)][k][size_t(r)], received[size_t(ph)][k][size_t(r)]);
        waited[k] += most;
        seconds[k] += most / net_.bandwidth_of(k == 1);
        bytes[k] += sent[size_t(ph)][k][size_t(r)];
      }
    const bool across = waited[1] > 0;  // the rank sends or receives across hosts
    const double rounds = n > 1 ? 4.0 : 0.0;
    lane.comm[size_t(r)] = seconds[0] + (across ? 0.0 : rounds * net_.latency);
    if (across) lane.remote[size_t(r)] = seconds[1] + rounds * net_.host_latency;
    rank_bytes[size_t(r)] += bytes[0] + bytes[1];
  }
  return lane;
}

CadLayer CadLayerCost::cost(const std::vector<LocalBatch>& batches, std::vector<double>& served) const {
  const int n = int(batches.size());
  // the groups: the batches themselves, or their two nano-batches
  std::vector<std::vector<LocalBatch>> groups(static_cast<size_t>(lanes_));
  for (const LocalBatch& b : batches) {
    if (lanes_ == 2) {
      const std::array<LocalBatch, 2> h = split_nano_batches(b);
      groups[0].push_back(h[0]);
      groups[1].push_back(h[1]);
    } else {
      groups[0].push_back(b);
    }
  }
  CadLayer out;
  out.rank_bytes.assign(size_t(n), 0.0);
  std::vector<LaneCost> lanes;
  for (int g = 0; g < lanes_; ++g) lanes.push_back(lane_cost(groups[size_t(g)], served, out.rank_bytes));
  for (double b : out.rank_bytes) out.bytes += b;
  out.busy.assign(size_t(n), 0.0);
  for (int r = 0; r < n; ++r) {
    double t = 0;
    for (int g = 0; g < lanes_; ++g) {
      const LaneCost& l = lanes[size_t(g)];
      const double hide = lanes_ == 2 ? lanes[size_t(1 - g)].linear[size_t(r)] : l.own[size_t(r)];
      t += l.linear[size_t(r)] + l.work[size_t(r)] + std::max(0.0, l.comm[size_t(r)] - hide) + l.remote[size_t(r)];
      out.busy[size_t(r)] += l.linear[size_t(r)] + l.work[size_t(r)];
    }
    out.seconds = std::max(out.seconds, t);
  }
  return out;
}

Network network_of(const SimulateOptions& o) {
  Network net = Network::one_host(std::max(1, o.ranks / std::max(1, o.hosts)), o.bandwidth_gbps * 1e9,
                                  o.latency_us * 1e-6);
  if (o.host_bandwidth_gbps > 0) net.host_bandwidth = o.host_bandwidth_gbps * 1e9;
  if (o.host_latency_us >= 0) net.host_latency = o.host_latency_us * 1e-6;
  return net;
}

double allreduce_tail_seconds(const RunPlan& plan, const LlamaConfig& mc, int stages,
                              const std::vector<int>& reducers, const Network& net) {
  const double n = double(reducers.size());
  if (n <= 1) return 0.0;
  const bool across = net.spans_hosts(reducers);
  const double grad_bytes = double(build_llama_table(mc).total()) * sizeof(float) / stages;
  const double tail = plan.reduction.overlap && !across
                          ? std::min(grad_bytes, double(plan.reduction.bucket_size) * sizeof(float))
                          : grad_bytes;
  return net.seconds(2.0 * (n - 1) / n * tail, 2.0 * (n - 1), across);
}

namespace {
// The step's global batch as the step model reads it (sequence i of the step is global[i]).
SequenceAt sequences_of(const std::vector<PackedBatch>& global) {
  return [&global](int64_t i) { return global[size_t(i)]; };
}
}  // namespace

// Replica d's micro-batches of a step's global batch, as the trainer takes them
// (src/train/step_model.h): [m][c], micro-batch m's piece on context-parallel rank c.
std::vector<std::vector<LocalBatch>> replica_pieces(const RunPlan& plan, const std::vector<PackedBatch>& global,
                                                    int d) {
  std::vector<std::vector<LocalBatch>> pieces(size_t(plan.micro_batches));
  for (int c = 0; c < plan.layout.cp; ++c) {
    std::vector<LocalBatch> local = step_micro_batches(plan, sequences_of(global), 0, d, c);
    for (size_t m = 0; m < local.size(); ++m) pieces[m].push_back(std::move(local[m]));
  }
  return pieces;
}

// Every rank's micro-batches of a step (without pipeline parallelism), as the trainer
// takes them (src/train/step_model.h): rank d * cp + c holds piece c of replica d's.
std::vector<std::vector<LocalBatch>> ranks_micro_batches(const RunPlan& plan,
                                                         const std::vector<PackedBatch>& global) {
  std::vector<std::vector<LocalBatch>> local;
  for (int r = 0; r < plan.world; ++r)
    local.push_back(step_micro_batches(plan, sequences_of(global), 0, r / plan.layout.cp, r % plan.layout.cp));
  return local;
}

namespace {

constexpr double kF32 = 4.0;  // bytes of what the exchanges keep in fp32 (dK/dV sums, LSE)
double wire_bytes(const RunPlan& plan) { return plan.precision == Precision::bf16 ? 2.0 : 4.0; }

// a ring of `ranks` over blocks of `rows` rows and `kv` K (and V) elements per row
double ring_bytes(const RunPlan& plan, int ranks, double rows, double kv) {
  const double n = rows * kv;
  return 2.0 * double(ranks - 1) * 2.0 * n * wire_bytes(plan) + double(ranks) * 2.0 * n * kF32;
}

// the ranks c0, c0 + step, ... (count of them) of the group `ranks`: on more than one host?
bool spans_hosts(const Network& net, const std::vector<int>& ranks, int c0, int step, int count) {
  std::vector<int> members;
  for (int i = 0; i < count; ++i) members.push_back(ranks[size_t(c0 + i * step)]);
  return net.spans_hosts(members);
}

// cp_layer_cost of Ulysses (U = cp) and the hybrid (U x R)
void ulysses_layer_cost(const RunPlan& plan, const std::vector<LocalBatch>& pieces,
                        const std::vector<double>& own_attention, const Calibration& cal, const Network& net,
                        const std::vector<int>& ranks, CpLayer& out) {
  const int cp = plan.layout.cp;
  const LlamaConfig& mc = plan.model;
  const double hd = double(mc.head_dim()), H = double(mc.num_attention_heads), KV = double(mc.num_key_value_heads);
  const double wire = wire_bytes(plan);
  const int U = plan.cp_ulysses, R = cp / U;
  const double hq = H / U, hk = KV >= U ? KV / U : 1.0;
  // bytes per row: out (a rank's own rows to each other member) forward Q, K, V and
  // backward Q, K, V, O, dO + LSE; back (each other member's rows to it) forward O + LSE
  // and backward dQ, dK, dV
  const double out_row = (hq + 2 * hk) * hd * wire + (3 * hq + 2 * hk) * hd * wire + hq * kF32;
  const double back_row = (hq * hd + hq) * kF32 + (hq + 2 * hk) * hd * kF32;
  double total = 0;  // over the group's ranks
  for (int g = 0; g < R; ++g) {
    double group_attention = 0, group_rows = 0;
    for (int j = 0; j < U; ++j) {
      group_attention += own_attention[size_t(g * U + j)];
      group_rows += double(pieces[size_t(g * U + j)].num_tokens());
    }
    const double share = group_attention / U;  // its heads of the group's attention
    const double ring = R > 1 ? ring_bytes(plan, R, group_rows, hk * hd) : 0.0;
    // the all-to-all inside the group, and the ring of member j across the groups
    const bool a2a_across = spans_hosts(net, ranks, g * U, 1, U);
    for (int j = 0; j < U; ++j) {
      const int c = g * U + j;
      const bool ring_across = R > 1 && spans_hosts(net, ranks, j, U, R);
      const double ring_time = R > 1 ? net.seconds(ring, 3.0 * (R - 1), ring_across) : 0.0;
      const double rows = double(pieces[size_t(c)].num_tokens());
      const double a2a = double(U - 1) * rows * out_row + (group_rows - rows) * back_row;
      out.busy[size_t(c)] = cal.linear_per_token_layer * rows + share;
      out.time[size_t(c)] = out.busy[size_t(c)] + net.seconds(a2a, 4.0 * (U - 1), a2a_across) +
                            (ring_across ? ring_time : std::max(0.0, ring_time - share));
      total += a2a + ring;
    }
  }
  out.bytes = total / cp;  // per rank, as the ring's
}

}  // namespace

// What each rank of the group sends in one layer's forward and backward exchanges,
// exactly as ContextParallelAttention counts it ([2c]: forward, [2c + 1]: backward).
//   ring, allgather  to each other rank the rows of K and V it reads (data/key_runs.h),
//                    in the wire precision, forward and again backward, and back the
//                    dK/dV of the rows it read (fp32)
//   double_ring      blocks relayed: a rank sends the block in hand at every inner step
//                    but an outer step's last, and at an outer step's first the outer
//                    pass, each with the rows the ranks ahead read; backward the same
//                    plus every step's dK/dV accumulator with the rows read so far
//                    (data/relay_rows.h, the trainer's plan)
std::vector<double> cp_rank_bytes(const RunPlan& plan, const std::vector<LocalBatch>& pieces) {
  const int cp = plan.layout.cp;
  const double w = double(plan.model.num_key_value_heads) * double(plan.model.head_dim());
  const double wire = wire_bytes(plan);
  std::vector<double> out(size_t(2 * cp), 0.0);
  if (cp <= 1) return out;
  std::vector<std::vector<DocPiece>> group;
  for (const LocalBatch& b : pieces) group.push_back(b.pieces);
  const AttentionMask& mask = plan.model.attention_mask;
  if (plan.cp_comm != CpComm::double_ring) {
    KeyExchange x;
    for (int c = 0; c < cp; ++c) {
      x.plan(group, c, mask);
      const double to = double(x.rows_to()), from = double(x.rows_from());
      out[size_t(2 * c)] = 2.0 * to * w * wire;
      out[size_t(2 * c + 1)] = 2.0 * to * w * wire + 2.0 * from * w * kF32;
    }
    return out;
  }
  for (int c = 0; c < cp; ++c) {
    const RelayPlan relay = plan_relay(group, plan.cp_inner_ring, c, mask);
    double kv = 0, acc = 0;
    for (const RelayStep& st : relay.steps) {
      if (st.inner) kv += 2.0 * double(rows_in(st.inner_rows)) * w * wire;
      if (st.outer) kv += 2.0 * double(rows_in(st.outer_rows)) * w * wire;
      acc += 2.0 * double(rows_in(st.acc_send)) * w * kF32;
    }
    out[size_t(2 * c)] = kv;
    out[size_t(2 * c + 1)] = kv + acc;
  }
  return out;
}

CpLayer cp_layer_cost(const RunPlan& plan, const std::vector<LocalBatch>& pieces, double tokens,
                      const AttentionCost& attn, const Calibration& cal, const Network& net,
                      const std::vector<int>& ranks) {
  const int cp = plan.layout.cp;
  CpLayer out;
  out.busy.assign(size_t(cp), 0.0);
  out.time.assign(size_t(cp), 0.0);
  std::vector<double> own_attention(size_t(cp), 0.0);
  for (int c = 0; c < cp; ++c)
    for (const DocPiece& piece : pieces[size_t(c)].pieces) own_attention[size_t(c)] += attn(piece);
  if (cp <= 1) {
    for (int c = 0; c < cp; ++c) {
      out.busy[size_t(c)] = cal.linear_per_token_layer * double(pieces[size_t(c)].num_tokens()) + own_attention[size_t(c)];
      out.time[size_t(c)] = out.busy[size_t(c)];
    }
    return out;
  }
  if (plan.cp_comm == CpComm::ring || plan.cp_comm == CpComm::double_ring || plan.cp_comm == CpComm::allgather) {
    const std::vector<double> sent = cp_rank_bytes(plan, pieces);
    for (int c = 0; c < cp; ++c) {
      out.rank_forward.push_back(sent[size_t(2 * c)]);
      out.rank_backward.push_back(sent[size_t(2 * c + 1)]);
      out.bytes += (sent[size_t(2 * c)] + sent[size_t(2 * c + 1)]) / cp;
    }
    // a ring (or double ring) that crosses hosts anywhere runs at the host link, exposed
    const bool across = spans_hosts(net, ranks, 0, 1, cp);
    const double transfer = net.seconds(out.bytes, 3.0 * (cp - 1), across);
    for (int c = 0; c < cp; ++c) {
      const double a = own_attention[size_t(c)];
      out.busy[size_t(c)] = cal.linear_per_token_layer * double(pieces[size_t(c)].num_tokens()) + a;
      const bool hidden = plan.cp_comm != CpComm::allgather && !across;
      out.time[size_t(c)] = out.busy[size_t(c)] + (hidden ? std::max(0.0, transfer - a) : transfer);
    }
    return out;
  }
  ulysses_layer_cost(plan, pieces, own_attention, cal, net, ranks, out);
  return out;
}

// One replica's StageCosts: per stage and micro-batch the group's forward and backward
// seconds (the slowest rank's layer time, exchange included) and each piece's own
// compute; pieces[m][c] is micro-batch m's piece on context-parallel rank c, holding
// seq_tokens[m] tokens in all. Adds the replica's tokens, compute and exchange bytes to
// p, and its attention pairs to pairs (per rank_of(stage, piece)).
StageCosts replica_stage_costs(const RunPlan& plan, const std::vector<std::vector<LocalBatch>>& pieces,
                               const std::vector<double>& seq_tokens, const AttentionCost& attn,
                               const Calibration& cal, const SimulateOptions& o,
                               const std::function<int(int, int)>& rank_of, StepPrediction& p,
                               std::vector<double>& pairs) {
  const int pp = plan.layout.pp, cp = plan.layout.cp;
  const Network net = network_of(o);
  const size_t S = size_t(pp), M = pieces.size(), P = size_t(cp);
  // each stage's context-parallel group (its links may differ from stage to stage)
  std::vector<std::vector<int>> group(S);
  for (int s = 0; s < pp; ++s)
    for (int c = 0; c < cp; ++c) group[size_t(s)].push_back(rank_of(s, c));
  StageCosts t;
  t.fwd.assign(S, std::vector<double>(M));
  t.bwd = t.fwd;
  t.own_f.assign(S, std::vector<std::vector<double>>(M, std::vector<double>(P)));
  t.own_b = t.own_f;
  for (size_t m = 0; m < M; ++m) {
    double head = 0;
    std::vector<double> head_c(P);
    for (int c = 0; c < cp; ++c) {
      const LocalBatch& l = pieces[m][size_t(c)];
      head_c[size_t(c)] = cal.head_per_token * double(l.num_tokens());
      head = std::max(head, head_c[size_t(c)]);
      p.tokens += l.num_tokens();
      for (int s = 0; s < pp; ++s) {
        pairs[size_t(rank_of(s, c))] += double(l.attention_pairs(plan.model.attention_mask));
        p.rank_tokens[size_t(rank_of(s, c))] += double(l.num_tokens());
      }
    }
    for (int s = 0; s < pp; ++s) {
      const CpLayer cpl = cp_layer_cost(plan, pieces[m], seq_tokens[m], attn, cal, net, group[size_t(s)]);
      const double layer = *std::max_element(cpl.time.begin(), cpl.time.end());
      const double layers = double(plan.stages[size_t(s)].num_layers());
      const bool last = s == pp - 1;
      t.fwd[size_t(s)][m] = layers * layer / 3.0 + (last ? head : 0.0);
      t.bwd[size_t(s)][m] = 2.0 * layers * layer / 3.0;
      for (size_t c = 0; c < P; ++c) {
        t.own_f[size_t(s)][m][c] = layers * cpl.busy[c] / 3.0 + (last ? head_c[c] : 0.0);
        t.own_b[size_t(s)][m][c] = 2.0 * layers * cpl.busy[c] / 3.0;
        p.compute[size_t(rank_of(s, int(c)))] += t.own_f[size_t(s)][m][c] + t.own_b[size_t(s)][m][c];
        p.exposed_per_rank += layers * (cpl.time[c] - cpl.busy[c]) / double(o.ranks);
      }
      p.bytes_per_rank += cpl.bytes * layers * double(cp) / double(o.ranks);
      // a layer that recomputes in full runs its forward exchange again
      const StageSpec& st = plan.stages[size_t(s)];
      int full = 0;
      for (int l = st.first_layer; l < st.end_layer; ++l) full += plan.recompute.of(l) == Recompute::full;
      if (cp > 1 && cpl.rank_forward.empty()) p.rank_bytes_exact = false;
      for (size_t c = 0; c < cpl.rank_forward.size(); ++c)
        p.rank_bytes[size_t(rank_of(s, int(c)))] +=
            layers * (cpl.rank_forward[c] + cpl.rank_backward[c]) + double(full) * cpl.rank_forward[c];
    }
  }
  return t;
}

}  // namespace lct
