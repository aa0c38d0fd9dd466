// Shared helpers for the tests: deterministic random fills, finite differences and a
// ping-pong pair through a model.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/context_shards.h"
#include "data/nano_batches.h"
#include "data/rng.h"
#include "model/llama.h"
#include "model/llama_config.h"
#include "model/tensor_table.h"

namespace lct::test {

// A Llama config of the given shape (everything else at its default).
inline LlamaConfig llama_shape(int64_t vocab, int64_t hidden, int64_t mlp, int layers, int heads, int kv_heads,
                               bool tied = false) {
  LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = mlp;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.tie_word_embeddings = tied;
  return c;
}

inline std::vector<float> random_vector(int64_t n, uint64_t seed, double scale = 1.0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(scale * normal_at(seed, 77, uint64_t(i)));
  return v;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

inline double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// Central finite differences of a scalar function of `x` at every index in `indices`
// (all indices when empty). The function is evaluated in float, so eps is kept
// moderate; ops tested this way are smooth.
inline std::vector<double> finite_difference(std::vector<float>& x,
                                             const std::function<double()>& f, double eps,
                                             const std::vector<int64_t>& indices) {
  std::vector<double> g;
  for (int64_t i : indices) {
    const float saved = x[size_t(i)];
    x[size_t(i)] = float(saved + eps);
    const double up = f();
    x[size_t(i)] = float(saved - eps);
    const double down = f();
    x[size_t(i)] = saved;
    g.push_back((up - down) / (2 * eps));
  }
  return g;
}

// The message of the exception f throws, or "" when it throws nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// 0, step, 2*step, ... below n (finite differences on a sample of a large tensor).
inline std::vector<int64_t> every_nth_index(int64_t n, int64_t step) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; i += step) v.push_back(i);
  return v;
}

inline std::vector<int64_t> all_indices(int64_t n) { return every_nth_index(n, 1); }

// Parameters larger than the training init, so every path carries signal; norm
// weights near 1.
inline void randomize_params(const TensorTable& table, std::vector<float>& params, uint64_t seed) {
  const std::vector<float> r = random_vector(int64_t(params.size()), seed, 0.4);
  for (const TensorSpec& s : table.specs())
    for (int64_t i = 0; i < s.numel; ++i) {
      const size_t k = size_t(s.offset + i);
      params[k] = s.init == TensorInit::ones ? 1.0f + r[k] * 0.5f : r[k];
    }
}

// b as the ping-pong pair (its two nano-batches, lanes 0 and 1) through m's whole stage
// with `placement`: forward, each lane's head (loss sum: lane 0's plus lane 1's) and
// backward. Returns the loss sum.
inline double pair_forward_backward(LlamaModel& m, const PackedBatch& b, float scale, AttentionPlacement& placement) {
  const LocalBatch whole = whole_sequence(b);
  const std::array<LocalBatch, 2> halves = split_nano_batches(whole);
  ActivationSlot& s0 = m.begin(halves[0], 0, 0);
  ActivationSlot& s1 = m.begin(halves[1], 1, 1);
  m.stage_forward_pair(s0, s1, placement);
  double loss = m.head_forward_backward(s0, scale, true).loss_sum;
  loss += m.head_forward_backward(s1, scale, true).loss_sum;
  m.stage_backward_pair(s0, s1, placement);
  m.end(s0);
  m.end(s1);
  return loss;
}

inline std::vector<double> pick(const std::vector<float>& v, const std::vector<int64_t>& idx) {
  std::vector<double> r;
  for (int64_t i : idx) r.push_back(v[size_t(i)]);
  return r;
}

}  // namespace lct::test
