// Summary statistics over a whole run (never a window), percentiles by linear
// interpolation between closest ranks, as numpy's default.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fabmeter/results.hpp"

namespace fm {

struct Summary {
  uint64_t count = 0;
  double min = 0, p10 = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, max = 0, mean = 0, stdev = 0;
  std::vector<std::pair<double, double>> extra;  // (q, value) for each of reported_percentiles()
};

// The percentiles --percentiles adds to every summary this process makes
// (a session is a process of its own), beside the fixed ones above.
void set_reported_percentiles(const std::vector<double>& qs);
const std::vector<double>& reported_percentiles();
// Refuses (usage_error) a list a summary cannot name: 0 < q < 100, at most
// four decimals, at most kMaxPercentiles.
inline constexpr size_t kMaxPercentiles = 8;
void check_percentiles(const std::vector<double>& qs);
// A percentile's JSON key: "p", its whole part in at least two digits, then
// its decimals: 10 -> p10, 99.9 -> p999, 99.99 -> p9999, 1.5 -> p015.
std::string percentile_key(double q);

double percentile_sorted(const double* sorted, size_t n, double q);  // q in [0, 100]
Summary summarize(const double* v, size_t n);
JsonObj to_json(const Summary& s);
// Every figure of s scaled by f (one-way = RTT/2).
Summary scaled(Summary s, double f);

}  // namespace fm
