#include "parallel/ulysses_attention.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "compute/parallel_for.h"
#include "parallel/collectives.h"
#include "parallel/context_parallel.h"
#include "parallel/mpi_util.h"
#include "parallel/process_grid.h"

namespace lct {
namespace {
int64_t rows_of(const std::vector<DocPiece>& pieces) {
  int64_t n = 0;
  for (const DocPiece& p : pieces) n += p.len;
  return n;
}
}  // namespace

UlyssesAttention::UlyssesAttention(MPI_Comm cp_comm, int ulysses) : cp_comm_(cp_comm), U_(ulysses) {
  if (cp_comm_ == MPI_COMM_NULL) throw std::invalid_argument("Ulysses attention needs a cp communicator");
  int rank = 0, size = 1;
  MPI_Comm_rank(cp_comm_, &rank);
  MPI_Comm_size(cp_comm_, &size);
  if (U_ < 1 || size % U_ != 0)
    throw std::invalid_argument("Ulysses attention: " + std::to_string(U_) + " ranks per all-to-all group do not divide the " +
                                std::to_string(size) + " ranks of the context-parallel group");
  R_ = size / U_;
  u_ = rank % U_;
  group_ = rank / U_;
  // all-to-all groups: consecutive cp ranks; rings: the ranks holding the same heads
  MPI_Comm_split(cp_comm_, group_, rank, &a2a_comm_);
  MPI_Comm_split(cp_comm_, u_, rank, &ring_comm_);
  bytes_per_second_ = probe_ring_bandwidth(a2a_comm_);
  if (R_ > 1) ring_ = std::make_unique<ContextParallelAttention>(ring_comm_, CpComm::ring);
}

UlyssesAttention::~UlyssesAttention() {
  ring_.reset();
  if (!mpi_active()) return;  // after MPI_Finalize the communicators are gone with it
  if (a2a_comm_ != MPI_COMM_NULL) MPI_Comm_free(&a2a_comm_);
  if (ring_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ring_comm_);
}

// The all-to-all is blocking: all of its time is exposed, nothing is hidden. The ring
// across groups (hybrid) reports its own exposed and hidden time.
PlacementStats UlyssesAttention::stats() const {
  PlacementStats s = own_stats_;
  if (ring_) {
    const PlacementStats r = ring_->stats();
    s.bytes_sent += r.bytes_sent;
    s.exposed_seconds += r.exposed_seconds;
    s.hidden_seconds += r.hidden_seconds;
  }
  return s;
}

void UlyssesAttention::reset_stats() {
  own_stats_ = {};
  if (ring_) ring_->reset_stats();
}

int64_t UlyssesAttention::slice_first_head(int member, bool kv) const {
  if (!kv) return member * hq_;
  return KV_ >= U_ ? member * hk_ : (member * hq_) / (H_ / KV_);
}

// This call's heads and union layout: my group's pieces sorted by (document, position),
// one union row after another, merged where they continue each other.
void UlyssesAttention::prepare(const AttentionInput& in) {
  const auto& group = in.batch.group_pieces;
  if (int(group.size()) != U_ * R_ || in.batch.cp_rank != group_ * U_ + u_)
    throw std::logic_error("Ulysses attention: the batch was split for another group");
  in_ = &in;
  H_ = in.params.num_heads;
  KV_ = in.params.num_kv_heads;
  hd_ = in.params.head_dim;
  if (H_ % U_ != 0 || (KV_ % U_ != 0 && U_ % KV_ != 0))
    throw std::logic_error("Ulysses attention: the heads do not split over the group (the run plan checks this)");
  hq_ = H_ / U_;
  hk_ = KV_ >= U_ ? KV_ / U_ : 1;
  params_ = in.params;
  params_.num_heads = int(hq_);
  params_.num_kv_heads = int(hk_);

  struct Ref {
    int32_t doc, pos;
    int member;
    const DocPiece* piece;
  };
  std::vector<Ref> refs;
  union_batch_.group_pieces.resize(size_t(R_));
  segments_.clear();
  for (int x = 0; x < R_; ++x) {
    refs.clear();
    for (int j = 0; j < U_; ++j)
      for (const DocPiece& p : group[size_t(x * U_ + j)]) refs.push_back({p.doc, p.pos, j, &p});
    std::sort(refs.begin(), refs.end(),
              [](const Ref& a, const Ref& b) { return a.doc != b.doc ? a.doc < b.doc : a.pos < b.pos; });
    std::vector<DocPiece>& out = union_batch_.group_pieces[size_t(x)];
    out.clear();
    int32_t row = 0;
    for (const Ref& r : refs) {
      const DocPiece& p = *r.piece;
      if (x == group_) segments_.push_back({r.member, p.row, row, p.len});
      if (!out.empty() && out.back().continued_by(p)) {
        out.back().len += p.len;
      } else {
        DocPiece u = p;
        u.row = row;
        out.push_back(u);
      }
      row += p.len;
    }
    if (x == group_) union_rows_ = row;
  }
  union_batch_.pieces = union_batch_.group_pieces[size_t(group_)];
  union_batch_.cp_rank = group_;
  union_batch_.sequence_tokens = in.batch.sequence_tokens;
  member_rows_.resize(size_t(U_));
  for (int j = 0; j < U_; ++j) member_rows_[size_t(j)] = rows_of(group[size_t(group_ * U_ + j)]);
  if (R_ == 1) {  // the group holds the whole sequence: whole documents (one piece per
                  // shared_question segment)
    const std::vector<DocPiece>& u = union_batch_.pieces;
    for (size_t i = 0; i < u.size(); ++i) {
      const bool starts = i == 0 || u[i - 1].doc != u[i].doc, ends = i + 1 == u.size() || u[i + 1].doc != u[i].doc;
      if ((starts ? u[i].pos != 0 : u[i].pos != u[i - 1].end()) || (ends && u[i].end() != u[i].doc_len))
        throw std::logic_error("Ulysses attention: a document is not whole after the all-to-all");
    }
    union_batch_.local_tasks(tasks_, in.params.mask);
  }
}

void UlyssesAttention::exchange(const std::vector<int>& send_bytes, const std::vector<int>& recv_bytes) {
  send_displs_.assign(size_t(U_), 0);
  recv_displs_.assign(size_t(U_), 0);
  // MPI's displacements are int too: the whole buffer, not only each message, must fit
  int64_t send_at = 0, recv_at = 0;
  for (int j = 1; j < U_; ++j) {
    send_at += send_bytes[size_t(j - 1)];
    recv_at += recv_bytes[size_t(j - 1)];
    send_displs_[size_t(j)] = mpi_count(send_at, "a Ulysses all-to-all buffer (bytes)");
    recv_displs_[size_t(j)] = mpi_count(recv_at, "a Ulysses all-to-all buffer (bytes)");
  }
  const auto t0 = SteadyClock::now();
  MPI_Alltoallv(send_.data(), send_bytes.data(), send_displs_.data(), MPI_BYTE, recv_.data(), recv_bytes.data(),
                recv_displs_.data(), MPI_BYTE, a2a_comm_);
  own_stats_.exposed_seconds += waited_since(t0, "context-parallel exchange");
  for (int j = 0; j < U_; ++j)
    if (j != u_) own_stats_.bytes_sent += send_bytes[size_t(j)];
}

namespace {
// n elements from fp32 src to the wire at dst (fp32, or bf16 bits), and back.
// (Rows are short: plain loops, no parallel region per row.)
void put(const float* src, int64_t n, bool bf16, unsigned char* dst) {
  if (bf16) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_bits(src[i]);
  } else {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
  }
}
void get(const unsigned char* src, int64_t n, bool bf16, float* dst, bool add) {
  if (bf16) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = add ? dst[i] + bf16_value(s[i]) : bf16_value(s[i]);
  } else if (add) {
    const float* s = reinterpret_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] += s[i];
  } else {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
  }
}
int wire_count(int64_t bytes) { return mpi_count(bytes, "a Ulysses all-to-all message (bytes)"); }
}  // namespace

