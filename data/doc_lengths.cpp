#include "data/doc_lengths.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "data/rng.h"

namespace lct {
namespace {

constexpr int64_t K = 1024;
constexpr uint64_t kLengthStream = 0x6c656e67;  // "leng"

// LongCA-bench raw histograms (percent of documents per length range), see
// shared/reference/parallelism-and-data.md §4.2. Ranges are inclusive: [1, 10],
// [11, 50], ... up to each range's end below; a histogram covers the first ranges.
constexpr std::array<int64_t, 19> kRangeEnds = {10,     50,     100,    200,    500,     1 * K,   2 * K,
                                                4 * K,  8 * K,  12 * K, 16 * K, 24 * K,  32 * K,  48 * K,
                                                64 * K, 128 * K, 192 * K, 384 * K, 512 * K};
std::vector<LengthBin> histogram(std::initializer_list<double> percents) {
  std::vector<LengthBin> bins;
  int64_t lo = 1;
  for (const double percent : percents) {
    const int64_t hi = kRangeEnds.at(bins.size());
    bins.push_back({lo, hi, percent});
    lo = hi + 1;
  }
  return bins;
}
const std::vector<LengthBin> kPile = histogram({0.72, 5.99, 10.23, 22.01, 32.58, 12.94, 7.22, 4.28, 2.99, 0.67,
                                                0.19, 0.10, 0.03, 0.02, 0.01, 0.02});
const std::vector<LengthBin> kProlong64k = histogram({0.06, 2.13, 8.27, 17.03, 32.86, 23.44, 10.13, 3.54, 1.30,
                                                      0.32, 0.14, 0.24, 0.13, 0.20, 0.21});
const std::vector<LengthBin> kProlong512k = histogram({0.06, 2.52, 8.85, 18.47, 33.81, 22.22, 9.09, 2.97, 1.03, 0.24,
                                                       0.09, 0.17, 0.09, 0.16, 0.17, 0.01, 0.01, 0.03, 0.004});

// DistCA "Pretrain": WLB-LLM corpus token shares per power-of-two length range
// (percent of tokens), converted to document weights by dividing by the range's mean
// length, then DistCA's up-sampling (keep 50% of documents under 64K, repeat longer
// ones 4x) which multiplies the long range's document weight by 8. After this, long
// documents hold ~54% of tokens, as the reference notes state.
std::vector<LengthBin> make_pretrain_bins() {
  struct Share {
    int64_t lo, hi;
    double token_percent;
  };
  const Share shares[] = {{1, 1 * K, 2.1},           {1 * K + 1, 2 * K, 6.1},
                          {2 * K + 1, 4 * K, 24.8},  {4 * K + 1, 8 * K, 44.6},
                          {8 * K + 1, 16 * K, 2.9},  {16 * K + 1, 32 * K, 2.6},
                          {32 * K + 1, 64 * K, 4.2}, {64 * K + 1, 128 * K, 12.8}};
  std::vector<LengthBin> bins;
  for (const Share& s : shares) {
    const double mean_len = 0.5 * double(s.lo + s.hi);
    const double upsample = s.lo > 64 * K ? 8.0 : 1.0;
    bins.push_back({s.lo, s.hi, upsample * s.token_percent / mean_len});
  }
  return bins;
}
const std::vector<LengthBin> kPretrain = make_pretrain_bins();
const std::vector<LengthBin> kNone;

}  // namespace

const std::vector<LengthBin>& length_bins(DocLengthDist dist) {
  switch (dist) {
    case DocLengthDist::pile: return kPile;
    case DocLengthDist::prolong64k: return kProlong64k;
    case DocLengthDist::prolong512k: return kProlong512k;
    case DocLengthDist::pretrain: return kPretrain;
    default: return kNone;
  }
}

std::string DocLengthSampler::describe() const {
  return std::string(doc_length_dist_name(dist)) + " in [" + std::to_string(min_doc_len) + ", " +
         std::to_string(max_doc_len) + "]";
}

int64_t DocLengthSampler::length(int64_t index) const {
  Rng rng(seed, kLengthStream, uint64_t(index));
  switch (dist) {
    case DocLengthDist::fixed: return max_doc_len;
    case DocLengthDist::uniform: return rng.uniform_int(min_doc_len, max_doc_len);
    default: break;
  }
  const std::vector<LengthBin>& bins = length_bins(dist);
  double total = 0.0;
  for (const LengthBin& b : bins) total += b.weight;
  double u = rng.uniform() * total;
  size_t bin = 0;
  while (bin + 1 < bins.size() && u >= bins[bin].weight) u -= bins[bin++].weight;
  const int64_t raw = rng.uniform_int(bins[bin].lo, bins[bin].hi);
  const double scaled = double(raw) * double(max_doc_len) / double(bins.back().hi);
  return std::clamp<int64_t>(int64_t(std::llround(scaled)), min_doc_len, max_doc_len);
}

}  // namespace lct
