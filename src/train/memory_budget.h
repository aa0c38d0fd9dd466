// A memory budget before allocation: what one rank of a training run will hold, from
// the config and the layout alone (nothing allocated), against what the machine lets it
// have. `lct train` refuses a run that does not fit with one line naming both, before
// it writes anything; `lct train --dry-run` prints the estimate and the plan.
//
// Per rank (every rank holds the whole parameter arena; src/train/trainer.h):
//   weights      parameters + gradients, 4 bytes each (+ 2 for the bf16 copies of a bf16 run)
//   optimizer    AdamW's two moments (SGD: none)
//   activations  slots in flight x the stage's saved floats per token x tokens per slot
//                (from the schedule's action list: 1F1B pp - stage, GPipe m, ticks
//                2 (pp - 1 - stage) + 1 plus the dummies'; ping-pong: two slots per
//                micro-batch, together T + min(T, longest document) / 2 tokens);
//                what a layer keeps follows train.recompute (model/recompute.h)
//   workspace    recomputation: one layer's whole-sequence Q, K, V (and, full, O and
//                LSE) per lane
//   scratch      backward scratch, token-tile buffers, LM-head logit rows, RoPE table,
//                the attention kernel's scratch (runs of at most max(64K, longest document) rows)
//   attention    placement buffers: context-parallel K/V blocks, CAD's exchanged rows
//   data         the step's packed micro-batches, a text corpus held in memory
//   checkpoint   rank 0: the checkpoint built in memory, its image and the verify pass
//   libraries    BLAS and oneDNN working buffers per thread, MPI's shared memory (an allowance)
//   process      what the process holds already (libraries, MPI), measured once
//                (process_resident_bytes)
// Available: available_memory (src/util/machine.h): resident memory, and an address-space
// limit less what is mapped (the allocations counted here map their sizes).
#pragma once

#include <cstdint>
#include <string>

#include "src/util/machine.h"
#include "src/train/run_plan.h"

namespace lct {

struct MemoryEstimate {
  double weights = 0, optimizer = 0, activations = 0, workspace = 0, scratch = 0, attention = 0, data = 0,
         checkpoint = 0, libraries = 0, process = 0;  // bytes
  int slots = 0;                       // activation slots in flight (the largest stage)
  int64_t tokens_per_slot = 0;
  // bytes per token of a micro-batch on the largest stage: kept for backward (one slot
  // and the workspace), and backward scratch with the tile buffers (lct train's
  // activation_bytes_per_token and scratch_bytes_per_token measure the same)
  double stored_per_token = 0, scratch_per_token = 0;
  double total() const {
    return weights + optimizer + activations + workspace + scratch + attention + data + checkpoint + libraries +
           process;
  }
};

// The largest rank's estimate (rank 0 carries the checkpoint image).
MemoryEstimate estimate_rank_memory(const RunPlan& plan);

// What the process holds already, the estimates' `process` part: its resident size
// (VmRSS), measured once, at the first call. lct train makes that call at one point of
// its start-up, before --dry-run opens the data and --max-seq-len plans its candidates, so
// that --dry-run, --max-seq-len and the run itself count the same figure.
double process_resident_bytes();
// The part of that figure which moves between two runs of the same command line: its
// file-backed pages (RssFile, measured with it). Which of the program's and libraries'
// pages the kernel maps around each fault depends on where they load (ASLR) and on the
// page cache, while the anonymous pages repeat to the page (0.3 MiB of movement was seen
// on about 20 MiB of them). lct train --max-seq-len answers the longest length that fits
// with this much to spare, so that --dry-run of the answer, in another process, fits too.
double process_headroom_bytes();

// One line per component, for --dry-run.
std::string describe_estimate(const MemoryEstimate& e, const MemoryAvailable& a);

// "" when the run fits, else the one-line refusal.
std::string check_memory_budget(const MemoryEstimate& e, const MemoryAvailable& a);

// The other commands' budgets, checked before they allocate (the same one-line refusal,
// never std::bad_alloc or the OOM killer). `what` names the work, `bytes` and `parts`
// what it allocates, `advice` what to change; "" when that and what the process holds
// already fit the memory available to one process.
std::string check_command_memory(const std::string& what, double bytes, const std::string& parts,
                                 const std::string& advice);
// What a command holds at its peak by such an estimate: `bytes` and what the process
// holds now (VmRSS), the figure check_command_memory compares.
double command_memory_bytes(double bytes);
// lct eval: the forward and backward of one packed batch of T tokens (longest document
// L) with the model's weights and gradients (what LlamaModel allocates for them).
double eval_bytes(const LlamaConfig& model, Precision precision, int64_t T, int64_t L);

}  // namespace lct
