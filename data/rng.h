// Counter-based random numbers: every draw is a pure function of (seed, stream, index),
// so data and initialisation never depend on the order work is done in, the number of
// threads or ranks, or how far a run got before it was resumed.
#pragma once

#include <cmath>
#include <cstdint>

namespace lct {

// splitmix64 finaliser: a strong 64-bit mixing function.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
  return mix64(mix64(mix64(a) ^ b) ^ c);
}

// A small sequential generator started from a hashed key (splitmix64 stream).
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream, uint64_t index) : state_(hash3(seed, stream, index)) {}
  uint64_t next() { return mix64(state_++); }
  // uniform in [0, 1) with 53 random bits
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  // uniform integer in [lo, hi] (inclusive); small modulo bias is irrelevant here
  int64_t uniform_int(int64_t lo, int64_t hi) {
    return lo + int64_t(next() % uint64_t(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

// Standard normal as a pure function of (seed, stream, index), Box-Muller.
inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t a = hash3(seed, stream, 2 * index), b = hash3(seed, stream, 2 * index + 1);
  const double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = double(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace lct
