#include <gtest/gtest.h>

#include <time.h>

#include <cstdlib>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"

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

// one_cpu takes the TSC whether or not it is invariant (tsc where it is, as
// before; tsc_cpu where a VM hides the bit), calibrated all the same.
TEST(Clock, OneCpuReadsTheTscEitherWay) {
  fm::Clock clk(true, true);
  ASSERT_TRUE(clk.reads_tsc()) << "the TSC's rate moved over calibration: " << clk.source_name();
  EXPECT_EQ(clk.source(), fm::Clock::tsc_invariant() ? fm::ClockSource::tsc : fm::ClockSource::tsc_cpu);
  EXPECT_GT(clk.tsc_ghz(), 0.1);
  check_against_monotonic(clk);
  EXPECT_FALSE(fm::Clock(false, true).reads_tsc());  // --clock monotonic stays monotonic
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

// The origin is one instant on both scales: read as two (a process's first
// clock read, ~250 ns, between them), every conversion was off by the gap,
// and a clock fit between two engines by the difference of theirs.
TEST(Clock, MonotonicTicksConvertToThemselves) {
  fm::Clock clk(false);
  const uint64_t t = fm::Clock::mono_ns();
  EXPECT_DOUBLE_EQ(clk.ticks_to_mono_ns(t), static_cast<double>(t));
}

// FABMETER_CLOCK_SKEW: every reading of either source is t + offset + drift * t.
TEST(Clock, SkewKnobSkewsBothSources) {
  setenv("FABMETER_CLOCK_SKEW", "5000000,50", 1);
  const fm::Clock tsc(true), mono(false);
  unsetenv("FABMETER_CLOCK_SKEW");
  auto skewed = [](double t) { return t + 5e6 + 50e-6 * t; };
  for (const fm::Clock* clk : {&tsc, &mono}) {
    const double before = static_cast<double>(fm::Clock::mono_ns());
    const double reading = clk->ticks_to_mono_ns(clk->ticks());
    const double after = static_cast<double>(fm::Clock::mono_ns());
    // Between the skewed times around it; the TSC's calibration may add a few us.
    EXPECT_GE(reading, skewed(before) - 10e3) << clk->source_name();
    EXPECT_LE(reading, skewed(after) + 10e3) << clk->source_name();
  }
  EXPECT_NEAR(mono.ns_per_tick(), 1 + 50e-6, 1e-12);
}

TEST(Clock, SkewKnobRefusesMalformedValues) {
  for (const char* bad : {"5000000", "5ms,50", "1,nan", "2e12,0", "0,1e5", "1,2,3", ",", "1,"}) {
    setenv("FABMETER_CLOCK_SKEW", bad, 1);
    try {
      fm::clock_skew_from_env();
      ADD_FAILURE() << bad << " accepted";
    } catch (const fm::Error& e) {
      EXPECT_EQ(e.kind, fm::ErrorKind::usage) << bad;
    }
  }
  setenv("FABMETER_CLOCK_SKEW", "-1.5e3,-0.25", 1);
  const std::optional<fm::ClockSkew> skew = fm::clock_skew_from_env();
  unsetenv("FABMETER_CLOCK_SKEW");
  ASSERT_TRUE(skew);
  EXPECT_EQ(skew->offset_ns, -1.5e3);
  EXPECT_EQ(skew->drift_ppm, -0.25);
  EXPECT_FALSE(fm::clock_skew_from_env());
}
