#include "attention/attention_mask.h"

#include <stdexcept>

namespace lct {

std::string AttentionMask::validate() const {
  switch (kind) {
    case MaskKind::sliding_window:
    case MaskKind::sink_window:
      if (window < 1)
        return std::string("attention.window must be >= 1 for attention.mask = ") + mask_kind_name(kind) +
               " (got " + std::to_string(window) + ")";
      if (kind == MaskKind::sink_window && sink_tokens < 0)
        return "attention.sink_tokens must be >= 0 (got " + std::to_string(sink_tokens) + ")";
      break;
    case MaskKind::chunked:
      if (block_size < 1)
        return "attention.block_size must be >= 1 for attention.mask = chunked (got " +
               std::to_string(block_size) + ")";
      break;
    default: break;
  }
  return {};
}

std::string AttentionMask::describe() const {
  std::string s = mask_kind_name(kind);
  switch (kind) {
    case MaskKind::sliding_window: s += " (window " + std::to_string(window) + ")"; break;
    case MaskKind::sink_window:
      s += " (window " + std::to_string(window) + ", sinks " + std::to_string(sink_tokens) + ")";
      break;
    case MaskKind::chunked: s += " (block " + std::to_string(block_size) + ")"; break;
    default: break;
  }
  return s;
}

}  // namespace lct
