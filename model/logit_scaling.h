// Length-dependent logit scaling (attention.logit_scaling): every logit of a query is
// multiplied by a factor of the number of keys it sees, so that a head's weight on one
// matching key does not fade as a document grows (attention dilution: with n keys of
// equal competitors a match needs logits that grow with log n; Chiang & Cholak 2022,
// Scalable-Softmax, Nakanishi 2025, arXiv 2501.19399; Qwen's use_logn_attn).
//
// n = p + 1 for a query at in-document position p (the keys the causal rule lets it
// read; DCA reads the same keys), and L = attention.logit_scaling_length:
//   none         1
//   logn         ln(n) / ln(L)           at every position: trained in (Scalable-Softmax
//                                        with its s fixed at 1 / ln L; the weights absorb
//                                        any other constant), 1 at n = L
//   logn_beyond  max(1, ln(n) / ln(L))   1 up to L (Qwen's logn attention: applied to a
//                                        model trained without it, for n beyond L)
// The factor multiplies q before core attention (and dq after it), so every kernel,
// placement and precision sees the scaled query: it composes with DCA's own multiplier.
#pragma once

#include <cstdint>
#include <string>

#include "compute/enum_names.h"

namespace lct {

enum class LogitScalingKind { none, logn, logn_beyond };
inline constexpr EnumName<LogitScalingKind> kLogitScalingNames[] = {
    {LogitScalingKind::none, "none"},
    {LogitScalingKind::logn, "logn", "ln(n) / ln(L) at every position, trained in"},
    {LogitScalingKind::logn_beyond, "logn_beyond", "max(1, ln(n) / ln(L)): only beyond L"},
};
inline LogitScalingKind parse_logit_scaling(const std::string& name) {
  return parse_enum(kLogitScalingNames, name, "logit scaling");
}
inline const char* logit_scaling_name(LogitScalingKind value) { return enum_name(kLogitScalingNames, value); }

struct LogitScaling {
  LogitScalingKind kind = LogitScalingKind::none;
  int64_t length = 0;  // L, > 1 unless kind is none
  bool on() const { return kind != LogitScalingKind::none; }
};

// The factor of a query at in-document position p (computed in double, rounded once).
float logit_scale(const LogitScaling& scaling, int64_t position);
// "logit scaling logn (L 512)"; empty for none (logs, eval, inspect)
std::string logit_scaling_text(const LogitScaling& scaling);

}  // namespace lct
