// Rotary position embedding (RoPE): the cos/sin table, its scalings for lengths beyond
// the trained one, and the rotation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/enum_names.h"

namespace lct {

// model.rope_scaling: how the rotation frequencies treat positions beyond
// `original_length` (the length the model was trained at).
//   none     inv_freq[i] = theta^(-2i/hd)
//   linear   position interpolation (Chen et al. 2023): every inv_freq / factor
//   dynamic  NTK-aware scaling recomputed per batch: when the longest document L exceeds
//            original_length, theta' = theta (factor L / original_length - factor + 1)^(hd/(hd-2))
//   yarn     YaRN (Peng et al. 2023): pairs that turn fewer than 1 time over
//            original_length are interpolated by factor, those turning more than 32 times
//            are kept, a linear ramp in between; the logits are multiplied by
//            (0.1 ln factor + 1)^2 (cos and sin carry one factor each, for q and for k)
enum class RopeScaling { none, linear, dynamic, yarn };
inline constexpr EnumName<RopeScaling> kRopeScalingNames[] = {
    {RopeScaling::none, "none"},
    {RopeScaling::linear, "linear", "position interpolation: positions / factor"},
    {RopeScaling::dynamic, "dynamic", "NTK-aware, per batch"},
    {RopeScaling::yarn, "yarn", "NTK-by-parts with attention temperature"},
};
inline RopeScaling parse_rope_scaling(const std::string& name) { return parse_enum(kRopeScalingNames, name, "RoPE scaling"); }
inline const char* rope_scaling_name(RopeScaling value) { return enum_name(kRopeScalingNames, value); }

struct RopeSpec {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;          // >= 1
  int64_t original_length = 0;  // dynamic and yarn: > 0
};
// "RoPE scaling yarn x8 (trained length 512)"; empty for none (logs, eval, inspect)
std::string rope_scaling_text(const RopeSpec& spec);

// Hugging Face rotate_half convention: dimension i pairs with i + hd/2, angle =
// position * inv_freq[i].
struct RopeTable {
  int64_t max_positions = 0;
  int64_t half = 0;        // hd / 2
  double theta = 0;        // the base the frequencies were computed from (dynamic: scaled)
  std::vector<float> cos;  // [max_positions, half]
  std::vector<float> sin;
};
// The base `dynamic` uses for a batch whose longest document has `longest` tokens (the
// spec's theta for every other scaling, and for dynamic while longest <= original_length).
double rope_effective_theta(const RopeSpec& spec, int64_t head_dim, int64_t longest);
// inv_freq[i] of the spec for a batch whose longest document has `longest` tokens
std::vector<double> rope_inv_freq(const RopeSpec& spec, int64_t head_dim, int64_t longest);
RopeTable build_rope_table(int64_t max_positions, int64_t head_dim, const RopeSpec& spec,
                           int64_t longest);
// Unscaled RoPE with base theta
RopeTable build_rope_table(int64_t max_positions, int64_t head_dim, double theta);

// The fused Q/K/V product's rows qkv[T, (H + 2 KV) hd] (q | k | v per row) split into
// q[T, H hd], k[T, KV hd] and v[T, KV hd]: k rotated by k_positions, q times q_scale[t]
// (attention.logit_scaling; null: 1) and rotated by q_positions or copied unrotated where
// q_positions is null (DCA: its kernel rotates q), v copied. One pass: the rotation reads
// and writes each value once.
void rope_split_qkv(float* q, float* k, float* v, const float* qkv, const int32_t* q_positions,
                    const float* q_scale, const int32_t* k_positions, const RopeTable& rope, int64_t T,
                    int64_t H, int64_t KV, int64_t head_dim);
// Its backward: dq times q_scale[t] and given the transpose rotation (unrotated where
// q_positions is null), dk given the transpose rotation, joined with dv into
// dqkv[T, (H + 2 KV) hd], the fused product's output gradient; in a bf16 run written as
// bf16 bits, the rounding its products apply, in the same pass.
void rope_join_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                        const int32_t* q_positions, const float* q_scale, const int32_t* k_positions,
                        const RopeTable& rope, int64_t T, int64_t H, int64_t KV, int64_t head_dim);
void rope_join_qkv_grad(uint16_t* dqkv, const float* dq, const float* dk, const float* dv,
                        const int32_t* q_positions, const float* q_scale, const int32_t* k_positions,
                        const RopeTable& rope, int64_t T, int64_t H, int64_t KV, int64_t head_dim);

}  // namespace lct
