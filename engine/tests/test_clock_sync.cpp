// ClockEstimator on synthetic probes: the other end's clock runs ahead by
// a known offset and drift, probed over a path with queueing noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "fabmeter/clock_sync.hpp"

namespace fm {
namespace {

// The other end's clock: remote(t) = t + offset + drift * (t - origin), t local ns.
struct RemoteClock {
  double offset_ns, drift, origin_ns;
  double offset_at(double t) const { return offset_ns + drift * (t - origin_ns); }
  double read(double t) const { return t + offset_at(t); }
};

// A probe sent at local time s with one-way delays `out` and `back`.
ClockProbe probe(const RemoteClock& remote, double s, double out, double back, double turnaround = 500) {
  const double arrived = s + out;
  return {s, remote.read(arrived), arrived + turnaround + back, turnaround};
}

// Absolute times like a machine up for a day: 8.64e13 ns.
constexpr double kStart = 8.64e13;

// The largest error of the fit against the truth from `from` to `to` (within
// the probed span: the bound holds only there).
double worst_error(const ClockFit& f, const RemoteClock& remote, double from, double to) {
  double worst = 0;
  for (double t = from; t <= to; t += (to - from) / 100)
    worst = std::max(worst, std::abs(f.offset_at(t) - remote.offset_at(t)));
  return worst;
}

// `windows` windows `every_ns` apart, each of `per_window` probes
// `spacing_ns` apart whose one-way delays out() and back() draw: their fit.
template <class Out, class Back>
ClockFit fit_windows(const RemoteClock& remote, int windows, double every_ns, int per_window, double spacing_ns,
                     Out out, Back back) {
  ClockEstimator est;
  for (int w = 0; w < windows; ++w) {
    for (int i = 0; i < per_window; ++i) {
      const double d_out = out(), d_back = back();
      est.add(probe(remote, kStart + w * every_ns + i * spacing_ns, d_out, d_back));
    }
    est.close_window();
  }
  return est.fit();
}

TEST(ClockSync, RecoversOffsetAndDrift) {
  const RemoteClock remote{5e6, 50e-6, kStart};
  std::mt19937_64 rng(12);
  std::exponential_distribution<double> queueing(1 / 20e3);  // mean 20 us on top of 5 us
  auto delay = [&] { return 5e3 + queueing(rng); };
  const ClockFit f = fit_windows(remote, 20, 0.5e9, 64, 50e3, delay, delay);
  EXPECT_EQ(f.probes, 20u * 64);
  EXPECT_EQ(f.kept, 20u);
  EXPECT_NEAR(f.drift_ppm(), 50, 0.05);
  EXPECT_NEAR(f.offset_ns, remote.offset_at(f.ref_ns), f.error_bound_ns);
  EXPECT_LE(worst_error(f, remote, kStart, kStart + f.span_ns), f.error_bound_ns);
  // Half the 10 us floor, plus what queueing left in the best of 64 probes.
  EXPECT_LT(f.error_bound_ns, 15e3);
  EXPECT_NEAR(f.span_ns, 9.5e9, 1e6);
}

TEST(ClockSync, MinFilterRejectsDelayedAndAsymmetricProbes) {
  const RemoteClock remote{-3e9, -20e-6, kStart};
  ClockEstimator est;
  double t = kStart;
  for (int window = 0; window < 5; ++window, t += 1e9) {
    // Outliers late on one leg only: taken at face value each would be off by up to 500 us.
    for (int i = 1; i <= 30; ++i) est.add(probe(remote, t + i * 1e5, 4e3 + i * 33e3, 4e3));
    for (int i = 1; i <= 30; ++i) est.add(probe(remote, t + i * 1e5 + 5e4, 4e3, 4e3 + i * 33e3));
    est.add(probe(remote, t + 4e6, 4e3, 4e3));  // the clean one
    est.close_window();
  }
  const ClockFit f = est.fit();
  EXPECT_EQ(f.kept, 5u);
  EXPECT_NEAR(f.drift_ppm(), -20, 1e-3);
  EXPECT_LE(worst_error(f, remote, kStart, kStart + 4e9 + 4e6), 1.0);
  EXPECT_NEAR(f.error_bound_ns, 4e3, 1.0);  // (round trip - turnaround) / 2 of the kept probes, residuals ~0
}

TEST(ClockSync, BoundContainsTheTruthOnAnAsymmetricPath) {
  // Every probe goes out in 2 us and comes back in 8 us: the estimate is 3 us
  // off, which no probe can see; the bound (5 us) still holds it.
  const RemoteClock remote{1.5e6, 10e-6, kStart};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(0, 2e3);
  const ClockFit f = fit_windows(remote, 10, 1e9, 32, 1e4, [&] { return 2e3 + jitter(rng); },
                                 [&] { return 8e3 + jitter(rng); });
  const double err = worst_error(f, remote, kStart, kStart + f.span_ns);
  EXPECT_GT(err, 2e3);
  EXPECT_LE(err, f.error_bound_ns);
}

TEST(ClockSync, MapsRemoteTimesToLocal) {
  const RemoteClock remote{5e6, 50e-6, kStart};
  ClockEstimator est;
  for (int window = 0; window < 3; ++window) {
    est.add(probe(remote, kStart + window * 1e9, 1e3, 1e3));
    est.close_window();
  }
  const ClockFit f = est.fit();
  for (double t : {kStart, kStart + 1.234e9, kStart + 7e9})
    EXPECT_NEAR(f.to_local(remote.read(t)), t, 1e-3);
}

TEST(ClockSync, OneWindowGivesOffsetWithoutDrift) {
  const RemoteClock remote{2e3, 0, kStart};
  ClockEstimator est;
  EXPECT_EQ(est.fit().kept, 0u);
  est.add(probe(remote, kStart, 3e3, 3e3, 0));
  est.add(probe(remote, kStart + 1e4, 9e3, 3e3, 0));
  est.close_window();
  const ClockFit f = est.fit();
  EXPECT_EQ(f.kept, 1u);
  EXPECT_EQ(f.drift, 0);
  EXPECT_NEAR(f.offset_ns, 2e3, 1e-6);
  EXPECT_NEAR(f.error_bound_ns, 3e3, 1e-6);
}

// A real clock's fits are never refused: queueing noise of every size, on
// one leg or both, windows far apart or close, drift up to the bound.
TEST(ClockSync, RealClocksArePlausible) {
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const RemoteClock remote{(u(rng) - 0.5) * 1e15, (u(rng) - 0.5) * 2 * kMaxClockDrift * 0.99, kStart};
    const double floor_ns = 1e3 + u(rng) * 50e3, mean_ns = u(rng) * 500e3;
    std::exponential_distribution<double> queueing(1 / std::max(mean_ns, 1.0));
    const int per_window = 1 + static_cast<int>(u(rng) * 64);
    ClockEstimator est;
    for (int w = 0; w < 2 + seed % 20; ++w) {
      for (int i = 0; i < per_window; ++i)
        est.add(probe(remote, kStart + w * 0.3e9 + i * 5e4, floor_ns + queueing(rng), floor_ns + queueing(rng)));
      est.close_window();
    }
    const ClockFit f = est.fit();
    EXPECT_EQ(implausible_fit(f, est.kept()), "") << "seed " << seed;
    // A message that took the path's floor, and one corrected by the fit.
    const double sent = kStart + 0.1e9, arrived = sent + floor_ns;
    EXPECT_EQ(implausible_arrival(f, f.to_local(remote.read(arrived)) - sent), "") << "seed " << seed;
  }
}

TEST(ClockSync, ReadingsBeyondAnyClockAreRefused) {
  for (double ns : {1e300, -1e300, 1e19, std::nan(""), HUGE_VAL, -HUGE_VAL}) EXPECT_FALSE(plausible_reading(ns)) << ns;
  for (double ns : {0.0, 8.64e13, 1e18, -1e18}) EXPECT_TRUE(plausible_reading(ns)) << ns;
}

TEST(ClockSync, ADriftNoOscillatorHasIsRefused) {
  for (double drift : {0.023, -0.023, 600e-6}) {
    ClockEstimator est;
    for (int w = 0; w < 5; ++w) {
      est.add(probe(RemoteClock{5e6, drift, kStart}, kStart + w * 1e9, 10e3, 10e3));
      est.close_window();
    }
    EXPECT_NE(implausible_fit(est.fit(), est.kept()).find("a drift of"), std::string::npos) << drift;
  }
}

TEST(ClockSync, AReadingOffTheFitByMoreThanARoundTripIsRefused) {
  const RemoteClock remote{5e6, 0, kStart};
  ClockEstimator est;
  for (int w = 0; w < 6; ++w) {
    ClockProbe p = probe(remote, kStart + w * 1e9, 10e3, 10e3);
    if (w == 3) p.remote_ns += 1e6;  // one burst's replies moved by 1 ms
    est.add(p);
    est.close_window();
  }
  EXPECT_NE(implausible_fit(est.fit(), est.kept()).find("off the fit"), std::string::npos);
}

TEST(ClockSync, AnOffsetThatPutsArrivalsBeforeSendsIsRefused) {
  // Every reply 1e15 ns ahead: a line like any other, until a message's
  // stamps, on the other end's real clock, arrive 1e15 ns before they left.
  const RemoteClock real{5e6, 0, kStart}, told{5e6 + 1e15, 0, kStart};
  ClockEstimator est;
  for (int w = 0; w < 3; ++w) {
    est.add(probe(told, kStart + w * 1e9, 10e3, 10e3));
    est.close_window();
  }
  const ClockFit f = est.fit();
  EXPECT_EQ(implausible_fit(f, est.kept()), "");
  const double sent = kStart + 1.5e9;
  EXPECT_NE(implausible_arrival(f, f.to_local(real.read(sent + 20e3)) - sent).find("before it was sent"),
            std::string::npos);
  // Within twice the bound and the stamps' slack: a fast path, not a lie.
  EXPECT_EQ(implausible_arrival(f, -(2 * f.error_bound_ns + kStampSlackNs) + 1), "");
}

}  // namespace
}  // namespace fm
