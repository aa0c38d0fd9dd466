// Activation recomputation (model/recompute.h) and token tiles (train.tile_tokens):
// every recompute mode gives bit-identical gradients to none, in one micro-batch and
// in ping-pong pairs, both precisions, causal and DCA; token tiles change no more than
// float32 summation order; and what each mode keeps per token is what it says.
#include <gtest/gtest.h>

#include <cstring>

#include "data/context_shards.h"
#include "data/nano_batches.h"
#include "model/llama.h"
#include "tests/test_util.h"

namespace lct::recompute_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

LlamaConfig small_config(bool dca, bool tied) {
  LlamaConfig c = test::llama_shape(19, 16, 24, 3, 4, 2, tied);
  if (dca) {
    c.attention_kernel = AttentionKernel::dca;
    c.dca_chunk_size = 6;
    c.dca_local_size = 2;
  }
  return c;
}

PackedBatch batch_of(int64_t T, const std::vector<int32_t>& cu) {
  PackedBatch b;
  for (int64_t t = 0; t < T; ++t) b.tokens.push_back(int32_t((t * 7 + 3) % 19));
  b.cu_seqlens = cu;
  derive_targets_and_positions(b);
  return b;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

// One micro-batch whole (pair = false) or as two ping-pong nano-batches
Result run(const LlamaConfig& c, Precision precision, const RecomputePolicy& policy, int64_t tile,
           const PackedBatch& b, bool pair) {
  LlamaModel m(c);
  m.set_arithmetic({.precision = precision});
  m.set_recompute(policy);
  m.set_tile_tokens(tile);
  randomize_params(m.table(), m.params, 11);
  m.zero_grads();
  const float scale = 1.0f / float(b.num_targets());
  Result r;
  if (!pair) {
    r.loss = m.forward_backward(b, scale, true).loss_sum;
  } else {
    m.refresh_weight_copies();
    ColocatedAttention placement;
    r.loss = pair_forward_backward(m, b, scale, placement);
  }
  r.grads = m.grads;
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The property the issue asks for: recomputation repeats the forward's arithmetic, so
// the gradients are the same bits, whatever the tile (one tile, several, a ragged last
// one), the precision, the kernel, tied embeddings, and whole or ping-pong micro-batches.
TEST(Recompute, EveryModeGivesBitIdenticalGradients) {
  const PackedBatch b = batch_of(29, {0, 4, 5, 17, 29});
  const std::vector<RecomputePolicy> policies = {
      {Recompute::selective, 0}, {Recompute::full, 0}, {Recompute::full, 1}, {Recompute::selective, 2}};
  for (const Precision precision : {Precision::fp32, Precision::bf16})
    for (const bool dca : {false, true})
      for (const bool tied : {false, true})
        for (const int64_t tile : {int64_t(4096), int64_t(7), int64_t(1)})
          for (const bool pair : {false, true}) {
            const LlamaConfig c = small_config(dca, tied);
            const Result none = run(c, precision, {}, tile, b, pair);
            for (const RecomputePolicy& p : policies) {
              const Result r = run(c, precision, p, tile, b, pair);
              EXPECT_EQ(r.loss, none.loss);
              EXPECT_TRUE(same_bits(r.grads, none.grads))
                  << recompute_name(p.mode) << " layers " << p.layers << " " << precision_name(precision)
                  << " dca " << dca << " tied " << tied << " tile " << tile << " pair " << pair;
            }
          }
}

// Token tiles only split the products' rows and the weight gradients' sums over tokens:
// the gradients move by float32 summation order (29 terms per tile boundary: far below
// 1e-5 of their size), never more.
TEST(Recompute, TokenTilesChangeOnlySummationOrder) {
  const PackedBatch b = batch_of(29, {0, 4, 5, 17, 29});
  for (const bool dca : {false, true}) {
    const LlamaConfig c = small_config(dca, false);
    const Result whole = run(c, Precision::fp32, {}, 4096, b, false);
    for (const int64_t tile : {int64_t(1), int64_t(6), int64_t(16)}) {
      const Result tiled = run(c, Precision::fp32, {Recompute::full, 0}, tile, b, false);
      EXPECT_NEAR(tiled.loss, whole.loss, 1e-6 * whole.loss) << tile;
      std::vector<double> a(tiled.grads.begin(), tiled.grads.end()), w(whole.grads.begin(), whole.grads.end());
      EXPECT_LT(rel_error(a, w), 1e-5) << "tile " << tile << " dca " << dca;
    }
  }
}

// What a layer keeps per token: none everything, selective x_in, O and LSE, full x_in
// (in bf16 runs as bf16 bits); recompute_layers = N only the first N layers recompute.
// Every stage also keeps x_out and dx. The workspace holds one layer's Q, K, V (and O,
// LSE for full).
TEST(Recompute, EachModeKeepsWhatItSays) {
  const LlamaConfig c = small_config(false, false);
  const StageSpec whole = whole_model_stage(c);
  const int64_t C = c.hidden_size, L = c.num_hidden_layers, H = c.num_attention_heads;
  const int64_t qdim = H * c.head_dim(), kvdim = c.num_key_value_heads * c.head_dim();
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    const int64_t none = LlamaModel::activation_floats_per_token(c, whole, precision, {});
    const int64_t full = LlamaModel::activation_floats_per_token(c, whole, precision, {Recompute::full, 0});
    const int64_t sel = LlamaModel::activation_floats_per_token(c, whole, precision, {Recompute::selective, 0});
    const int64_t one = LlamaModel::activation_floats_per_token(c, whole, precision, {Recompute::full, 1});
    // a bf16 run keeps each layer's input as bf16 bits (half a float per value)
    const int64_t x_in = precision == Precision::bf16 ? (C + 1) / 2 : C;
    EXPECT_EQ(full, L * x_in + 2 * C);
    EXPECT_EQ(sel, L * (x_in + qdim + H) + 2 * C);
    EXPECT_EQ(one, none - (none - 2 * C) / L + x_in);  // one of L equal layers keeps only x_in
    // a later pipeline stage keeps its first layer's input as the others
    const StageSpec later{1, 3, false, true};
    EXPECT_EQ(LlamaModel::activation_floats_per_token(c, later, precision, {Recompute::full, 0}),
              2 * x_in + 2 * C);
    EXPECT_LT(full, sel);
    EXPECT_LT(sel, none);
  }
  EXPECT_EQ(LlamaModel::workspace_floats_per_token(c, whole, {}), 0);
  EXPECT_EQ(LlamaModel::workspace_floats_per_token(c, whole, {Recompute::selective, 0}), qdim + 2 * kvdim);
  EXPECT_EQ(LlamaModel::workspace_floats_per_token(c, whole, {Recompute::full, 0}), 2 * qdim + 2 * kvdim + H);
  // a pipeline stage of layers [1, 3) with recompute_layers = 1 recomputes nothing
  const StageSpec later{1, 3, false, true};
  EXPECT_EQ(LlamaModel::workspace_floats_per_token(c, later, {Recompute::full, 1}), 0);
  LlamaModel m(c);
  EXPECT_THROW(m.set_recompute({Recompute::full, int(L) + 1}), std::invalid_argument);
  EXPECT_THROW(m.set_tile_tokens(0), std::invalid_argument);
}

// A bf16 run rounds the residual stream at every layer boundary and keeps each layer's
// input as bf16 bits; a pipeline stage boundary is a layer boundary like any other. Two
// stages in one process (the first's output rounded into the second's input bits as the
// pipeline executor sends it, the gradient back in fp32) give the same loss and gradients
// as the whole model, with and without recomputation.
TEST(Recompute, Bf16StageBoundaryIsALayerBoundary) {
  const PackedBatch b = batch_of(29, {0, 4, 5, 17, 29});
  const float scale = 1.0f / float(b.num_targets());
  for (const bool dca : {false, true})
    for (const RecomputePolicy& policy : {RecomputePolicy{}, RecomputePolicy{Recompute::full, 0}}) {
      const LlamaConfig c = small_config(dca, false);
      const Result whole = run(c, Precision::bf16, policy, 4096, b, false);
      const StageSpec first{0, 1, true, false}, second{1, c.num_hidden_layers, false, true};
      LlamaModel a(c, first), z(c, second);
      for (LlamaModel* m : {&a, &z}) {
        m->set_arithmetic({.precision = Precision::bf16});
        m->set_recompute(policy);
        randomize_params(m->table(), m->params, 11);
        m->zero_grads();
        m->refresh_weight_copies();
      }
      const LocalBatch lb = whole_sequence(b);
      ColocatedAttention pa, pz;
      ActivationSlot& sa = a.begin(lb, 0);
      ActivationSlot& sz = z.begin(lb, 0);
      a.stage_forward(sa, pa);
      const int64_t n = int64_t(b.tokens.size()) * c.hidden_size;
      const SavedRows in = z.stage_input(sz);
      ASSERT_NE(in.bf16, nullptr);
      to_bf16_bits(a.stage_output(sa), n, in.bf16);
      z.stage_forward(sz, pz);
      const double loss = z.head_forward_backward(sz, scale, true).loss_sum;
      z.stage_backward(sz, pz);
      std::copy_n(z.residual_grad(sz), n, a.residual_grad(sa));
      a.stage_backward(sa, pa);
      EXPECT_EQ(loss, whole.loss) << "dca " << dca << " " << recompute_name(policy.mode);
      // each stage's gradients are zero outside its own ranges
      int64_t differ = 0;
      for (size_t i = 0; i < whole.grads.size(); ++i) differ += a.grads[i] + z.grads[i] != whole.grads[i];
      EXPECT_EQ(differ, 0) << "dca " << dca << " " << recompute_name(policy.mode);
      a.end(sa);
      z.end(sz);
    }
}

// With a large vocabulary the logits exist for kLogitRows rows at a time, never for the
// sequence: the scratch of T tokens grows with T by the per-token arrays, not by V.
TEST(Recompute, LogitsNeverSpanTheSequence) {
  LlamaConfig c = small_config(false, false);
  c.vocab_size = 32768;
  const int64_t T = 65536;
  const int64_t scratch = LlamaModel::scratch_floats(c, T, 4096);
  EXPECT_LT(scratch, T * c.vocab_size / 64);
}

// Colocated attention that does not say it is document-local: the model then runs every
// layer over the whole sequence at once (the reference for the pieces below).
class WholeSequenceAttention final : public AttentionPlacement {
 public:
  void forward(const AttentionInput& in, const float* q, const float* k, const float* v, float* out,
               float* lse) override {
    attention_forward(in.params, in.tasks, q, k, v, out, lse);
  }
  void backward(const AttentionInput& in, const float* q, const float* k, const float* v, const float* out,
                const float* lse, const float* dout, float* dq, float* dk, float* dv) override {
    attention_backward(in.params, in.tasks, q, k, v, out, lse, dout, dq, dk, dv);
  }
};

struct PieceRun {
  Result result;
  size_t pieces = 0, slices = 0;  // (slices: pieces whose keys start before their rows)
  AttentionRows window;
  int64_t attention_bytes = 0;  // the workspace's and the scratch's
};

PieceRun run_through(const LlamaConfig& c, Precision precision, const RecomputePolicy& policy, int64_t tile,
                     int64_t chunk_rows, const PackedBatch& b, AttentionPlacement& placement) {
  LlamaModel m(c);
  m.set_arithmetic({.precision = precision});
  m.set_recompute(policy);
  m.set_tile_tokens(tile);
  m.set_attention_chunk_rows(chunk_rows);
  randomize_params(m.table(), m.params, 11);
  m.zero_grads();
  m.refresh_weight_copies();
  const LocalBatch lb = whole_sequence(b);
  PieceRun r;
  ActivationSlot& s = m.begin(lb, 0);
  m.stage_forward(s, placement);
  r.result.loss = m.head_forward_backward(s, 1.0f / float(b.num_targets()), true).loss_sum;
  m.stage_backward(s, placement);
  r.result.grads = m.grads;
  r.pieces = s.pieces.size();
  for (const ActivationSlot::Piece& p : s.pieces) r.slices += p.key_begin < p.row_begin;
  r.window = s.window;
  r.attention_bytes = m.activation_bytes() - m.slot_pool().peak_bytes();
  m.end(s);
  return r;
}

// Issue 57 item 2: under colocated attention a sequence of more rows of documents than
// the kernel's runs (64K; 2,048 here, so that a short sequence makes many pieces) runs
// each layer piece by piece (one piece per attention-kernel run, the token tiles in their
// one grid across the pieces), so the attention arrays hold a window of two pieces and
// three tiles, and a document longer than a run is a run of query slices whose key side
// holds the document. Every mode, both precisions, causal, DCA and a sliding window, a
// tile that divides neither a piece nor the sequence, packed short documents and a
// 9,000-row document among them (five slices): the same loss and the same gradient
// bits as the layers run over the whole sequence at once, with less memory.
TEST(Recompute, LayersRunByPiecesGiveTheWholeSequencesBits) {
  const int64_t chunk = 2048, T = 20000;
  std::vector<int32_t> mix = {0}, one_long = {0, 500, 9500};
  while (mix.back() < T) mix.push_back(std::min<int32_t>(int32_t(T), mix.back() + 61 + 37 * int32_t(mix.size() % 13)));
  while (one_long.back() < T) one_long.push_back(std::min<int32_t>(int32_t(T), one_long.back() + 300));
  const PackedBatch batches[] = {batch_of(T, mix), batch_of(T, one_long)};
  enum Kernel { causal, dca, window };
  struct Case {
    Kernel kernel;
    Precision precision;
    Recompute mode;
    int batch;
  };
  const Case cases[] = {{causal, Precision::fp32, Recompute::none, 0}, {causal, Precision::fp32, Recompute::selective, 0},
                        {causal, Precision::bf16, Recompute::full, 0}, {dca, Precision::bf16, Recompute::selective, 0},
                        {causal, Precision::fp32, Recompute::none, 1}, {causal, Precision::fp32, Recompute::full, 1},
                        {causal, Precision::bf16, Recompute::full, 1}, {dca, Precision::fp32, Recompute::full, 1},
                        {window, Precision::fp32, Recompute::none, 1}, {window, Precision::bf16, Recompute::full, 1}};
  for (const Case& k : cases) {
    LlamaConfig c = test::llama_shape(19, 16, 24, 2, 4, 2, false);
    if (k.kernel == dca) {
      c.attention_kernel = AttentionKernel::dca;
      c.dca_chunk_size = 256;
      c.dca_local_size = 32;
    }
    if (k.kernel == window) c.attention_mask = {MaskKind::sliding_window, 40, 4, 8192};
    const int64_t tile = 701;
    const RecomputePolicy policy{k.mode, 0};
    WholeSequenceAttention whole_placement;
    ColocatedAttention colocated;
    const PieceRun whole = run_through(c, k.precision, policy, tile, chunk, batches[k.batch], whole_placement);
    const PieceRun pieces = run_through(c, k.precision, policy, tile, chunk, batches[k.batch], colocated);
    const std::string what = std::string(recompute_name(k.mode)) + " " + precision_name(k.precision) + " kernel " +
                             std::to_string(int(k.kernel)) + " batch " + std::to_string(k.batch);
    EXPECT_GE(pieces.pieces, 6u) << what;
    EXPECT_EQ(whole.pieces, pieces.pieces) << what;
    EXPECT_EQ(pieces.slices, k.batch == 1 ? 4u : 0u) << what;  // the long document's slices after its first
    EXPECT_LT(pieces.window.query, T) << what;
    EXPECT_LT(pieces.window.key, T) << what;
    EXPECT_EQ(pieces.window.key > pieces.window.query, k.batch == 1) << what;
    EXPECT_LT(pieces.attention_bytes, whole.attention_bytes) << what;
    EXPECT_EQ(pieces.result.loss, whole.result.loss) << what;
    EXPECT_TRUE(same_bits(pieces.result.grads, whole.result.grads)) << what;
  }
}

// The kernel's runs never split a group of tasks that share rows (shared_question's
// segments of one document, a context-parallel rank's pieces of one): otherwise runs of
// whole groups spanning at most max(64K, the group's rows).
TEST(Recompute, AttentionRunsKeepADocumentsTasksTogether) {
  std::vector<AttentionTask> tasks;
  // documents of 20,000 rows, the third cut into segments that all read its first rows
  for (int d = 0; d < 5; ++d) {
    const int64_t row = int64_t(d) * 20000;
    if (d != 2) {
      tasks.push_back({row, row, 20000, 20000});
      continue;
    }
    for (int seg = 0; seg < 4; ++seg)
      tasks.push_back({row + seg * 5000, row, 5000, int32_t(seg * 5000 + 5000), seg * 5000, 0});
  }
  std::vector<AttentionRun> runs;
  attention_runs(tasks, {}, kAttentionChunkRows, runs);
  // 20K + 20K + the third document (40K..60K) fit in 64K rows; the fourth and fifth follow
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].first, 0u);
  EXPECT_EQ(runs[0].end, 6u);
  EXPECT_EQ(runs[0].q_hi, 60000);
  EXPECT_EQ(runs[1].q_lo, 60000);
  EXPECT_EQ(runs[1].end, tasks.size());
  // shifted so that the cut would fall inside the third document's segments: the whole
  // document moves to the next run
  for (AttentionTask& t : tasks) t.q_row += 10000, t.kv_row += 10000;
  tasks.insert(tasks.begin(), AttentionTask{0, 0, 10000, 10000});
  attention_runs(tasks, {}, kAttentionChunkRows, runs);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].end, 3u);  // 10K + 20K + 20K; the third document's 20K more would make 70K
  EXPECT_EQ(runs[1].first, 3u);
  EXPECT_EQ(runs[1].kv_lo, 50000);
}

}  // namespace
}  // namespace lct::recompute_test
