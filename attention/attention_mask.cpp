#include "attention/attention_mask.h"

#include <stdexcept>

namespace lct {

namespace {
struct MaskName {
  MaskKind kind;
  const char* name;
};
constexpr MaskName kMaskNames[] = {
    {MaskKind::causal, "causal"},
    {MaskKind::sliding_window, "sliding_window"},
    {MaskKind::sink_window, "sink_window"},
    {MaskKind::chunked, "chunked"},
    {MaskKind::prefix_lm, "prefix_lm"},
    {MaskKind::shared_question, "shared_question"},
};
}  // namespace

const char* mask_kind_names() {
  return "causal, sliding_window, sink_window, chunked, prefix_lm, shared_question";
}

MaskKind parse_mask_kind(const std::string& name) {
  for (const MaskName& m : kMaskNames)
    if (name == m.name) return m.kind;
  throw std::invalid_argument("unknown attention mask '" + name + "' (expected: " + mask_kind_names() + ")");
}

const char* mask_kind_name(MaskKind kind) {
  for (const MaskName& m : kMaskNames)
    if (kind == m.kind) return m.name;
  return "?";
}

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
