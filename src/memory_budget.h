// A memory budget before allocation: what one rank of a training run will hold, from
// the config and the layout alone (nothing allocated), against what the machine lets it
// have. `lct train` refuses a run that does not fit with one line naming both, before
// it writes anything; `lct train --dry-run` prints the estimate and the plan.
//
// Per rank (every rank holds the whole parameter arena; src/trainer.h):
//   weights      parameters + gradients, 4 bytes each
//   optimizer    AdamW's two moments (SGD: none)
//   activations  slots in flight x the stage's saved floats per token x tokens per slot
//                (from the schedule's action list: 1F1B pp - stage, GPipe m, ticks
//                2 (pp - 1 - stage) + 1 plus the dummies'; ping-pong: two slots per
//                micro-batch, together T + min(T, longest document) / 2 tokens)
//   scratch      backward scratch, LM-head logit rows, RoPE table
//   attention    placement buffers: context-parallel K/V blocks, CAD's exchanged rows
//   data         the step's packed micro-batches, a text corpus held in memory
//   checkpoint   rank 0: the checkpoint built in memory, its image and the verify pass
//   process      what the process holds already (libraries, MPI), measured
// Available: the tightest of MemAvailable (/proc/meminfo) shared by the ranks on this
// host, the cgroup's memory limit, and RLIMIT_AS less the address space in use.
#pragma once

#include <cstdint>
#include <string>

#include "src/config.h"
#include "src/train/run_plan.h"

namespace lct {

struct MemoryEstimate {
  double weights = 0, optimizer = 0, activations = 0, scratch = 0, attention = 0, data = 0,
         checkpoint = 0, process = 0;  // bytes
  int slots = 0;                       // activation slots in flight (the largest stage)
  int64_t tokens_per_slot = 0;
  double total() const {
    return weights + optimizer + activations + scratch + attention + data + checkpoint + process;
  }
};

// The largest rank's estimate (rank 0 carries the checkpoint image).
MemoryEstimate estimate_rank_memory(const Config& config, const RunPlan& plan);

struct MemoryAvailable {
  double bytes = 0;      // for one rank
  std::string limit;     // what sets it, e.g. "MemAvailable 20.1 GiB / 2 ranks"
};
// `ranks_on_host` ranks share the host's memory.
MemoryAvailable available_memory(int ranks_on_host);

// One line per component, for --dry-run.
std::string describe_estimate(const MemoryEstimate& e, const MemoryAvailable& a);

// "" when the run fits, else the one-line refusal.
std::string check_memory_budget(const MemoryEstimate& e, const MemoryAvailable& a);

std::string bytes_text(double bytes);  // "1.23 GiB"

}  // namespace lct
