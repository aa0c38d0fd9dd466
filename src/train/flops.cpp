#include "src/train/flops.h"

namespace lct {

double forward_flops(const LlamaConfig& c, int64_t tokens, int64_t pairs) {
  const double matmul = 2.0 * double(matmul_params_per_token(c)) * double(tokens);
  const double attention = 4.0 * double(c.num_attention_heads) * double(c.head_dim()) *
                           double(c.num_hidden_layers) * double(pairs);
  return matmul + attention;
}

double linear_pairs_per_token(const LlamaConfig& c) { return forward_flops(c, 1, 0) / forward_flops(c, 0, 1); }

double train_step_flops(const LlamaConfig& c, int64_t tokens, int64_t pairs) {
  return 3.0 * forward_flops(c, tokens, pairs);
}

}  // namespace lct
