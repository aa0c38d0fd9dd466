#include "attention/attention_mask.h"

#include <stdexcept>

namespace lct {

std::string AttentionMask::validate() const {
  switch (kind) {
    case MaskKind::sliding_window:
    case MaskKind::sink_window:
    case MaskKind::bidirectional_window:
      if (window < 1)
        return std::string("attention.window must be >= 1 for attention.mask = ") + mask_kind_name(kind) +
               " (got " + std::to_string(window) + ")";
      if (kind == MaskKind::sink_window && sink_tokens < 0)
        return "attention.sink_tokens must be >= 0 (got " + std::to_string(sink_tokens) + ")";
      break;
    case MaskKind::chunked:
    case MaskKind::causal_blockwise:
    case MaskKind::block_sparse:
      if (block_size < 1)
        return std::string("attention.block_size must be >= 1 for attention.mask = ") + mask_kind_name(kind) +
               " (got " + std::to_string(block_size) + ")";
      if (kind == MaskKind::block_sparse && top_blocks < 0)
        return "attention.top_blocks must be >= 0 (got " + std::to_string(top_blocks) + ")";
      break;
    default: break;
  }
  return {};
}

std::string AttentionMask::next_token_problem(const std::string& command) const {
  if (!reads_ahead() || kind == MaskKind::prefix_lm) return {};
  const std::string use = command == "lct train"  ? "cannot train under it"
                          : command == "lct eval" ? "would score tokens it has read"
                                                  : "cannot predict under it";
  return std::string("attention.mask = ") + mask_kind_name(kind) +
         " lets a query read the token it predicts, so the next-token loss " + use + " (lct bench runs it; " +
         command + " takes the causal masks and prefix_lm)";
}

std::string AttentionMask::describe() const {
  std::string s = mask_kind_name(kind);
  switch (kind) {
    case MaskKind::sliding_window: s += " (window " + std::to_string(window) + ")"; break;
    case MaskKind::sink_window:
      s += " (window " + std::to_string(window) + ", sinks " + std::to_string(sink_tokens) + ")";
      break;
    case MaskKind::chunked:
    case MaskKind::causal_blockwise: s += " (block " + std::to_string(block_size) + ")"; break;
    case MaskKind::bidirectional_window: s += " (window " + std::to_string(window) + ")"; break;
    case MaskKind::block_sparse:
      s += " (block " + std::to_string(block_size) + ", top " + std::to_string(top_blocks) + ")";
      break;
    default: break;
  }
  return s;
}

}  // namespace lct
