// End-to-end model checks: finite-difference gradients of the whole model, the
// parameter table, micro-batch splitting, and bit-identical reruns of the trainer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <cmath>

#include "data/nano_batches.h"
#include "model/llama.h"
#include "model/optimizer.h"
#include "src/config/config.h"
#include "src/train/memory_budget.h"
#include "src/train/trainer.h"
#include "tests/test_util.h"

namespace lct::model_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

LlamaConfig tiny_config(bool tied) {
  return test::llama_shape(11, 8, 12, 2, 2, 1, tied);
}

PackedBatch make_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& cu) {
  PackedBatch b;
  b.tokens = tokens;
  b.cu_seqlens = cu;
  derive_targets_and_positions(b);
  return b;
}

void randomize(LlamaModel& m, uint64_t seed) { randomize_params(m.table(), m.params, seed); }

void check_model_gradients(bool tied) {
  LlamaModel m(tiny_config(tied));
  randomize(m, 5);
  const PackedBatch b =
      make_batch({1, 4, 2, 9, 3, 0, 7, 7, 2, 5, 10, 6, 1, 8, 3}, {0, 5, 6, 15});
  const int64_t N = b.num_targets();
  m.zero_grads();
  m.forward_backward(b, 1.0f / float(N), true);
  auto loss = [&] { return m.forward_backward(b, 1.0f, false).loss_sum / double(N); };
  for (const TensorSpec& s : m.table().specs()) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < s.numel; i += std::max<int64_t>(1, s.numel / 12)) idx.push_back(s.offset + i);
    const auto fd = finite_difference(m.params, loss, 3e-3, idx);
    EXPECT_LT(rel_error(pick(m.grads, idx), fd), 1e-2) << s.name;
  }
}

TEST(Model, GradientsMatchFiniteDifferences) { check_model_gradients(false); }
TEST(Model, TiedEmbeddingGradientsMatchFiniteDifferences) { check_model_gradients(true); }

