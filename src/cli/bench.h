// lct bench: single-process throughput against ceilings measured in the same run.
//
// Sections (all in one process; each figure is the work of its timed runs over their
// total time, src/cli/bench_common.h), in the files of src/cli/bench_*.cpp:
//   machine    CPU, cores used, OpenBLAS core and OPENBLAS_CORETYPE, thread counts
//   ceilings   SGEMM GFLOP/s on a large square product; FMA-loop peak GFLOP/s; oneDNN's
//              f32 and bf16 products and the bf16 dot loop where the CPU has them;
//              memory bandwidth (STREAM copy and triad)
//   gemm       the model's own linear products at its shapes, on every library and kernel
//   attention  core attention forward / backward / forward+backward GFLOP/s for one
//              document and for a packed batch drawn from data.doc_lengths, at each
//              length, with the ratio to the same-run SGEMM figure, for the causal
//              kernel and for DCA ([attention] dca_* keys) with DCA's time relative
//              to causal on the same input. FlashAttention
//              convention: forward 4*H*hd*pairs (= 2*H*hd*sum L_i(L_i+1) for whole
//              documents), backward 2.5x forward.
//   step       full training steps of the configured model (one packed sequence of
//              each length): tokens/s, model GFLOP/s (src/train/flops.h convention), MFU
//              against both ceilings, and peak resident memory of the step.
//   profile    the step's phases, its split into linear products, core attention and
//              the rest against their ceilings, and (--profile-out) CAD's measured cost model
//   cp_balance, cad_balance   attention-pair imbalance of the context-parallel splits
//              and of CAD's plans over the configured stream (no timing)
#pragma once

#include <atomic>

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/config.h"

namespace lct {

// Where lct bench is, for its heartbeat (src/util/heartbeat.h, read on another thread):
// the section running and the timed runs (warm-ups included) done so far.
struct BenchProgress {
  std::atomic<const char*> section{""};
  std::atomic<int64_t> runs{0};
};

struct BenchOptions {
  std::vector<int64_t> attention_lengths{1024, 4096, 16384, 65536};
  std::vector<std::string> attention_precisions{"fp32", "bf16"};  // each kernel in each
  std::vector<int64_t> step_lengths{4096, 16384, 65536};
  // precisions of the step section (empty: the config's train.precision); each row's
  // MFU is against its precision's ceilings (bf16: oneDNN bf16 GEMM, VDPBF16PS loop)
  std::vector<std::string> step_precisions;
  std::vector<std::string> sections{"ceilings", "gemm", "attention", "step"};
  // cp_balance section: attention-pair imbalance of the context-parallel splits over
  // the configured stream (no timing)
  std::vector<int64_t> cp_degrees{2, 4, 8};
  int64_t balance_sequences = 64;
  std::vector<int64_t> cad_ranks{2, 4, 8, 16};  // cad_balance section: data-parallel ranks
  std::string profile_out;  // profile section: where to write the CAD cost model
  // A previous lct bench --json of this machine (same CPU, threads and OpenBLAS core):
  // its ceilings stand for this run's instead of being measured again (an experiment of
  // many bench processes measures them once, so all its rows share one measurement)
  std::string ceilings_from;
  int repeats = 5;              // timed runs per figure (total work over total time)
  double budget_seconds = 30;   // stop repeating a measurement once it used this long
  bool json = false;
  BenchProgress* progress = nullptr;  // set by run_bench: every timed run counts in it
};

int run_bench(const Config& config, const BenchOptions& options);

}  // namespace lct
