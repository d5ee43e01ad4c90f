// The seeded generator behind load's random choices (arrival gaps, message
// sizes). std::mt19937_64's sequence is fixed by the C++ standard, and the
// draw to [0, 1) below is ours, not a library's distribution (whose
// algorithm is implementation-defined), so a seed gives the same run with
// any compiler.
#pragma once
#include <cstdint>
#include <random>

namespace fm {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [0, 1), 53 random bits: never 1.0, so 1 - u is never 0.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 gen_;
};

}  // namespace fm