TEST(Model, TableUsesHuggingFaceNamesInLayerOrder) {
  const TensorTable t = build_llama_table(tiny_config(false));
  EXPECT_EQ(t.specs().front().name, "model.embed_tokens.weight");
  EXPECT_EQ(t.specs().back().name, "lm_head.weight");
  EXPECT_EQ(t.get("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(t.get("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(hf_name_to_path("model.layers.0.mlp.up_proj.weight"), "model/layers/0/mlp/up_proj/weight");
  EXPECT_EQ(build_llama_table(tiny_config(true)).find("lm_head.weight"), nullptr);
  // a pipeline stage's layers are one contiguous arena range
  const ArenaRange r0 = layer_range(t, 0, 1), r1 = layer_range(t, 1, 2);
  EXPECT_LE(r0.end, r1.begin);
  EXPECT_EQ(layer_range(t, 0, 2).begin, r0.begin);
  EXPECT_EQ(layer_range(t, 0, 2).end, r1.end);
}

// Issue 54 cause 1: size arithmetic never wraps. Random dimensions up to each key's limit
// (log-uniform, so that small and huge both come up): validate() either refuses the model
// in one line naming the keys, or its table's parameter count is the 128-bit count,
// positive, and the eval memory estimate is finite and positive.
TEST(Model, SizesOfAnyValidModelNeverWrap) {
  std::mt19937_64 rng(54);
  const auto log_uniform = [&](int64_t hi) {
    const double x = std::uniform_real_distribution<double>(0.0, std::log2(double(hi)))(rng);
    return std::max<int64_t>(1, int64_t(std::exp2(x)));
  };
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    LlamaConfig c;
    c.vocab_size = log_uniform(int64_t(1) << 31);
    c.num_attention_heads = int(log_uniform(65536));
    c.hidden_size = c.num_attention_heads * 2 * log_uniform((int64_t(1) << 30) / c.num_attention_heads);
    c.num_key_value_heads = c.num_attention_heads >> std::uniform_int_distribution<int>(0, 3)(rng);
    if (c.num_key_value_heads < 1 || c.num_attention_heads % c.num_key_value_heads) c.num_key_value_heads = 1;
    c.intermediate_size = log_uniform(int64_t(1) << 31);
    c.num_hidden_layers = int(log_uniform(65536));
    c.tie_word_embeddings = trial % 2 == 0;
    const std::string why = c.validate();
    if (!why.empty()) {
      ++refused;
      EXPECT_EQ(why.find('\n'), std::string::npos);
      continue;
    }
    ++accepted;
    ASSERT_LE(c.parameter_count(), (long double)LlamaConfig::kMaxParameters);
    const int64_t T = log_uniform(int64_t(1) << 30);
    const double bytes = eval_bytes(c, Precision::fp32, T, T);
    EXPECT_TRUE(std::isfinite(bytes) && bytes > 0) << bytes;
    if (c.parameter_count() > 1e8) continue;  // the table lists every layer: build only the small ones
    const TensorTable t = build_llama_table(c);
    int64_t numel = 0;  // the arena's total() adds 64-byte alignment between tensors
    for (const TensorSpec& spec : t.specs()) numel += spec.numel;
    EXPECT_EQ((long double)numel, c.parameter_count());
    EXPECT_GE(t.total(), numel);
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
  // the audit's case: vocab x hidden = 2^62 gave a negative count and "fits: yes"
  LlamaConfig huge;
  huge.vocab_size = int64_t(1) << 31;
  huge.hidden_size = int64_t(1) << 31;
  huge.num_attention_heads = 1 << 16;
  huge.num_key_value_heads = 1 << 16;
  EXPECT_NE(huge.validate().find("parameters, more than lct addresses (2^40"), std::string::npos) << huge.validate();
}

TEST(Model, InitIsDeterministicAndScaled) {
  LlamaConfig c = tiny_config(false);
  c.hidden_size = 64;
  c.intermediate_size = 256;
  LlamaModel a(c), b(c);
  init_llama_params(a.table(), c, 9, a.params.data());
  init_llama_params(b.table(), c, 9, b.params.data());
  EXPECT_EQ(a.params, b.params);
  auto stdev = [&](const std::string& n) {
    const TensorSpec& s = a.table().get(n);
    double ss = 0;
    for (int64_t i = 0; i < s.numel; ++i) ss += double(a.params[size_t(s.offset + i)]) * a.params[size_t(s.offset + i)];
    return std::sqrt(ss / double(s.numel));
  };
  EXPECT_NEAR(stdev("model.layers.0.mlp.up_proj.weight"), 0.02, 0.001);
  EXPECT_NEAR(stdev("model.layers.0.mlp.down_proj.weight"), 0.02 / std::sqrt(4.0), 0.0007);
  EXPECT_EQ(a.params[size_t(a.table().get("model.norm.weight").offset)], 1.0f);
}

TEST(Model, MicroBatchSplitGivesSameLossAndGradients) {
  LlamaModel m(tiny_config(false));
  randomize(m, 6);
  const std::vector<int32_t> s1 = {1, 2, 3, 4, 5, 6, 7, 8}, s2 = {9, 8, 7, 6, 5, 4, 3, 2};
  const PackedBatch a = make_batch(s1, {0, 3, 8}), b = make_batch(s2, {0, 6, 8});
  std::vector<int32_t> both = s1;
  both.insert(both.end(), s2.begin(), s2.end());
  const PackedBatch ab = make_batch(both, {0, 3, 8, 14, 16});
  const int64_t N = ab.num_targets();
  ASSERT_EQ(N, a.num_targets() + b.num_targets());

  m.zero_grads();
  const double loss_one = m.forward_backward(ab, 1.0f / float(N), true).loss_sum / double(N);
  const std::vector<float> grads_one = m.grads;
  m.zero_grads();
  double loss_split = m.forward_backward(a, 1.0f / float(N), true).loss_sum;
  loss_split += m.forward_backward(b, 1.0f / float(N), true).loss_sum;
  loss_split /= double(N);
  EXPECT_NEAR(loss_one, loss_split, 1e-6 * loss_one);
  std::vector<double> g1(grads_one.begin(), grads_one.end()), g2(m.grads.begin(), m.grads.end());
  EXPECT_LT(rel_error(g2, g1), 1e-5);
}

// A placement that computes as late as the split phases allow (at finish), so a model
// that reused a lane's arrays between start and finish would get wrong results.
class DeferredAttention final : public AttentionPlacement {
 public:
  void forward(const AttentionInput& in, const float* q, const float* k, const float* v,
               float* out, float* lse) override {
    attention_forward(in.params, in.tasks, q, k, v, out, lse);
  }
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v,
                const float* out, const float* lse, const float* dout, float* dq, float* dk,
                float* dv) override {
    attention_backward(in.params, in.tasks, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void forward_start(const AttentionInput& in, const float* q, const float* k, const float* v,
                     float* out, float* lse) override {
    Pending& p = pending_[in.lane];
    ASSERT_FALSE(p.open);
    p = {true, false, &in.params, {in.tasks.begin(), in.tasks.end()}, q, k, v, out, lse};
  }
  void backward_start(const AttentionInput& in, const float* q, const float* k, const float* v,
                      const float* out, const float* lse, const float* dout, float* dq,
                      float* dk, float* dv) override {
    Pending& p = pending_[in.lane];
    ASSERT_FALSE(p.open);
    p = {true, true, &in.params, {in.tasks.begin(), in.tasks.end()}, q, k, v,
         const_cast<float*>(out), const_cast<float*>(lse), dout, dq, dk, dv};
  }
  void forward_finish(int lane) override { finish(lane); }
  void backward_finish(int lane) override { finish(lane); }

 private:
  struct Pending {
    bool open = false, backward = false;
    const AttentionParams* params = nullptr;
    std::vector<AttentionTask> tasks;
    const float *q = nullptr, *k = nullptr, *v = nullptr;
    float *out = nullptr, *lse = nullptr;
    const float* dout = nullptr;
    float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  };
  void finish(int lane) {
    Pending& p = pending_[lane];
    ASSERT_TRUE(p.open);
    if (p.backward)
      attention_backward(*p.params, p.tasks, p.q, p.k, p.v, p.out, p.lse, p.dout, p.dq, p.dk, p.dv);
    else
      attention_forward(*p.params, p.tasks, p.q, p.k, p.v, p.out, p.lse);
    p.open = false;
  }
  Pending pending_[2];
};

// Ping-pong: two nano-batches run interleaved through the split phases give the loss
// and gradients of the micro-batch run whole (causal and DCA, untied and tied); an
// empty second nano-batch works too.
// Both precisions: the pair also checks that the fused Q/K/V product's output, kept in
// the tile's scratch during attn_in_forward, never meets a backward in flight. Tolerance:
// fp32 summation order (1e-5); in bf16 such a last-bit difference may move a value
// across a bf16 rounding boundary, so norm-wise up to bf16's unit roundoff 2^-9.
TEST(Model, PingPongPairGivesTheWholeMicroBatch) {
  for (const Precision precision : {Precision::fp32, Precision::bf16})
  for (const bool dca : {false, true})
    for (const bool tied : {false, true})
      for (const std::vector<int32_t>& cu :
           {std::vector<int32_t>{0, 3, 8, 14, 16}, std::vector<int32_t>{0, 16}}) {
        LlamaConfig c = tiny_config(tied);
        if (dca) {
          c.attention_kernel = AttentionKernel::dca;
          c.dca_chunk_size = 4;
          c.dca_local_size = 1;
        }
        LlamaModel m(c);
        m.set_arithmetic({.precision = precision});
        randomize(m, 7);
        const PackedBatch b = make_batch({1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7, 6, 5, 4, 3, 2}, cu);
        const int64_t N = b.num_targets();
        m.zero_grads();
        const double loss_one = m.forward_backward(b, 1.0f / float(N), true).loss_sum;
        const std::vector<float> grads_one = m.grads;

        m.zero_grads();
        DeferredAttention placement;
        const double loss_pair = pair_forward_backward(m, b, 1.0f / float(N), placement);
        const bool bf16 = precision == Precision::bf16;
        EXPECT_NEAR(loss_pair, loss_one, (bf16 ? 0x1p-9 : 1e-6) * loss_one);
        std::vector<double> g1(grads_one.begin(), grads_one.end()), g2(m.grads.begin(), m.grads.end());
        EXPECT_LT(rel_error(g2, g1), bf16 ? 0x1p-9 : 1e-5)
            << precision_name(precision) << " dca " << dca << " tied " << tied << " docs " << cu.size() - 1;
      }
}

// A bf16 run stores h1, h2, gate_up, act and each layer's input x_in as bf16 bits and
// nothing else (half the floats per token each; fp32 stores the same tensors). (The
// head's normed rows live only in a token tile, in either precision.)
TEST(Model, Bf16RunStoresProductInputsInBf16) {
  const LlamaConfig c = tiny_config(false);
  const StageSpec whole = whole_model_stage(c);
  const int64_t C = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers;
  const int64_t fp32 = LlamaModel::activation_floats_per_token(c, whole, Precision::fp32);
  const int64_t bf16 = LlamaModel::activation_floats_per_token(c, whole, Precision::bf16);
  ASSERT_EQ(C % 2, 0);
  ASSERT_EQ(I % 2, 0);
  EXPECT_EQ(2 * (fp32 - bf16), L * (3 * C + 3 * I));
  LlamaModel m(c);
  m.set_arithmetic({.precision = Precision::bf16});
  int stored_bf16 = 0;
  for (const ActivationSpec& a : m.activation_table().specs()) {
    const std::string last = a.name.substr(a.name.rfind('.') + 1);
    // the products' inputs, and each layer's input (a bf16 value in a bf16 run)
    const bool bf16_value = last == "h1" || last == "h2" || last == "gate_up" || last == "act" || last == "x_in";
    EXPECT_EQ(a.storage == Precision::bf16, bf16_value) << a.name;
    stored_bf16 += a.storage == Precision::bf16;
  }
  EXPECT_EQ(stored_bf16, 5 * L);
}

// The bf16 weight copies: forward_backward refreshes them, so a change of params shows;
// phases run without a refresh are refused instead of computing with stale copies.
TEST(Model, Bf16WeightCopiesFollowTheParameters) {
  const PackedBatch b = make_batch({1, 4, 2, 9, 3, 0, 7, 7, 2, 5, 10, 6, 1, 8, 3}, {0, 5, 6, 15});
  LlamaModel m(tiny_config(false));
  m.set_arithmetic({.precision = Precision::bf16});
  randomize(m, 5);
  const double before = m.forward_backward(b, 1.0f, false).loss_sum;
  for (float& x : m.params) x *= 0.5f;
  const double after = m.forward_backward(b, 1.0f, false).loss_sum;
  LlamaModel fresh(tiny_config(false));
  fresh.set_arithmetic({.precision = Precision::bf16});
  fresh.params = m.params;
  EXPECT_NE(after, before);
  EXPECT_EQ(after, fresh.forward_backward(b, 1.0f, false).loss_sum);

  LlamaModel unrefreshed(tiny_config(false));
  unrefreshed.set_arithmetic({.precision = Precision::bf16});
  const LocalBatch whole = whole_sequence(b);
  ActivationSlot& s = unrefreshed.begin(whole, 0);
  ColocatedAttention colocated;
  EXPECT_THROW(unrefreshed.stage_forward(s, colocated), std::logic_error);
  unrefreshed.end(s);
  EXPECT_THROW({
    ActivationSlot& t = m.begin(whole, 0);
    (void)t;
    m.set_arithmetic({.precision = Precision::fp32});
  }, std::logic_error);
}

// Issue 55: a machine choice is the model's value (compute/gemm.h Arithmetic), not process
// state. Two models of the same weights with different fp32 libraries (and, on a CPU
// with bf16 instructions, different bf16 kernels), stepped in turn in one process, each
// give bit for bit what a model of its own choice gives alone; and the two choices give
// different bits, so a model that ran the other's choice (as a process-wide setting
// would make it) shows. A pair whose two choices give the same bits on this machine
// cannot show it and is passed over (on an AVX-512 Xeon OpenBLAS's SkylakeX kernels and
// oneDNN's sum these small products in the same order); at least one pair must tell.
TEST(Model, TwoModelsInOneProcessEachRunTheirOwnArithmetic) {
  const LlamaConfig c = test::llama_shape(64, 96, 160, 2, 4, 2);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 200; ++i) tokens.push_back((i * 37 + 5) % 64);
  const PackedBatch b = make_batch(tokens, {0, 70, 71, 200});
  struct Run {
    double loss;
    std::vector<float> grads;
    bool operator==(const Run&) const = default;
  };
  const auto step = [&](LlamaModel& m) {
    m.zero_grads();
    const double loss = m.forward_backward(b, 1.0f / float(b.num_targets()), true).loss_sum;
    return Run{loss, m.grads};
  };
  const auto model_of = [&](const Arithmetic& arith) {
    auto m = std::make_unique<LlamaModel>(c);
    m->set_arithmetic(arith);
    randomize(*m, 21);
    return m;
  };
  std::vector<std::pair<Arithmetic, Arithmetic>> pairs = {
      {{Precision::fp32, Fp32Library::openblas}, {Precision::fp32, Fp32Library::onednn}}};
  if (bf16_support().instructions)
    pairs.push_back({{Precision::bf16, Fp32Library::openblas, Bf16Kernel::native},
                     {Precision::bf16, Fp32Library::openblas, Bf16Kernel::rounded}});
  int told = 0;
  for (const auto& [first, second] : pairs) {
    const std::string what = std::string(precision_name(first.precision)) + ": " +
                             (first.precision == Precision::fp32 ? "openblas and onednn" : "native and rounded");
    const Run alone_first = step(*model_of(first)), alone_second = step(*model_of(second));
    if (alone_first == alone_second) {
      std::cout << "  " << what << " give the same bits on this machine: this pair cannot tell them apart\n";
      continue;
    }
    ++told;
    auto a = model_of(first), z = model_of(second);
    for (int round = 0; round < 2; ++round) {
      EXPECT_EQ(step(*a), alone_first) << what << ", round " << round;
      EXPECT_EQ(step(*z), alone_second) << what << ", round " << round;
    }
    EXPECT_EQ(a->arithmetic(), first);
    EXPECT_EQ(z->arithmetic(), second);
  }
  if (told == 0) GTEST_SKIP() << "no pair of arithmetics gives different bits on this machine";
}

TEST(Model, LearningRateScheduleWarmsUpThenDecays) {
  OptimizerConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 4;
  c.total_steps = 14;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 1.0);
  EXPECT_NEAR(learning_rate(c, 9), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(c, 14), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 100), 0.1);
}

