#include "model/rope.h"

#include <fmt/format.h>
#include <type_traits>

#include "compute/gemm.h"  // store_as

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace lct {

std::string rope_scaling_text(const RopeSpec& spec) {
  if (spec.scaling == RopeScaling::none) return {};
  std::string t = fmt::format("RoPE scaling {} x{:g}", rope_scaling_name(spec.scaling), spec.factor);
  if (spec.original_length > 0) t += " (trained length " + std::to_string(spec.original_length) + ")";
  return t;
}

double rope_effective_theta(const RopeSpec& spec, int64_t head_dim, int64_t longest) {
  if (spec.scaling != RopeScaling::dynamic || longest <= spec.original_length) return spec.theta;
  const double hd = double(head_dim);
  const double grow = spec.factor * double(longest) / double(spec.original_length) - (spec.factor - 1.0);
  return spec.theta * std::pow(grow, hd / (hd - 2.0));
}

std::vector<double> rope_inv_freq(const RopeSpec& spec, int64_t head_dim, int64_t longest) {
  const int64_t half = head_dim / 2;
  const double theta = rope_effective_theta(spec, head_dim, longest);
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  if (spec.scaling == RopeScaling::linear)
    for (double& f : inv) f /= spec.factor;
  if (spec.scaling == RopeScaling::yarn) {
    // pair i turns original_length * inv_freq[i] / 2pi times over the trained length:
    // blend weight 0 (keep) above 32 turns, 1 (interpolate) below 1 turn, linear in
    // between (the ramp is over the pair index, from where 32 turns happen to where 1
    // does, as the YaRN paper defines it; its ends rounded down and up and clamped to
    // [0, head_dim - 1] as the YaRN reference code and Hugging Face's do, so that a model
    // exported with rope_scaling yarn computes the same there)
    const double two_pi = 2.0 * std::acos(-1.0);
    auto pair_at_turns = [&](double turns) {  // the (fractional) pair index turning `turns` times
      return double(head_dim) * std::log(double(spec.original_length) / (turns * two_pi)) /
             (2.0 * std::log(spec.theta));
    };
    const double lo = std::max(std::floor(pair_at_turns(32.0)), 0.0);
    double hi = std::min(std::ceil(pair_at_turns(1.0)), double(head_dim - 1));
    if (hi == lo) hi += 1e-3;
    for (int64_t i = 0; i < half; ++i) {
      const double w = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);
      const double f = inv[size_t(i)];
      inv[size_t(i)] = (1.0 - w) * f + w * f / spec.factor;
    }
  }
  return inv;
}

RopeTable build_rope_table(int64_t max_positions, int64_t head_dim, const RopeSpec& spec,
                           int64_t longest) {
  RopeTable r;
  r.max_positions = max_positions;
  r.half = head_dim / 2;
  r.theta = rope_effective_theta(spec, head_dim, longest);
  const std::vector<double> inv = rope_inv_freq(spec, head_dim, longest);
  // yarn's attention temperature: one factor on q's rotation, one on k's
  const double m = spec.scaling == RopeScaling::yarn && spec.factor > 1.0 ? 0.1 * std::log(spec.factor) + 1.0 : 1.0;
  r.cos.resize(size_t(max_positions * r.half));
  r.sin.resize(size_t(max_positions * r.half));
  for (int64_t i = 0; i < r.half; ++i) {
    // computed in double so long positions keep their accuracy, then rounded once
    for (int64_t p = 0; p < max_positions; ++p) {
      const double angle = double(p) * inv[size_t(i)];
      r.cos[size_t(p * r.half + i)] = float(m * std::cos(angle));
      r.sin[size_t(p * r.half + i)] = float(m * std::sin(angle));
    }
  }
  return r;
}

RopeTable build_rope_table(int64_t max_positions, int64_t head_dim, double theta) {
  RopeSpec spec;
  spec.theta = theta;
  return build_rope_table(max_positions, head_dim, spec, 0);
}

