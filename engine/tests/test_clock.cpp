#include <gtest/gtest.h>

#include <time.h>

#include "fabmeter/clock.hpp"

// A busy interval measured in ticks must agree with CLOCK_MONOTONIC_RAW.
static void check_against_monotonic(const fm::Clock& clk) {
  uint64_t m0 = fm::Clock::mono_ns(), t0 = clk.ticks();
  while (fm::Clock::mono_ns() - m0 < 20'000'000) {}
  uint64_t m1 = fm::Clock::mono_ns(), t1 = clk.ticks();
  double measured = clk.to_ns(static_cast<double>(t1 - t0));
  double truth = static_cast<double>(m1 - m0);
  EXPECT_NEAR(measured / truth, 1.0, 0.01);  // calibration within 1 %
}

TEST(Clock, TscCalibrationAgreesWithMonotonic) {
  fm::Clock clk(true);
  if (clk.source() != fm::ClockSource::tsc) GTEST_SKIP() << "no invariant TSC here";
  EXPECT_GT(clk.tsc_ghz(), 0.1);
  EXPECT_LT(clk.tsc_ghz(), 10.0);
  check_against_monotonic(clk);
}

TEST(Clock, FallbackIsMonotonicNanoseconds) {
  fm::Clock clk(false);
  EXPECT_EQ(clk.source(), fm::ClockSource::monotonic);
  EXPECT_DOUBLE_EQ(clk.ns_per_tick(), 1.0);
  check_against_monotonic(clk);
}

TEST(Clock, TimestampCostIsMeasured) {
  fm::Clock clk(true);
  EXPECT_GT(clk.timestamp_cost_ns(), 0.0);
  EXPECT_LT(clk.timestamp_cost_ns(), 10000.0);
}

TEST(Clock, MonoConversionTracksRealTime) {
  fm::Clock clk(true);
  double a = clk.ticks_to_mono_ns(clk.ticks());
  double m = static_cast<double>(fm::Clock::mono_ns());
  EXPECT_NEAR(a, m, 1e6);  // within 1 ms right after calibration
}
