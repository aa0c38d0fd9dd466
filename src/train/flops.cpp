#include "src/train/flops.h"

namespace lct {

double forward_flops(const LlamaConfig& c, int64_t tokens, int64_t pairs) {
  const double matmul = 2.0 * double(matmul_params_per_token(c)) * double(tokens);
  const double attention = 4.0 * double(c.num_attention_heads) * double(c.head_dim()) *
                           double(c.num_hidden_layers) * double(pairs);
  return matmul + attention;
}

double train_step_flops(const LlamaConfig& c, int64_t tokens, int64_t pairs) {
  return 3.0 * forward_flops(c, tokens, pairs);
}

int64_t attention_pairs(const PackedBatch& b) {
  int64_t pairs = 0;
  for (size_t d = 0; d + 1 < b.cu_seqlens.size(); ++d) {
    const int32_t L = b.cu_seqlens[d + 1] - b.cu_seqlens[d];
    pairs += attention_pairs(AttentionTask{b.cu_seqlens[d], b.cu_seqlens[d], L, L, 0, 0, L});  // whole document
  }
  return pairs;
}

}  // namespace lct
