#include "fabmeter/stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fabmeter/error.hpp"

namespace fm {

namespace {
std::vector<double>& reported() {
  static std::vector<double> qs;
  return qs;
}
// The fixed percentiles of Summary: an extra one equal to these is not repeated.
constexpr double kFixed[] = {10, 50, 90, 99, 99.9, 99.99};
bool fixed(double q) { return std::find(std::begin(kFixed), std::end(kFixed), q) != std::end(kFixed); }
}  // namespace

void check_percentiles(const std::vector<double>& qs) {
  if (qs.size() > kMaxPercentiles)
    usage_error("--percentiles takes at most " + std::to_string(kMaxPercentiles) + " values");
  for (double q : qs) {
    if (!(q > 0 && q < 100)) usage_error("--percentiles: each must be above 0 and below 100");
    if (std::fabs(q * 1e4 - std::round(q * 1e4)) > 1e-6)
      usage_error("--percentiles: at most four decimals (their JSON keys must differ)");
  }
}

void set_reported_percentiles(const std::vector<double>& qs) {
  check_percentiles(qs);
  std::vector<double>& r = reported();
  r.clear();
  for (double q : qs)
    if (!fixed(q) && std::find(r.begin(), r.end(), q) == r.end()) r.push_back(q);
  std::sort(r.begin(), r.end());
}

const std::vector<double>& reported_percentiles() { return reported(); }

std::string percentile_key(double q) {
  const long long scaled = std::llround(q * 1e4);  // four decimals at most
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld%04lld", scaled / 10000, scaled % 10000);
  std::string digits(buf);
  while (digits.size() > 2 && digits.back() == '0') digits.pop_back();
  return "p" + digits;
}

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
    r.min = r.p10 = r.p50 = r.p90 = r.p99 = r.p999 = r.p9999 = r.max = r.mean = r.stdev = NAN;
    for (double q : reported()) r.extra.emplace_back(q, NAN);
    return r;
  }
  std::vector<double> s(v, v + n);
  std::sort(s.begin(), s.end());
  r.min = s.front();
  r.max = s.back();
  r.p10 = percentile_sorted(s.data(), n, 10);
  r.p50 = percentile_sorted(s.data(), n, 50);
  r.p90 = percentile_sorted(s.data(), n, 90);
  r.p99 = percentile_sorted(s.data(), n, 99);
  r.p999 = percentile_sorted(s.data(), n, 99.9);
  r.p9999 = percentile_sorted(s.data(), n, 99.99);
  for (double q : reported()) r.extra.emplace_back(q, percentile_sorted(s.data(), n, q));
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
  o.add("min", s.min).add("p10", s.p10).add("p50", s.p50).add("p90", s.p90).add("p99", s.p99).add("p999", s.p999)
      .add("p9999", s.p9999);
  for (const auto& [q, v] : s.extra) o.add(percentile_key(q), v);
  o.add("max", s.max).add("mean", s.mean).add("stdev", s.stdev);
  return o;
}

Summary scaled(Summary s, double f) {
  for (double* v : {&s.min, &s.p10, &s.p50, &s.p90, &s.p99, &s.p999, &s.p9999, &s.max, &s.mean, &s.stdev}) *v *= f;
  for (auto& qv : s.extra) qv.second *= f;
  return s;
}

}  // namespace fm
