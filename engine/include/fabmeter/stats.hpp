// Summary statistics over a whole run (never a window), percentiles by linear
// interpolation between closest ranks, as numpy's default.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabmeter/results.hpp"

namespace fm {

struct Summary {
  uint64_t count = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, mean = 0, stdev = 0;
};

double percentile_sorted(const double* sorted, size_t n, double q);  // q in [0, 100]
Summary summarize(const double* v, size_t n);
JsonObj to_json(const Summary& s);

}  // namespace fm
