// lct simulate's model (src/sim/): predicts training steps on N ranks without running them, from lct's own
// packer, balance packing, context-parallel split, CAD planner and pipeline action lists
// on the real document stream, charged with costs calibrated on this machine.
//
// Calibration (in this process, at train.threads): a few single-process steps of the
// configured model on the stream's own sequences, recorded with the timeline
// (model/trace.h), give seconds per token per layer of the token-linear phases (norms,
// QKV, Wo, MLP, forward + backward), per token of the embedding and loss, per attention
// pair per layer (unless a CAD profile gives attention time per task), and of one
// optimizer step. Communication: point-to-point bandwidth and latency (options).
// Or analytic (--tflops, for other machines and models, e.g. the papers' Llama-8B on
// H200): the FLOP convention of src/train/flops.h over the given throughput, nothing timed
// and no model allocated; the optimizer is not charged.
//
// Per step and rank:
//   colocated / packing   (dp) r runs its micro-batches alone: compute_r = sum over
//                         them of layers x (linear(T) + attention(its documents)) +
//                         head(T); the step = max_r compute_r + the gradient
//                         all-reduce's exposed tail + the optimizer.
//   cad                   (dp) per micro-batch (per nano-batch with ping-pong) every
//                         layer is a synchronisation point: layer time = max_r
//                         (linear(T_r) + attention served by r + exchange not hidden),
//                         the exchange being r's bytes over the bandwidth, hidden behind
//                         r's own tasks, or behind the other nano-batch's linear layers
//                         with ping-pong.
//   pp, cp                colocated; see src/sim/predict.cpp (simulate_model_parallel).
// Deterministic for a given calibration (--calibration reuses one).
#pragma once

#include <cstdint>
#include <string>

namespace lct {

struct SimulateOptions {
  int ranks = 2;
  int64_t steps = 8;            // steps simulated (their mean is reported)
  int64_t first_step = 0;       // the first of them (0-based: sequences from first_step x dp x mb on)
  int64_t calibration_steps = 3;  // single-process steps timed (after one warm-up)
  std::string profile;          // CAD cost profile for attention time ("" = calibrated pairs)
  double bandwidth_gbps = 4.0;  // point-to-point GB/s (lct train logs the probed value)
  double latency_us = 5.0;
  // The ranks over `hosts` hosts (ranks / hosts consecutive ranks each); links between
  // them at host_bandwidth_gbps and host_latency_us (<= 0: the same as within a host),
  // nothing overlapped (src/sim/network.h).
  int hosts = 1;
  double host_bandwidth_gbps = 0;
  double host_latency_us = -1;
  // Reuse a calibration (the TOML file an earlier --calibration-out wrote) instead
  // of timing again, so that several predictions share the same costs.
  std::string calibration;
  std::string calibration_out;  // write this run's calibration there
  double tflops = 0;            // > 0: analytic costs at this many TFLOP/s per rank
  double attention_tflops = 0;  // attention's TFLOP/s under --tflops (0 = the same)
  double linear_scale = 1.0;    // multiply the calibrated costs (other machines)
  double attention_scale = 1.0;
  bool json = false;
};

}  // namespace lct
