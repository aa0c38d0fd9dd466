// Where a training step is, for a heartbeat inside long steps (src/train/heartbeat.h):
// the model moves it as it starts and finishes each layer pass of a micro-batch, the
// work counted in the step's FLOPs (layer_forward_flops: a forward pass once, its
// backward twice, a full recomputation's repeated forward once, a selective one's linear
// part), and another thread reads it. One writer (the thread running the model), any
// number of readers; lock-free, and nothing here changes what the step computes.
#pragma once

#include <atomic>
#include <cstdint>

namespace lct {

class StepProgress {
 public:
  struct Position {
    const char* phase = "";  // "forward", "recompute", "backward", "loss" ("": not started)
    int layer = -1;          // the model's layer index (-1: none, e.g. the loss)
    int micro_batch = -1;    // the slot's round: the micro-batch of the step
    double done = 0;         // FLOPs of the passes finished this step
  };

  // A new step: nothing done yet.
  void reset() {
    phase_.store("", std::memory_order_relaxed);
    layer_.store(-1, std::memory_order_relaxed);
    micro_batch_.store(-1, std::memory_order_relaxed);
    done_.store(0.0, std::memory_order_release);
  }
  // A pass starts: what it is, of which layer and micro-batch.
  void at(const char* phase, int layer, int micro_batch) {
    phase_.store(phase, std::memory_order_relaxed);
    layer_.store(layer, std::memory_order_relaxed);
    micro_batch_.store(micro_batch, std::memory_order_release);
  }
  // A pass of `flops` finished (the single writer's add: no read-modify-write race).
  void finished(double flops) {
    done_.store(done_.load(std::memory_order_relaxed) + flops, std::memory_order_release);
  }
  Position position() const {
    Position p;
    p.done = done_.load(std::memory_order_acquire);
    p.micro_batch = micro_batch_.load(std::memory_order_acquire);
    p.layer = layer_.load(std::memory_order_relaxed);
    p.phase = phase_.load(std::memory_order_relaxed);
    return p;
  }

 private:
  std::atomic<const char*> phase_{""};
  std::atomic<int> layer_{-1}, micro_batch_{-1};
  std::atomic<double> done_{0.0};
};

}  // namespace lct
