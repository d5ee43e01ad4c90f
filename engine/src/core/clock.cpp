#include "fabmeter/clock.hpp"

#include <cpuid.h>
#include <algorithm>
#include <cstring>
#include <cerrno>

#include "fabmeter/error.hpp"

namespace fm {

void sys_error(const std::string& what) {
  runtime_error(what + ": " + std::strerror(errno));
}

bool Clock::tsc_invariant() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007) return false;
  __get_cpuid(0x80000007, &a, &b, &c, &d);
  return (d >> 8) & 1;
}

Clock::Clock(bool want_tsc) {
  source_ = (want_tsc && tsc_invariant()) ? ClockSource::tsc : ClockSource::monotonic;
  if (source_ == ClockSource::tsc) {
    // Median of several short windows: one preempted window must not skew the rate.
    double rates[5];
    for (double& r : rates) {
      uint64_t m0 = mono_ns(), t0 = ticks();
      uint64_t m1;
      do { m1 = mono_ns(); } while (m1 - m0 < 10'000'000);
      uint64_t t1 = ticks();
      r = static_cast<double>(m1 - m0) / static_cast<double>(t1 - t0);
    }
    std::sort(rates, rates + 5);
    ns_per_tick_ = rates[2];
  }
  mono0_ns_ = static_cast<double>(mono_ns());
  tick0_ = ticks();
  cost_ns_ = measure_cost_ns(*this, 200000);
}

double Clock::measure_cost_ns(const Clock& c, int n) {
  uint64_t sink = 0;
  uint64_t m0 = mono_ns();
  for (int i = 0; i < n; ++i) sink += c.ticks();
  uint64_t m1 = mono_ns();
  asm volatile("" : : "r"(sink));
  return static_cast<double>(m1 - m0) / n;
}

}  // namespace fm
