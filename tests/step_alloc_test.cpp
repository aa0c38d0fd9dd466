// The steady-state training step allocates nothing: after a warm-up step, a model
// forward/backward, the gradient norm and the optimizer step make no heap
// allocation through operator new (this binary counts them). The attention kernel's
// aligned scratch is grow-only and is covered by the same warm-up rule.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "model/llama.h"
#include "model/optimizer.h"
#include "tests/test_util.h"

namespace {
std::atomic<int64_t> g_new_calls{0};
}

void* operator new(size_t n) {
  g_new_calls.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace lct {
namespace {

void expect_steady_state_allocates_nothing(Precision precision) {
  const LlamaConfig c = test::llama_shape(64, 64, 96, 2, 4, 2);
  LlamaModel model(c);
  model.set_precision(precision);
  init_llama_params(model.table(), c, 7, model.params.data());
  OptimizerConfig oc;
  Optimizer opt(oc, model.table());

  PackedBatch batch;
  for (int i = 0; i < 700; ++i) batch.tokens.push_back((i * 7 + 3) % 64);
  batch.cu_seqlens = {0, 1, 300, 301, 700};
  derive_targets_and_positions(batch);

  auto step = [&] {
    model.zero_grads();
    model.forward_backward(batch, 1.0f / float(batch.num_targets()), true);
    const double norm = global_grad_norm(model.grads);
    opt.step(model.params, model.grads, 1e-3, norm > 1.0 ? 1.0 / norm : 1.0);
  };
  step();  // warm-up: buffers reach their steady-state size
  const int64_t before = g_new_calls.load();
  step();
  step();
  EXPECT_EQ(g_new_calls.load() - before, 0)
      << "operator new calls in two steady-state " << precision_name(precision) << " steps";
}

TEST(SteadyStateStep, AllocatesNothingAfterWarmUp) { expect_steady_state_allocates_nothing(Precision::fp32); }

// (bf16 is not held to this: oneDNN 2.6 allocates a few small objects inside every
// primitive execute, about 7 per linear-layer product, even with primitives and their
// argument maps created once per shape. lct's own parts of the bf16 step, the rounded
// operands and the attention kernel's bf16 copies, live in grow-only scratch.)

}  // namespace
}  // namespace lct
