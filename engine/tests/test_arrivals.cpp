// fm::Arrivals: each kind keeps its mean rate, poisson gaps are exponential
// and uniform gaps uniform (Kolmogorov-Smirnov, fixed seed: deterministic),
// and no schedule drifts from rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "fabmeter/arrivals.hpp"
#include "fabmeter/error.hpp"

using fm::ArrivalKind;
using fm::Arrivals;

namespace {

constexpr double kRate = 100000;  // 10 us mean gap: the 1 ns rounding of times is negligible
constexpr size_t kN = 200000;

std::vector<uint64_t> schedule(ArrivalKind kind, double rate, uint64_t seed, size_t n) {
  Arrivals a(kind, rate, seed);
  std::vector<uint64_t> t(n);
  for (auto& x : t) x = a.next();
  return t;
}

// KS statistic of the gaps against a continuous CDF.
double ks_gaps(const std::vector<uint64_t>& t, const std::function<double(double)>& cdf) {
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); i++) gaps.push_back(static_cast<double>(t[i] - t[i - 1]));
  std::sort(gaps.begin(), gaps.end());
  double n = static_cast<double>(gaps.size()), d = 0;
  for (size_t i = 0; i < gaps.size(); i++) {
    double f = cdf(gaps[i]);
    d = std::max({d, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
  }
  return d;
}

double achieved_rate(const std::vector<uint64_t>& t) {
  return static_cast<double>(t.size() - 1) / (static_cast<double>(t.back()) * 1e-9);
}

}  // namespace

TEST(Arrivals, EveryKindKeepsTheMeanRate) {
  for (auto kind : {ArrivalKind::poisson, ArrivalKind::uniform, ArrivalKind::fixed}) {
    auto t = schedule(kind, kRate, 3, kN);
    EXPECT_EQ(t[0], 0u) << fm::arrivals_name(kind);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end())) << fm::arrivals_name(kind);
    // Poisson's mean gap has a relative standard error of 1/sqrt(n) = 0.22 %.
    EXPECT_NEAR(achieved_rate(t), kRate, 0.01 * kRate) << fm::arrivals_name(kind);
  }
}

TEST(Arrivals, PoissonGapsAreExponential) {
  auto t = schedule(ArrivalKind::poisson, kRate, 11, kN);
  double mean_gap = 1e9 / kRate;
  double d = ks_gaps(t, [&](double g) { return 1 - std::exp(-g / mean_gap); });
  EXPECT_LT(d, 1.95 / std::sqrt(double(kN)));  // alpha = 0.001
  // And not uniform: the same statistic against uniform gaps is far off.
  double du = ks_gaps(t, [&](double g) { return std::min(g / (2 * mean_gap), 1.0); });
  EXPECT_GT(du, 0.1);
}

TEST(Arrivals, UniformGapsAreUniform) {
  auto t = schedule(ArrivalKind::uniform, kRate, 11, kN);
  double mean_gap = 1e9 / kRate;
  double d = ks_gaps(t, [&](double g) { return std::min(g / (2 * mean_gap), 1.0); });
  EXPECT_LT(d, 1.95 / std::sqrt(double(kN)));
  for (size_t i = 1; i < t.size(); i++) ASSERT_LE(t[i] - t[i - 1], 2 * mean_gap + 1);
}

TEST(Arrivals, FixedNeverDrifts) {
  // 3/s: a gap of 333333333.33 ns. Summing rounded gaps would lose 1 ns per
  // request (1 ms after a million); times from the index land exactly.
  Arrivals a(ArrivalKind::fixed, 3, 0);
  uint64_t t = 0;
  for (int i = 0; i <= 3'000'000; i++) t = a.next();
  EXPECT_EQ(t, 1'000'000'000'000'000u);  // request 3e6 at exactly 1e6 s
  EXPECT_EQ(a.scheduled(), 3'000'001u);
}

TEST(Arrivals, ThreadsSplitAFixedRate) {
  // Four senders at R/4, started 1/R apart, make up the one schedule at R.
  constexpr double rate = 1e6;
  std::vector<uint64_t> together;
  for (int k = 0; k < 4; k++) {
    Arrivals a(ArrivalKind::fixed, rate / 4, 100 + k, k * 1e9 / rate);
    for (int i = 0; i < 1000; i++) together.push_back(a.next());
  }
  std::sort(together.begin(), together.end());
  EXPECT_EQ(together, schedule(ArrivalKind::fixed, rate, 0, 4000));
  // A poisson sender started later only shifts: its first request is at the start.
  EXPECT_EQ(Arrivals(ArrivalKind::poisson, rate, 1, 5000).next(), 5000u);
}

TEST(Arrivals, SeededSchedules) {
  EXPECT_EQ(schedule(ArrivalKind::poisson, kRate, 5, 1000), schedule(ArrivalKind::poisson, kRate, 5, 1000));
  EXPECT_NE(schedule(ArrivalKind::poisson, kRate, 5, 1000), schedule(ArrivalKind::poisson, kRate, 6, 1000));
  EXPECT_EQ(schedule(ArrivalKind::fixed, kRate, 5, 1000), schedule(ArrivalKind::fixed, kRate, 6, 1000));
}

TEST(Arrivals, BadInput) {
  EXPECT_THROW(Arrivals(ArrivalKind::poisson, 0, 1), fm::Error);
  EXPECT_THROW(Arrivals(ArrivalKind::poisson, -5, 1), fm::Error);
  EXPECT_THROW(Arrivals(ArrivalKind::poisson, NAN, 1), fm::Error);
  EXPECT_THROW(Arrivals(ArrivalKind::fixed, 2e9, 1), fm::Error);
  EXPECT_THROW(Arrivals(ArrivalKind::fixed, 1e3, 1, -1), fm::Error);
  EXPECT_EQ(fm::parse_arrivals("uniform"), ArrivalKind::uniform);
  try {
    fm::parse_arrivals("bursty");
    ADD_FAILURE();
  } catch (const fm::Error& e) {
    EXPECT_EQ(e.kind, fm::ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("poisson, uniform or fixed"), std::string::npos);
  }
}