Config tiny_run_config() {
  Config c;
  c.model = tiny_config(false);
  c.model.vocab_size = 96;
  c.model.hidden_size = 32;
  c.data.seq_len = 128;
  c.data.max_doc_len = 100;
  c.train.steps = 4;
  c.train.micro_batches = 2;
  c.train.warmup_steps = 1;
  return c;
}

TEST(Trainer, TwoRunsWithOneSeedAreBitIdentical) {
  const Config c = tiny_run_config();
  Trainer a(make_run_plan(c, 1)), b(make_run_plan(c, 1));
  for (int s = 0; s < 4; ++s) {
    const StepRecord ra = a.train_step(), rb = b.train_step();
    EXPECT_EQ(ra.loss, rb.loss) << "step " << s;
    EXPECT_EQ(ra.grad_norm, rb.grad_norm);
  }
  EXPECT_EQ(a.model().params, b.model().params);
}

TEST(Trainer, LossFallsOnSyntheticData) {
  Config c = tiny_run_config();
  c.train.steps = 30;
  c.train.lr = 1e-2;
  Trainer t(make_run_plan(c, 1));
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    const double l = t.train_step().loss;
    if (s < 3) first += l / 3;
    if (s >= 27) last += l / 3;
  }
  EXPECT_LT(last, first - 0.5);
}

