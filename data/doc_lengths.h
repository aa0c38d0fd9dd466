// Document-length distributions for the synthetic source.
//   fixed        every document is max_doc_len tokens
//   uniform      uniform integer in [min_doc_len, max_doc_len]
//   pile, prolong64k, prolong512k
//                LongCA-bench's empirical histograms (share of documents per length range)
//   pretrain     DistCA's "Pretrain" mix: the WLB-LLM corpus with long documents up-sampled
// Empirical shapes are scaled so the table's largest length maps to max_doc_len, then
// clamped to [min_doc_len, max_doc_len].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/enum_names.h"

namespace lct {

enum class DocLengthDist { fixed, uniform, pile, prolong64k, prolong512k, pretrain };

inline constexpr EnumName<DocLengthDist> kDocLengthDistNames[] = {
    {DocLengthDist::fixed, "fixed", "every document data.max_doc_len tokens"},
    {DocLengthDist::uniform, "uniform", "uniform in [data.min_doc_len, data.max_doc_len]"},
    {DocLengthDist::pile, "pile", "LongCA-bench's Pile histogram"},
    {DocLengthDist::prolong64k, "prolong64k", "LongCA-bench's ProLong 64K histogram"},
    {DocLengthDist::prolong512k, "prolong512k", "LongCA-bench's ProLong 512K histogram"},
    {DocLengthDist::pretrain, "pretrain", "DistCA's Pretrain mix, long documents up-sampled"},
};
inline DocLengthDist parse_doc_length_dist(const std::string& name) { return parse_enum(kDocLengthDistNames, name, "document-length distribution"); }
inline const char* doc_length_dist_name(DocLengthDist value) { return enum_name(kDocLengthDistNames, value); }

struct DocLengthSampler {
  DocLengthDist dist = DocLengthDist::fixed;
  int64_t min_doc_len = 1;
  int64_t max_doc_len = 1;
  uint64_t seed = 0;

  // Length of document `index` of the stream: a pure function of (seed, index).
  int64_t length(int64_t index) const;
  // "pretrain in [1, 2048]": the distribution and its bounds, for the sources' describe()
  std::string describe() const;
};

// One bin of an empirical table: lengths in [lo, hi] drawn with relative weight.
struct LengthBin {
  int64_t lo, hi;
  double weight;
};
// The (unscaled) bins of an empirical distribution; empty for fixed/uniform.
const std::vector<LengthBin>& length_bins(DocLengthDist dist);

}  // namespace lct
