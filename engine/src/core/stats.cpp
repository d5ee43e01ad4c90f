#include "fabmeter/stats.hpp"

#include <algorithm>
#include <cmath>

namespace fm {

double percentile_sorted(const double* s, size_t n, double q) {
  if (n == 0) return NAN;
  double pos = (static_cast<double>(n) - 1) * q / 100.0;
  size_t lo = static_cast<size_t>(pos);
  if (lo + 1 >= n) return s[n - 1];
  double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[lo + 1] - s[lo]) * frac;
}

Summary summarize(const double* v, size_t n) {
  Summary r;
  r.count = n;
  if (n == 0) {
    r.min = r.p50 = r.p90 = r.p99 = r.p999 = r.max = r.mean = r.stdev = NAN;
    return r;
  }
  std::vector<double> s(v, v + n);
  std::sort(s.begin(), s.end());
  r.min = s.front();
  r.max = s.back();
  r.p50 = percentile_sorted(s.data(), n, 50);
  r.p90 = percentile_sorted(s.data(), n, 90);
  r.p99 = percentile_sorted(s.data(), n, 99);
  r.p999 = percentile_sorted(s.data(), n, 99.9);
  // Two-pass mean/variance: stable for the ns-scale values with large offsets we get.
  double sum = 0;
  for (double x : s) sum += x;
  r.mean = sum / static_cast<double>(n);
  double sq = 0;
  for (double x : s) sq += (x - r.mean) * (x - r.mean);
  r.stdev = std::sqrt(sq / static_cast<double>(n));  // population stdev, numpy's default (ddof=0)
  return r;
}

JsonObj to_json(const Summary& s) {
  JsonObj o;
  o.add("min", s.min).add("p50", s.p50).add("p90", s.p90).add("p99", s.p99).add("p999", s.p999)
      .add("max", s.max).add("mean", s.mean).add("stdev", s.stdev);
  return o;
}

}  // namespace fm
