#include "data/doc_lengths.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/rng.h"

namespace lct {
namespace {

constexpr int64_t K = 1024;
constexpr uint64_t kLengthStream = 0x6c656e67;  // "leng"

// LongCA-bench raw histograms (percent of documents per length range), see
// shared/reference/parallelism-and-data.md §4.2. Ranges are inclusive.
const std::vector<LengthBin> kPile = {
    {1, 10, 0.72},           {11, 50, 5.99},         {51, 100, 10.23},
    {101, 200, 22.01},       {201, 500, 32.58},      {501, 1 * K, 12.94},
    {1 * K + 1, 2 * K, 7.22}, {2 * K + 1, 4 * K, 4.28}, {4 * K + 1, 8 * K, 2.99},
    {8 * K + 1, 12 * K, 0.67}, {12 * K + 1, 16 * K, 0.19}, {16 * K + 1, 24 * K, 0.10},
    {24 * K + 1, 32 * K, 0.03}, {32 * K + 1, 48 * K, 0.02}, {48 * K + 1, 64 * K, 0.01},
    {64 * K + 1, 128 * K, 0.02}};
const std::vector<LengthBin> kProlong64k = {
    {1, 10, 0.06},           {11, 50, 2.13},         {51, 100, 8.27},
    {101, 200, 17.03},       {201, 500, 32.86},      {501, 1 * K, 23.44},
    {1 * K + 1, 2 * K, 10.13}, {2 * K + 1, 4 * K, 3.54}, {4 * K + 1, 8 * K, 1.30},
    {8 * K + 1, 12 * K, 0.32}, {12 * K + 1, 16 * K, 0.14}, {16 * K + 1, 24 * K, 0.24},
    {24 * K + 1, 32 * K, 0.13}, {32 * K + 1, 48 * K, 0.20}, {48 * K + 1, 64 * K, 0.21}};
const std::vector<LengthBin> kProlong512k = {
    {1, 10, 0.06},           {11, 50, 2.52},         {51, 100, 8.85},
    {101, 200, 18.47},       {201, 500, 33.81},      {501, 1 * K, 22.22},
    {1 * K + 1, 2 * K, 9.09}, {2 * K + 1, 4 * K, 2.97}, {4 * K + 1, 8 * K, 1.03},
    {8 * K + 1, 12 * K, 0.24}, {12 * K + 1, 16 * K, 0.09}, {16 * K + 1, 24 * K, 0.17},
    {24 * K + 1, 32 * K, 0.09}, {32 * K + 1, 48 * K, 0.16}, {48 * K + 1, 64 * K, 0.17},
    {64 * K + 1, 128 * K, 0.01}, {128 * K + 1, 192 * K, 0.01}, {192 * K + 1, 384 * K, 0.03},
    {384 * K + 1, 512 * K, 0.004}};

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