TEST(Trainer, SgdStepMovesAgainstTheGradient) {
  Config c = tiny_run_config();
  c.train.optimizer = OptimizerKind::sgd;
  c.train.grad_clip = 0;
  c.train.warmup_steps = 0;
  c.train.min_lr = c.train.lr;
  Trainer t(make_run_plan(c, 1));
  const std::vector<float> before = t.model().params;
  t.train_step();
  const std::vector<float>& g = t.model().grads;
  for (size_t i = 0; i < before.size(); i += 97)
    EXPECT_NEAR(t.model().params[i], before[i] - float(c.train.lr) * g[i], 1e-7);
}

// Issue 56: the optimizer writes the bf16 weight copies in its own pass. For AdamW and
// SGD: the parameters are the bits a step without copies gives, every tensor inside the
// ranges gets bf16_bits of its new value, and nothing outside them (or not owned) is written.
TEST(Optimizer, WritesBf16CopiesInTheSamePass) {
  LlamaModel m(tiny_config(false));
  randomize(m, 3);
  std::mt19937 gen(11);
  std::normal_distribution<float> n(0.0f, 1e-2f);
  for (float& g : m.grads) g = n(gen);
  const TensorTable& t = m.table();
  const TensorSpec& first_layer = t.get("model.layers.0.self_attn.q_proj.weight");
  const TensorSpec& head = t.get("lm_head.weight");
  // the copies cover both layers and the head; the step updates (and writes) only what it owns
  const std::vector<ArenaRange> ranges{layer_range(t, 0, 2), {head.offset, head.offset + head.numel}};
  for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd}) {
    OptimizerConfig oc;
    oc.kind = kind;
    Optimizer plain(oc, t), fused(oc, t);
    // the last layer (1) is another stage's: not updated, its copy not written
    const ArenaRange last = layer_range(t, m.config().num_hidden_layers - 1, m.config().num_hidden_layers);
    std::vector<ArenaRange> owned{{0, last.begin}, {last.end, t.total()}};
    plain.set_owned_ranges(owned);
    fused.set_owned_ranges(owned);
    std::vector<float> p0 = m.params, p1 = m.params;
    std::vector<uint16_t> copies(m.params.size(), 0xdeadu);
    for (int step = 0; step < 2; ++step) {
      plain.step(p0, m.grads, 1e-2, 0.5);
      fused.step(p1, m.grads, 1e-2, 0.5, {copies.data(), ranges});
    }
    EXPECT_EQ(p0, p1) << optimizer_name(kind);
    int64_t written = 0;
    for (const TensorSpec& s : t.specs()) {  // (the arena's alignment gaps belong to no tensor)
      const bool inside = s.layer == 0 || s.name == "lm_head.weight";
      for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
        if (inside) {
          ASSERT_EQ(copies[size_t(i)], bf16_bits(p1[size_t(i)])) << optimizer_name(kind) << " " << s.name << " " << i;
          ++written;
        } else {
          ASSERT_EQ(copies[size_t(i)], 0xdeadu) << optimizer_name(kind) << " " << s.name << " " << i;
        }
      }
    }
    EXPECT_GE(written, first_layer.numel + head.numel);
  }
}

