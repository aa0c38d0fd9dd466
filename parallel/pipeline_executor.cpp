#include "parallel/pipeline_executor.h"

#include <chrono>
#include <stdexcept>

#include "data/nano_batches.h"
#include "parallel/mpi_util.h"

namespace lct {
namespace {
int count_of(int64_t n) { return mpi_count(n, "a pipeline message"); }
}  // namespace

PipelineExecutor::PipelineExecutor(LlamaModel& model, MPI_Comm pp_comm, int pp, int stage,
                                   PipelineSchedule schedule, int lanes)
    : model_(model), comm_(pp_comm), pp_(pp), stage_(stage), schedule_(schedule), lanes_(lanes) {
  if (pp > 1 && pp_comm == MPI_COMM_NULL)
    throw std::invalid_argument("pipeline executor: pp > 1 needs a pipeline communicator");
  if (lanes != 1 && lanes != 2) throw std::invalid_argument("pipeline executor: lanes is 1 or 2");
  dummy_.group_pieces = {{}};
}

int PipelineExecutor::message_count(const ActivationSlot& slot) const {
  return count_of(slot.tokens() * model_.config().hidden_size);
}

void PipelineExecutor::acquire(const std::vector<LocalBatch>& batches, int mb) {
  // Keep the pool at the schedule's depth: rather than growing it, finish micro-batches
  // whose backward is done and whose last sends are still draining.
  SlotPool& pool = model_.slot_pool();
  if (pool.free_count() < lanes_) release_finished(false);
  for (InFlight& f : flight_)
    if (pool.free_count() < lanes_ && f.slots[0] && f.done) free_slot(f, true);
  InFlight& f = flight_[size_t(mb)];
  for (int i = 0; i < lanes_; ++i)  // named lanes x mb + lane to the placement
    f.slots[i] = &model_.begin(lanes_ == 2 ? nano_[size_t(mb)][size_t(i)] : batches[size_t(mb)],
                               lanes_ * mb + i, i);
}

int PipelineExecutor::tag(int mb, int lane, bool gradient) const {
  return 2 * (lanes_ * mb + lane) + (gradient ? 1 : 0);
}

uint16_t* PipelineExecutor::wire(int mb, int lane, Wire which, int64_t values) {
  std::vector<uint16_t>& w = wire_[size_t(mb)][size_t(lane * 4 + which)];
  if (int64_t(w.size()) < values) w.resize(size_t(values));
  return w.data();
}

// A micro-batch's (lane's) message: T x C values of `rows`, to the next stage (forward)
// or the previous one (gradient); bf16 through its wire buffer.
void PipelineExecutor::post_send(float* rows, int mb, int lane, bool gradient, MPI_Request* request) {
  const ActivationSlot& s = *flight_[size_t(mb)].slots[lane];
  const int count = message_count(s), to = gradient ? stage_ - 1 : stage_ + 1;
  if (bf16_wire_) {
    uint16_t* w = wire(mb, lane, gradient ? backward_out : forward_out, count);
    to_bf16_bits(rows, count, w);
    MPI_Isend(w, count, MPI_UINT16_T, to, tag(mb, lane, gradient), comm_, request);
  } else {
    MPI_Isend(rows, count, MPI_FLOAT, to, tag(mb, lane, gradient), comm_, request);
  }
  bytes_sent_ += int64_t(count) * int64_t(bf16_wire_ ? sizeof(uint16_t) : sizeof(float));
}

void PipelineExecutor::post_recv(SavedRows rows, int mb, int lane, bool gradient, MPI_Request* request) {
  const ActivationSlot& s = *flight_[size_t(mb)].slots[lane];
  const int count = message_count(s), from = gradient ? stage_ + 1 : stage_ - 1;
  if (rows.bf16)  // kept as bf16 bits (a bf16 run's stage input): straight into the slot
    MPI_Irecv(rows.bf16, count, MPI_UINT16_T, from, tag(mb, lane, gradient), comm_, request);
  else if (bf16_wire_)
    MPI_Irecv(wire(mb, lane, gradient ? backward_in : forward_in, count), count, MPI_UINT16_T, from,
              tag(mb, lane, gradient), comm_, request);
  else
    MPI_Irecv(rows.f32, count, MPI_FLOAT, from, tag(mb, lane, gradient), comm_, request);
}

void PipelineExecutor::widen_received(SavedRows rows, int mb, int lane, bool gradient) {
  if (!bf16_wire_ || rows.bf16) return;
  const int count = message_count(*flight_[size_t(mb)].slots[lane]);
  from_bf16_bits(wire(mb, lane, gradient ? backward_in : forward_in, count), count, rows.f32);
}

void PipelineExecutor::post_recv_forward(const std::vector<LocalBatch>& batches, int mb) {
  InFlight& f = flight_[size_t(mb)];
  acquire(batches, mb);
  for (int i = 0; i < lanes_; ++i)
    post_recv(model_.stage_input(*f.slots[i]), mb, i, false, &f.recv_forward[i]);
  f.forward_posted = true;
  next_forward_post_ = mb + 1;
}

void PipelineExecutor::post_recv_backward(int mb) {
  InFlight& f = flight_[size_t(mb)];
  for (int i = 0; i < lanes_; ++i)
    post_recv({model_.residual_grad(*f.slots[i]), nullptr}, mb, i, true, &f.recv_backward[i]);
  f.backward_posted = true;
}

void PipelineExecutor::stage_forward(ActivationSlot* const* slots, AttentionPlacement& placement) {
  if (lanes_ == 2)
    model_.stage_forward_pair(*slots[0], *slots[1], placement);
  else
    model_.stage_forward(*slots[0], placement);
}

void PipelineExecutor::stage_backward(ActivationSlot* const* slots, AttentionPlacement& placement) {
  if (lanes_ == 2)
    model_.stage_backward_pair(*slots[0], *slots[1], placement);
  else
    model_.stage_backward(*slots[0], placement);
}

// A dummy runs on the executor's own empty slots (never the pool's, whose slots and
// peak figures are the micro-batches'), and only when the placement needs every rank.
void PipelineExecutor::run_dummy(const PipeAction& a, AttentionPlacement& placement) {
  if (!placement.needs_every_rank()) return;
  ActivationSlot* slots[2] = {nullptr, nullptr};
  for (int i = 0; i < lanes_; ++i) {
    model_.prepare(dummy_slots_[i], dummy_, lanes_ * a.tick + i, i);
    dummy_slots_[i].backward_round = lanes_ * a.tick + i;
    slots[i] = &dummy_slots_[i];
  }
  if (a.op == PipeOp::forward)
    stage_forward(slots, placement);
  else
    stage_backward(slots, placement);
}

double PipelineExecutor::wait_for(MPI_Request& request) {
  const auto t0 = SteadyClock::now();
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  return waited_since(t0, "pipeline receive");
}

// Returns a finished micro-batch's slots to the pool once its sends have completed:
// waiting for them, or only if they already have.
void PipelineExecutor::free_slot(InFlight& f, bool wait) {
  bool done = true;
  for (int i = 0; i < lanes_; ++i)
    for (MPI_Request* r : {&f.send_forward[i], &f.send_backward[i]}) {
      if (wait) {
        const auto t0 = SteadyClock::now();
        MPI_Wait(r, MPI_STATUS_IGNORE);
        send_wait_ += waited_since(t0, "pipeline send");
      } else if (*r != MPI_REQUEST_NULL) {
        int d = 0;
        MPI_Test(r, &d, MPI_STATUS_IGNORE);
        done = done && d;
      }
    }
  if (!done) return;
  for (ActivationSlot*& s : f.slots)
    if (s) model_.end(*s), s = nullptr;
}

void PipelineExecutor::release_finished(bool wait) {
  for (InFlight& f : flight_)
    if (f.slots[0] && f.done) free_slot(f, wait);
}

void PipelineExecutor::progress() {
  if (pp_ == 1) return;
  for (InFlight& f : flight_)
    for (int i = 0; i < lanes_; ++i)
      for (MPI_Request* r : {&f.send_forward[i], &f.send_backward[i], &f.recv_forward[i],
                             &f.recv_backward[i]})
        if (*r != MPI_REQUEST_NULL) {
          int done = 0;
          MPI_Test(r, &done, MPI_STATUS_IGNORE);
        }
}

void PipelineExecutor::run_forward(const PipeAction& a, const std::vector<LocalBatch>& batches,
                                   float grad_scale, AttentionPlacement& placement, CrossEntropyStats& loss) {
  InFlight& f = flight_[size_t(a.micro_batch)];
  if (!f.slots[0]) acquire(batches, a.micro_batch);
  if (a.tick >= 0)  // CAD plans the tick over all stages
    for (int i = 0; i < lanes_; ++i) f.slots[i]->round = lanes_ * a.tick + i;
  stage_forward(f.slots, placement);
  // the last stage computes the loss and its gradient (into the slot's dx) with the
  // forward: 1F1B and ticks run this micro-batch's backward next anyway, and GPipe
  // keeps the slot until then, so no logits are ever kept
  if (stage_ == pp_ - 1)
    for (int i = 0; i < lanes_; ++i) {
      const CrossEntropyStats l = model_.head_forward_backward(*f.slots[i], grad_scale, true);
      loss.loss_sum += l.loss_sum;
      loss.targets += l.targets;
      loss.answers += l.answers;
      loss.answers_correct += l.answers_correct;
    }
}

void PipelineExecutor::run_backward(const PipeAction& a, bool last_backward, GradReducer& reducer,
                                    AttentionPlacement& placement) {
  InFlight& f = flight_[size_t(a.micro_batch)];
  // gradients become final during the last micro-batch's backward: reduce them over
  // data-parallel ranks bucket by bucket as they do
  if (last_backward && reducer.active()) {
    reducer.begin(model_.grads.data());
    model_.grads_final_hook = [&reducer](int64_t offset) { reducer.grads_final_from(offset); };
  }
  if (a.tick >= 0)  // a backward tick is planned anew
    for (int i = 0; i < lanes_; ++i) f.slots[i]->backward_round = lanes_ * a.tick + i;
  stage_backward(f.slots, placement);
  model_.grads_final_hook = nullptr;
  if (stage_ == 0) f.done = true;  // nothing to send back
}

void PipelineExecutor::run_action(const PipeAction& a, int m, const std::vector<LocalBatch>& batches,
                                  float grad_scale, GradReducer& reducer, AttentionPlacement& placement,
                                  PipelineStepStats& st) {
  InFlight& f = flight_[size_t(a.micro_batch)];
  switch (a.op) {
    case PipeOp::recv_forward:
      if (!f.forward_posted) post_recv_forward(batches, a.micro_batch);
      for (int i = 0; i < lanes_; ++i) {
        st.recv_wait_seconds += wait_for(f.recv_forward[i]);
        widen_received(model_.stage_input(*f.slots[i]), a.micro_batch, i, false);
      }
      break;
    case PipeOp::forward:
      run_forward(a, batches, grad_scale, placement, st.loss);
      break;
    case PipeOp::send_forward:
      for (int i = 0; i < lanes_; ++i)
        post_send(model_.stage_output(*f.slots[i]), a.micro_batch, i, false, &f.send_forward[i]);
      post_recv_backward(a.micro_batch);  // its gradient can land in dx from now on
      break;
    case PipeOp::recv_backward:
      if (!f.backward_posted) post_recv_backward(a.micro_batch);
      for (int i = 0; i < lanes_; ++i) {
        st.recv_wait_seconds += wait_for(f.recv_backward[i]);
        widen_received({model_.residual_grad(*f.slots[i]), nullptr}, a.micro_batch, i, true);
      }
      break;
    case PipeOp::backward:
      run_backward(a, a.micro_batch == m - 1, reducer, placement);
      break;
    case PipeOp::send_backward:
      for (int i = 0; i < lanes_; ++i)
        post_send(model_.residual_grad(*f.slots[i]), a.micro_batch, i, true, &f.send_backward[i]);
      f.done = true;
      break;
  }
}

PipelineStepStats PipelineExecutor::run(const std::vector<LocalBatch>& batches, float grad_scale,
                                        GradReducer& reducer, AttentionPlacement& placement,
                                        MPI_Comm tied_comm, const ArenaRange& tied_range) {
  const int m = int(batches.size());
  if (m != micro_batches_) {
    actions_ = pipeline_actions(schedule_, pp_, stage_, m);
    micro_batches_ = m;
  }
  flight_.assign(size_t(m), InFlight{});
  if (wire_.size() < size_t(m)) wire_.resize(size_t(m));  // (grow-only: kept across steps)
  bf16_wire_ = model_.precision() == Precision::bf16;
  bytes_sent_ = 0;
  if (lanes_ == 2) {
    nano_.resize(size_t(m));
    for (int mb = 0; mb < m; ++mb) nano_[size_t(mb)] = split_nano_batches(batches[size_t(mb)]);
  }
  next_forward_post_ = 0;
  send_wait_ = 0;
  model_.slot_pool().reset_peak();
  PipelineStepStats st;
  const auto t_start = SteadyClock::now();
  model_.between_phases = [this, &placement] {
    progress();
    placement.progress();
  };

  for (const PipeAction& a : actions_) {
    if (a.micro_batch < 0) {  // a tick's dummy: no tokens, it only serves attention
      run_dummy(a, placement);
      continue;
    }
    run_action(a, m, batches, grad_scale, reducer, placement, st);
    if (a.op == PipeOp::backward || a.op == PipeOp::send_backward) release_finished(false);
    // ask for the next micro-batch's activations early when a slot is free anyway
    if (stage_ > 0 && next_forward_post_ < m && model_.slot_pool().free_count() >= lanes_ &&
        !flight_[size_t(next_forward_post_)].forward_posted)
      post_recv_forward(batches, next_forward_post_);
  }
  model_.between_phases = nullptr;
  release_finished(true);
  st.peak_slots = model_.slot_pool().peak_in_use();
  st.peak_activation_bytes = model_.slot_pool().peak_bytes();
  st.seconds = seconds_since(t_start);
  st.send_wait_seconds = send_wait_;
  st.bytes_sent = bytes_sent_;

  reducer.finish();
  // Tied embeddings: the first stage's embedding and the last stage's head are two
  // copies of one matrix; each holds part of its gradient, so both take the sum (of two
  // addends: the same on both ranks bit for bit) and stay identical after the update.
  if (tied_comm != MPI_COMM_NULL && tied_range.end > tied_range.begin)
    MPI_Allreduce(MPI_IN_PLACE, model_.grads.data() + tied_range.begin,
                  count_of(tied_range.end - tied_range.begin), MPI_FLOAT, MPI_SUM, tied_comm);
  return st;
}

void gather_to_first_stage(MPI_Comm pp_comm, int pp, int stage,
                           const std::vector<std::vector<ArenaRange>>& ranges_by_stage,
                           const std::vector<float*>& arenas) {
  if (pp == 1 || pp_comm == MPI_COMM_NULL) return;
  for (int s = 1; s < pp; ++s) {
    for (const ArenaRange& r : ranges_by_stage[size_t(s)])
      for (size_t a = 0; a < arenas.size(); ++a) {
        const int count = count_of(r.end - r.begin), tag = int(a);
        if (stage == s)
          MPI_Send(arenas[a] + r.begin, count, MPI_FLOAT, 0, tag, pp_comm);
        else if (stage == 0)
          MPI_Recv(arenas[a] + r.begin, count, MPI_FLOAT, s, tag, pp_comm, MPI_STATUS_IGNORE);
      }
  }
}

}  // namespace lct