// Local rows of every destination's heads out; every member's rows of my heads in, into
// the union rows. Per destination the message is field after field, rows in local order.
// Message sizes of one exchange of `fields`, and buffers to hold them: toward the union
// I send my rows to every member and receive each member's rows; back from it the
// reverse.
void UlyssesAttention::size_exchange(const std::vector<Field>& fields, bool toward_union) {
  int64_t row_bytes = 0;
  for (const Field& f : fields) row_bytes += slice_heads(f.kv) * f.per_head * (f.bf16 ? 2 : 4);
  const int64_t T = member_rows_[size_t(u_)];
  send_bytes_.resize(size_t(U_));
  recv_bytes_.resize(size_t(U_));
  int64_t total_send = 0, total_recv = 0;
  for (int j = 0; j < U_; ++j) {
    const int64_t mine = T * row_bytes, theirs = member_rows_[size_t(j)] * row_bytes;
    send_bytes_[size_t(j)] = wire_count(toward_union ? mine : theirs);
    recv_bytes_[size_t(j)] = wire_count(toward_union ? theirs : mine);
    total_send += send_bytes_[size_t(j)];
    total_recv += recv_bytes_[size_t(j)];
  }
  if (send_.size() < size_t(total_send)) send_.resize(size_t(total_send));
  if (recv_.size() < size_t(total_recv)) recv_.resize(size_t(total_recv));
}

void UlyssesAttention::local_side(const std::vector<Field>& fields, bool send) {
  const int64_t T = member_rows_[size_t(u_)];
  int64_t at = 0;
  for (int s = 0; s < U_; ++s)
    for (const Field& f : fields) {
      const int64_t w = slice_heads(f.kv) * f.per_head, off = slice_first_head(s, f.kv) * f.per_head;
      const int64_t eb = f.bf16 ? 2 : 4;
      parallel_for(T, T * w, [&](int64_t r) {
        if (send) put(f.local + r * f.width + off, w, f.bf16, send_.data() + at + r * w * eb);
        else get(recv_.data() + at + r * w * eb, w, f.bf16, f.local_out + r * f.width + off, f.add);
      });
      at += T * w * eb;
    }
}