namespace {
// `heads` heads of one row from src to dst, times mult, rotated by the table's row cs/sn
// (sign -1: the transpose rotation), or copied where cs is null (mult 1 changes no bit)
template <typename Out>
void rotate_heads(Out* dst, const float* src, const float* cs, const float* sn, int64_t heads, int64_t head_dim,
                  float sign, float mult = 1.0f) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* x = src + h * head_dim;
    Out* y = dst + h * head_dim;
    if (!cs) {
#pragma omp simd
      for (int64_t i = 0; i < head_dim; ++i) y[i] = store_as<Out>(x[i] * mult);
      continue;
    }
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i] * mult, b = x[i + half] * mult, s = sign * sn[i];
      y[i] = store_as<Out>(a * cs[i] - b * s);
      y[i + half] = store_as<Out>(b * cs[i] + a * s);
    }
  }
}

template <typename Out>
void join_qkv_grad(Out* dqkv, const float* dq, const float* dk, const float* dv, const int32_t* q_positions,
                   const float* q_scale, const int32_t* k_positions, const RopeTable& rope, int64_t T, int64_t H,
                   int64_t KV, int64_t hd) {
  const int64_t half = hd / 2, qdim = H * hd, kvdim = KV * hd, width = qdim + 2 * kvdim;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    Out* row = dqkv + t * width;
    const int64_t qp = q_positions ? q_positions[t] : 0, kp = k_positions[t];
    rotate_heads(row, dq + t * qdim, q_positions ? rope.cos.data() + qp * half : nullptr,
                 rope.sin.data() + qp * half, H, hd, -1.0f, q_scale ? q_scale[t] : 1.0f);
    rotate_heads(row + qdim, dk + t * kvdim, rope.cos.data() + kp * half, rope.sin.data() + kp * half, KV, hd, -1.0f);
    rotate_heads(row + qdim + kvdim, dv + t * kvdim, nullptr, nullptr, KV, hd, 1.0f);
  }
}
}  // namespace

void rope_split_qkv(float* q, float* k, float* v, const float* qkv, const int32_t* q_positions,
                    const float* q_scale, const int32_t* k_positions, const RopeTable& rope, int64_t T, int64_t H,
                    int64_t KV, int64_t hd) {
  const int64_t half = hd / 2, qdim = H * hd, kvdim = KV * hd, width = qdim + 2 * kvdim;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* row = qkv + t * width;
    const int64_t qp = q_positions ? q_positions[t] : 0, kp = k_positions[t];
    rotate_heads(q + t * qdim, row, q_positions ? rope.cos.data() + qp * half : nullptr, rope.sin.data() + qp * half,
                 H, hd, 1.0f, q_scale ? q_scale[t] : 1.0f);
    rotate_heads(k + t * kvdim, row + qdim, rope.cos.data() + kp * half, rope.sin.data() + kp * half, KV, hd, 1.0f);
    rotate_heads(v + t * kvdim, row + qdim + kvdim, nullptr, nullptr, KV, hd, 1.0f);
  }
}

void rope_join_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv, const int32_t* q_positions,
                        const float* q_scale, const int32_t* k_positions, const RopeTable& rope, int64_t T, int64_t H,
                        int64_t KV, int64_t hd) {
  join_qkv_grad(dqkv, dq, dk, dv, q_positions, q_scale, k_positions, rope, T, H, KV, hd);
}

void rope_join_qkv_grad(uint16_t* dqkv, const float* dq, const float* dk, const float* dv,
                        const int32_t* q_positions, const float* q_scale, const int32_t* k_positions,
                        const RopeTable& rope, int64_t T, int64_t H, int64_t KV, int64_t hd) {
  join_qkv_grad(dqkv, dq, dk, dv, q_positions, q_scale, k_positions, rope, T, H, KV, hd);
}

}  // namespace lct