// Issue 57: the progress a heartbeat reads. Over a micro-batch's forward and backward the
// model's finished passes add up to exactly pass_flops of its tokens and attention pairs
// (integers, exact in double), in every recompute mode; the last pass named is the first
// layer's backward.
TEST(Model, ProgressAddsUpToTheStepsPassFlops) {
  const PackedBatch b = make_batch({1, 4, 2, 9, 3, 0, 7, 7, 2, 5, 10, 6, 1, 8, 3}, {0, 5, 6, 15});
  for (const Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    LlamaModel m(tiny_config(false));
    m.set_recompute({mode, 0});
    randomize(m, 5);
    StepProgress progress;
    m.set_progress(&progress);
    m.forward_backward(b, 1.0f, true);
    std::vector<AttentionTask> tasks;
    whole_sequence(b).local_tasks(tasks, AttentionMask{});
    const int64_t pairs = attention_pairs(tasks, AttentionMask{});
    EXPECT_EQ(pairs, 5 * 6 / 2 + 1 + 9 * 10 / 2);
    const StepProgress::Position p = progress.position();
    EXPECT_EQ(p.done, m.pass_flops(15, pairs)) << recompute_name(mode);
    EXPECT_STREQ(p.phase, "backward");
    EXPECT_EQ(p.layer, 0);
    // full recomputation repeats each layer's forward: a third more than none's 3
    // passes a layer; selective its linear part
    LlamaModel none(tiny_config(false));
    const double layer = layer_forward_flops(none.config(), 15, pairs), linear = layer_forward_flops(none.config(), 15, 0);
    const double extra = mode == Recompute::full ? layer : mode == Recompute::selective ? linear : 0;
    EXPECT_EQ(m.pass_flops(15, pairs), none.pass_flops(15, pairs) + 2 * extra);
  }
}