void UlyssesAttention::union_side(const std::vector<Field>& fields, bool send) {
  int64_t at = 0;
  for (int j = 0; j < U_; ++j)
    for (const Field& f : fields) {
      const int64_t w = slice_heads(f.kv) * f.per_head, eb = f.bf16 ? 2 : 4;
      for (const Segment& g : segments_)
        if (g.member == j)
          for (int64_t r = 0; r < g.len; ++r) {
            float* rows = f.union_rows + (g.union_row + r) * w;
            if (send) put(rows, w, f.bf16, send_.data() + at + (g.local_row + r) * w * eb);
            else get(recv_.data() + at + (g.local_row + r) * w * eb, w, f.bf16, rows, false);
          }
      at += member_rows_[size_t(j)] * w * eb;
    }
}

void UlyssesAttention::to_union(const std::vector<Field>& fields) {
  size_exchange(fields, true);
  local_side(fields, true);
  exchange(send_bytes_, recv_bytes_);
  union_side(fields, false);
}

// The reverse: each member's rows of my heads back to it; my rows of every source's
// heads in (added in source order when `add`, so replicated KV heads sum the same way
// on every run).
void UlyssesAttention::from_union(const std::vector<Field>& fields) {
  size_exchange(fields, false);
  union_side(fields, true);
  exchange(send_bytes_, recv_bytes_);
  local_side(fields, false);
}

void UlyssesAttention::attend_forward(const float* q, const float* k, const float* v, float* out, float* lse) {
  if (!ring_) {
    attention_forward(params_, tasks_, q, k, v, out, lse);
    return;
  }
  const AttentionInput inner{params_, {}, union_batch_, in_->round, in_->starts_round, in_->lane, in_->recomputed};
  ring_->forward(inner, q, k, v, out, lse);
}

void UlyssesAttention::attend_backward(const float* q, const float* k, const float* v, const float* out,
                                       const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  if (!ring_) {
    attention_backward(params_, tasks_, q, k, v, out, lse, dout, dq, dk, dv);
    return;
  }
  const AttentionInput inner{params_, {}, union_batch_, in_->round, in_->starts_round, in_->lane, in_->recomputed};
  ring_->backward(inner, q, k, v, out, lse, dout, dq, dk, dv);
}

namespace {
float* sized(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}
}  // namespace

void UlyssesAttention::forward(const AttentionInput& in, const float* q, const float* k, const float* v,
                               float* out, float* lse) {
  prepare(in);
  const int64_t n = union_rows_, qw = hq_ * hd_, kw = hk_ * hd_;
  const bool b16 = in.params.precision == Precision::bf16;
  float *uq = sized(uq_, n * qw), *uk = sized(uk_, n * kw), *uv = sized(uv_, n * kw);
  float *uo = sized(uo_, n * qw), *ulse = sized(ulse_, n * hq_);
  to_union({{q, nullptr, H_ * hd_, hd_, false, b16, uq},
            {k, nullptr, KV_ * hd_, hd_, true, b16, uk},
            {v, nullptr, KV_ * hd_, hd_, true, b16, uv}});
  attend_forward(uq, uk, uv, uo, ulse);
  from_union({{nullptr, out, H_ * hd_, hd_, false, false, uo}, {nullptr, lse, H_, 1, false, false, ulse}});
  if (!in.recomputed) own_stats_.pairs_served += double(union_batch_.attention_pairs(in.params.mask)) * double(hq_) / double(H_);
}

void UlyssesAttention::backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                                float* dv) {
  prepare(in);
  const int64_t n = union_rows_, qw = hq_ * hd_, kw = hk_ * hd_;
  const bool b16 = in.params.precision == Precision::bf16;
  float *uq = sized(uq_, n * qw), *uk = sized(uk_, n * kw), *uv = sized(uv_, n * kw);
  float *uo = sized(uo_, n * qw), *ulse = sized(ulse_, n * hq_), *udo = sized(udo_, n * qw);
  to_union({{q, nullptr, H_ * hd_, hd_, false, b16, uq},
            {k, nullptr, KV_ * hd_, hd_, true, b16, uk},
            {v, nullptr, KV_ * hd_, hd_, true, b16, uv},
            {out, nullptr, H_ * hd_, hd_, false, b16, uo},
            {dout, nullptr, H_ * hd_, hd_, false, b16, udo},
            {lse, nullptr, H_, 1, false, false, ulse}});
  float *udq = sized(udq_, n * qw), *udk = sized(udk_, n * kw), *udv = sized(udv_, n * kw);
  std::fill(udq, udq + n * qw, 0.0f);
  std::fill(udk, udk + n * kw, 0.0f);
  std::fill(udv, udv + n * kw, 0.0f);
  attend_backward(uq, uk, uv, uo, ulse, udo, udq, udk, udv);
  from_union({{nullptr, dq, H_ * hd_, hd_, false, false, udq, true},
              {nullptr, dk, KV_ * hd_, hd_, true, false, udk, true},
              {nullptr, dv, KV_ * hd_, hd_, true, false, udv, true}});
}

}  // namespace lct
