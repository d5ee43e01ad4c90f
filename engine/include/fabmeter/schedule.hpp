// The stream source's absolute schedule: step k is due at t0 + k periods,
// and a wake-up past the next step's due time skips to the step whose slot
// it is in, counting the steps between as missed (never bunching them to
// catch up). One definition, so limits' schedule floor counts missed steps
// exactly as the stream source does.
#pragma once
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "fabmeter/clock.hpp"
#include "fabmeter/params.hpp"

namespace fm {

// Steps (stream) or requests (load) sent before measuring when --warmup does
// not say: 0.1 s worth, at most CommonOptions::kDefaultWarmup.
inline uint64_t default_step_warmup(uint64_t rate) { return std::min<uint64_t>(CommonOptions::kDefaultWarmup, rate / 10); }

struct StepSchedule {
  uint64_t t0;    // ticks
  double period;  // ticks per step

  // `rate` steps a second from 1 ms from now, so the first step is not already late.
  static StepSchedule starting_soon(const Clock& clk, uint64_t rate) {
    return {clk.ticks() + clk.ns_to_ticks(1e6), static_cast<double>(clk.ns_to_ticks(1e9)) / static_cast<double>(rate)};
  }

  // `rate` steps a second, step 0 at CLOCK_MONOTONIC `mono_ns` (--start-at: a
  // plan's instant; already past when the wait for it ended late).
  static StepSchedule starting_at(const Clock& clk, uint64_t rate, int64_t mono_ns) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const uint64_t ticks = clk.ticks();
    const double ahead_ns = static_cast<double>(mono_ns) - (static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec));
    const double back = static_cast<double>(clk.ns_to_ticks(ahead_ns < 0 ? -ahead_ns : 0));
    return {ticks - static_cast<uint64_t>(std::min(back, static_cast<double>(ticks))) + clk.ns_to_ticks(ahead_ns > 0 ? ahead_ns : 0),
            static_cast<double>(clk.ns_to_ticks(1e9)) / static_cast<double>(rate)};
  }

  uint64_t due(uint64_t k) const { return t0 + static_cast<uint64_t>(std::llround(static_cast<double>(k) * period)); }

  void spin_until_due(const Clock& clk, uint64_t k) const {
    const uint64_t d = due(k);
    while (clk.ticks() < d) cpu_relax();
  }

  // Woken for step k at `now`: the step to take now. Step k while the next
  // is not yet due; else the step whose slot `now` is in, the steps skipped
  // in the measured range [warmup, total) added to `missed`.
  uint64_t catch_up(uint64_t k, uint64_t now, uint64_t warmup, uint64_t total, uint64_t& missed) const {
    if (now < due(k + 1)) return k;
    const uint64_t k_now = static_cast<uint64_t>(static_cast<double>(now - t0) / period);
    const uint64_t lo = std::max(k, warmup), hi = std::min(k_now, total);
    missed += hi > lo ? hi - lo : 0;
    return k_now;
  }
};

}  // namespace fm