// A bf16 run's steps after the first need no refresh pass: after every step the copies
// the optimizer wrote are the rounded parameters, what a refresh would write, so the
// next step computes with the same bits.
TEST(Trainer, Bf16CopiesFollowTheParametersAcrossSteps) {
  Config c = tiny_run_config();
  c.train.precision = Precision::bf16;
  Trainer t(make_run_plan(c, 1));
  const std::vector<ArenaRange> ranges = t.model().weight_copy_ranges();
  ASSERT_FALSE(ranges.empty());
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> before = t.model().params;
    t.train_step();
    ASSERT_NE(t.model().params, before);
    for (const ArenaRange& r : ranges)
      for (int64_t i = r.begin; i < r.end; ++i)
        ASSERT_EQ(t.model().weight_copy_bits()[i], bf16_bits(t.model().params[size_t(i)])) << "step " << s << " element " << i;
  }
}

}  // namespace
}  // namespace lct::model_test

namespace lct::model_test {
namespace {
TEST(Trainer, TrainsOnTextAndTokenFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lct_train_src_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.txt") << "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir / "b.txt") << "pack my box with five dozen liquor jugs!";
  std::vector<uint16_t> ids;
  for (int i = 0; i < 500; ++i) ids.push_back(uint16_t(i % 17 == 16 ? 0 : 1 + i % 17));
  std::ofstream(dir / "t.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
  for (const std::string source : {"text", "tokens"}) {
    Config c = tiny_run_config();
    c.data.source = parse_data_source(source);
    c.data.path = (dir / (source == "text" ? "" : "t.bin")).string();
    c.model.vocab_size = source == "text" ? 256 : 32;
    c.data.seq_len = 64;
    Trainer t(make_run_plan(c, 1));
    const double first = t.train_step().loss;
    double last = first;
    for (int s = 0; s < 3; ++s) last = t.train_step().loss;
    EXPECT_TRUE(std::isfinite(last)) << source;
    EXPECT_LT(last, first) << source;
  }
  fs::remove_all(dir);
}
}  // namespace
}  // namespace lct::model_test
