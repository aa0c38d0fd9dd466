// Runs one stage's pipeline schedule (parallel/pipeline_schedule.h) for a training step.
//
// Activations go forward and their gradients back with MPI_Isend / MPI_Irecv between
// neighbouring stages of the pp communicator; the tag is 2 * micro-batch (+1 for
// gradients; see ping-pong below) and every message is T x C floats (T = the
// micro-batch's tokens, or a nano-batch's with ping-pong, known to both sides from the
// same packed batch). In a bf16 run (train.precision = bf16) they travel as bf16: the
// stage output and the residual gradient are rounded into a wire buffer before the send
// and widened into the slot after the receive, half the bytes; the receiving stage's
// residual stream then starts from bf16-rounded values (as Megatron-LM's bf16 pipeline
// sends them), which moves each value by at most 2^-9 of itself (tests/parallel/mpi_precision.sh
// bounds what that does to the run). Receives are posted early (MPI_Irecv) so data can arrive while
// the stage computes: a gradient's as soon as the micro-batch's activations have been
// sent on, the next micro-batch's activations as soon as free slots exist (never
// growing the pool for it); the receive action then only waits. Each micro-batch in
// flight holds one activation slot (two with ping-pong) from the model's pool: fp32 sends
// go straight out of the slot (stage output forward, residual gradient back) and
// receives land in it, so nothing is copied; bf16 ones go through the wire buffers
// (grow-only, four per micro-batch and lane, so a send never shares one with a receive). A slot returns to the pool when its backward is done and its sends have
// completed. OpenMPI does not progress requests on its own, so the model calls back
// between phases and the executor tests its requests there.
//
// The ticks schedule (for CAD) runs its dummy actions on an empty micro-batch in the
// executor's own slots (not the pool's), which computes nothing and only takes part in
// the placement's per-layer exchanges (skipped when the placement does not need every
// rank); each slot is named to the placement by its tick (AttentionInput::round).
//
// With pp = 1 the same executor runs the plain gradient-accumulation loop
// (forward, backward per micro-batch), so every layout uses one code path.
//
// Ping-pong (lanes = 2, CAD's attention.cad_pingpong): each micro-batch is split into
// two nano-batches (data/nano_batches.h) held in two slots, which the model runs
// interleaved per layer (LlamaModel::stage_forward_pair); between stages each nano-batch
// is its own message (tag 2 (2 mb + lane), + 1 for gradients).
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <vector>

#include "data/packing.h"
#include "model/llama.h"
#include "parallel/grad_reducer.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"

namespace lct {

struct PipelineStepStats {
  CrossEntropyStats loss;         // sums over this stage's micro-batches (last stage only)
  double seconds = 0;             // wall time of the whole schedule
  double recv_wait_seconds = 0;   // blocked on activations / gradients from neighbours
  double send_wait_seconds = 0;   // completing sends (slot reuse, end of step)
  double bubble_fraction() const { return seconds > 0 ? recv_wait_seconds / seconds : 0.0; }
  int peak_slots = 0;             // micro-batches held at once
  int64_t peak_activation_bytes = 0;  // peak slots x slot bytes
  int64_t bytes_sent = 0;         // activations and gradients sent to neighbouring stages
};

class PipelineExecutor {
 public:
  // pp_comm: this rank's pipeline group (MPI_COMM_NULL when pp = 1).
  PipelineExecutor(LlamaModel& model, MPI_Comm pp_comm, int pp, int stage,
                   PipelineSchedule schedule, int lanes = 1);

  // One step over `batches` (this rank's share of its dp replica's micro-batches, the
  // same on every stage of the pipeline). Gradients of grad_scale * (sum of token losses) accumulate into
  // the model's arena; the last micro-batch's backward feeds `reducer`, which is
  // finished before returning, and tied embedding copies are summed over tied_comm.
  PipelineStepStats run(const std::vector<LocalBatch>& batches, float grad_scale,
                        GradReducer& reducer, AttentionPlacement& placement, MPI_Comm tied_comm,
                        const ArenaRange& tied_range);

