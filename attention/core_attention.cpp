#include "attention/core_attention.h"

#include <stdexcept>

#include "attention/blocked_attention.h"

namespace lct {

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "causal") return AttentionKernel::causal;
  throw std::invalid_argument("unknown attention kernel '" + name + "' (expected: causal)");
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::causal: return "causal";
  }
  return "?";
}

std::vector<AttentionTask> tasks_for_documents(std::span<const int32_t> cu_seqlens) {
  std::vector<AttentionTask> tasks;
  tasks_for_documents(cu_seqlens, tasks);
  return tasks;
}

void tasks_for_documents(std::span<const int32_t> cu_seqlens, std::vector<AttentionTask>& tasks) {
  tasks.clear();
  if (cu_seqlens.size() < 2) return;
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    AttentionTask t;
    t.q_row = t.kv_row = cu_seqlens[d];
    t.q_len = t.kv_len = cu_seqlens[d + 1] - cu_seqlens[d];
    t.q_pos = t.kv_pos = 0;
    if (t.q_len > 0) tasks.push_back(t);
  }
}

int64_t attended_pairs(std::span<const AttentionTask> tasks) {
  int64_t pairs = 0;
  for (const AttentionTask& t : tasks) {
    for (int64_t i = 0; i < t.q_len; ++i) {
      // keys j in [0, kv_len) with kv_pos + j <= q_pos + i
      int64_t visible = int64_t(t.q_pos) + i - t.kv_pos + 1;
      if (visible > t.kv_len) visible = t.kv_len;
      if (visible > 0) pairs += visible;
    }
  }
  return pairs;
}

static void check_params(const AttentionParams& p) {
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.num_heads % p.num_kv_heads != 0)
    throw std::invalid_argument("attention: invalid head configuration");
}

void attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                       const float* q, const float* k, const float* v, float* out, float* lse) {
  check_params(params);
  switch (params.kernel) {
    case AttentionKernel::causal:
      blocked_attention_forward(params, tasks, q, k, v, out, lse);
      return;
  }
}

void attention_backward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                        const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  check_params(params);
  switch (params.kernel) {
    case AttentionKernel::causal:
      blocked_attention_backward(params, tasks, q, k, v, out, lse, dout, dq, dk, dv);
      return;
  }
}

void attention_release_workspace() { blocked_attention_release_workspace(); }

}  // namespace lct
