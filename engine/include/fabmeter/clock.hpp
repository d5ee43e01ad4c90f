// Timestamps for the data path: invariant TSC when the CPU has one, otherwise
// CLOCK_MONOTONIC_RAW. Ticks are what the hot path records; conversion to
// nanoseconds happens after the run.
//
// A TSC without the invariant bit (most VMs hide it, and the guest kernel
// may then also serve clock_gettime by a system call: 0.8 us a read in the
// Soft-RoCE guest) still serves one pinned process whose figures are two
// stamps read on its own CPU (lat's RTT, bw's duration): tsc_cpu. What it
// cannot promise is agreement between CPUs, so ticks read by two processes
// are never compared on it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <time.h>
#include <x86intrin.h>

namespace fm {

enum class ClockSource { tsc, tsc_cpu, monotonic };

// A test hook, like FABMETER_TRACE_PHASES: FABMETER_CLOCK_SKEW=OFFSET_NS,DRIFT_PPM
// in an engine's environment (set by whoever starts it, never by a remote end)
// makes every time it reads run off as a bad oscillator's would: at
// CLOCK_MONOTONIC_RAW time t (ns since boot) it reads
// t + OFFSET_NS + DRIFT_PPM * 1e-6 * t. TSC and clock_gettime alike, as the
// skew is folded into the conversion of ticks to ns (nothing on the hot
// path). Such an engine counts as another host (host_id), so the other end
// synchronises clocks with it even on one machine.
struct ClockSkew {
  double offset_ns;
  double drift_ppm;
};
// The variable's value, checked: a usage error (exit 2) if malformed.
std::optional<ClockSkew> clock_skew_from_env();

class Clock {
 public:
  // Calibrates the TSC against CLOCK_MONOTONIC_RAW (about 50 ms) unless
  // `want_tsc` is false or the TSC is not invariant, in which case ticks are
  // ns. With `one_cpu` (the caller is pinned and compares only its own
  // stamps) a TSC that is not invariant is taken too, as tsc_cpu, when its
  // rate held within kTscCpuSpread over the calibration windows.
  explicit Clock(bool want_tsc = true, bool one_cpu = false);
  static constexpr double kTscCpuSpread = 1e-3;

  // Plain rdtsc, not rdtscp: it costs about half as much here, and the
  // ordering rdtscp would add is not needed where we stamp. A receive stamp
  // follows the exit of a spin loop, which resolves a mispredicted branch on
  // the very load that saw the message, so it cannot run before that load.
  [[gnu::always_inline]] uint64_t ticks() const {
    if (source_ != ClockSource::monotonic) return __rdtsc();
    return mono_ns();
  }

  double to_ns(double dticks) const { return dticks * ns_per_tick_; }
  // Nanoseconds on the CLOCK_MONOTONIC_RAW time base, comparable across
  // processes on one host (used for cross-host clock offset estimates).
  double ticks_to_mono_ns(uint64_t t) const {
    return mono0_ns_ + (static_cast<double>(t) - tick0_) * ns_per_tick_;
  }
  uint64_t ns_to_ticks(double ns) const { return static_cast<uint64_t>(ns / ns_per_tick_); }

  ClockSource source() const { return source_; }
  const char* source_name() const {
    return source_ == ClockSource::tsc ? "tsc" : source_ == ClockSource::tsc_cpu ? "tsc_cpu" : "clock_gettime";
  }
  bool reads_tsc() const { return source_ != ClockSource::monotonic; }
  double ns_per_tick() const { return ns_per_tick_; }
  // Our nanoseconds per true one: 1 + DRIFT_PPM * 1e-6 under FABMETER_CLOCK_SKEW, else 1.
  double skew_rate() const { return skew_rate_; }
  double tsc_ghz() const { return reads_tsc() ? 1.0 / ns_per_tick_ : 0.0; }
  // Measured cost of one ticks() call, in ns.
  double timestamp_cost_ns() const { return cost_ns_; }
  static bool tsc_invariant();
  static uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
  }
  static double measure_cost_ns(const Clock& c, int n);

 private:
  ClockSource source_;
  double ns_per_tick_ = 1.0;
  double tick0_ = 0;  // the ticks at mono0_ns_
  double mono0_ns_ = 0;
  double cost_ns_ = 0;
  double skew_rate_ = 1;
};

inline void cpu_relax() { _mm_pause(); }

// CLOCK_MONOTONIC in ns: the clock Python's time.monotonic_ns() reads, so an
// instant a coordinator names (mesh's round start) means the same here.
inline int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
// Waits until monotonic_ns() reaches `ns`, sleeping, and when `spin` (busy
// mode) spinning the last kSpinTailNs, as a sleeper wakes tens of us late on a
// VM. Returns monotonic_ns() when it went on; ends early on Ctrl-C.
constexpr int64_t kSpinTailNs = 200'000;
int64_t wait_until_monotonic(int64_t ns, bool spin);

}  // namespace fm