 private:
  struct InFlight {  // one micro-batch: a slot and its messages per lane (nano-batch)
    ActivationSlot* slots[2] = {nullptr, nullptr};
    MPI_Request send_forward[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Request send_backward[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Request recv_forward[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Request recv_backward[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    bool forward_posted = false, backward_posted = false;  // receives posted (maybe done)
    bool done = false;  // backward run and its gradient sent: the slot can go once sends complete
  };
  void acquire(const std::vector<LocalBatch>& batches, int mb);  // the micro-batch's slots
  int tag(int mb, int lane, bool gradient) const;
  void stage_forward(ActivationSlot* const* slots, AttentionPlacement& placement);
  void stage_backward(ActivationSlot* const* slots, AttentionPlacement& placement);
  void post_recv_forward(const std::vector<LocalBatch>& batches, int mb);
  void post_recv_backward(int mb);
  double wait_for(MPI_Request& request);  // seconds blocked
  void progress();              // tests requests in flight, frees finished slots
  void free_slot(InFlight& f, bool wait);
  void release_finished(bool wait);  // free_slot for every finished micro-batch
  int message_count(const ActivationSlot& slot) const;
  // A message's buffer: the slot's fp32 rows, or in a bf16 run wire buffer `which` of
  // (mb, lane): 0 forward receive, 1 forward send, 2 backward receive, 3 backward send.
  enum Wire { forward_in = 0, forward_out = 1, backward_in = 2, backward_out = 3 };
  uint16_t* wire(int mb, int lane, Wire which, int64_t values);
  void post_send(float* rows, int mb, int lane, bool gradient, MPI_Request* request);
  // into fp32 rows (through the wire buffer when it is bf16) or straight into bf16 bits
  void post_recv(SavedRows rows, int mb, int lane, bool gradient, MPI_Request* request);
  void widen_received(SavedRows rows, int mb, int lane, bool gradient);  // after the receive completed
  void run_dummy(const PipeAction& a, AttentionPlacement& placement);
  // One action of the stage's list on its micro-batch (m in the step), its waits into st
  void run_action(const PipeAction& a, int m, const std::vector<LocalBatch>& batches, float grad_scale,
                  GradReducer& reducer, AttentionPlacement& placement, PipelineStepStats& st);
  // one forward (and, on the last stage, the loss) / one backward of a micro-batch
  void run_forward(const PipeAction& a, const std::vector<LocalBatch>& batches, float grad_scale,
                   AttentionPlacement& placement, CrossEntropyStats& loss);
  void run_backward(const PipeAction& a, bool last_backward, GradReducer& reducer,
                    AttentionPlacement& placement);

  LlamaModel& model_;
  MPI_Comm comm_;
  int pp_, stage_;
  PipelineSchedule schedule_;
  int lanes_ = 1;
  std::vector<std::array<LocalBatch, 2>> nano_;  // ping-pong: each micro-batch's halves
  LocalBatch dummy_;  // a tick's dummy micro-batch: no tokens
  ActivationSlot dummy_slots_[2];
  int micro_batches_ = 0;
  std::vector<PipeAction> actions_;
  std::vector<InFlight> flight_;  // per micro-batch
  bool bf16_wire_ = false;        // messages in bf16 (the model's precision)
  std::vector<std::array<std::vector<uint16_t>, 8>> wire_;  // per micro-batch: [lane * 4 + Wire]
  int64_t bytes_sent_ = 0;
  int next_forward_post_ = 0;     // next micro-batch whose activations are not yet asked for
  double send_wait_ = 0;
};

// Copies every stage's owned ranges of each arena onto the first stage's rank of this
// pipeline (pp rank 0), e.g. parameters and optimizer moments before rank 0 writes a
// checkpoint. Collective over pp_comm; a no-op when pp = 1.
void gather_to_first_stage(MPI_Comm pp_comm, int pp, int stage,
                           const std::vector<std::vector<ArenaRange>>& ranges_by_stage,
                           const std::vector<float*>& arenas);

}  // namespace lct
