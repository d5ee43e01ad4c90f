#include "fabmeter/clock.hpp"

#include <cpuid.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <ctime>
#include <algorithm>
#include <cstring>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "fabmeter/clock_sync.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/signals.hpp"

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

namespace {

// A CLOCK_MONOTONIC_RAW reading and the TSC at that instant: the midpoint of
// two TSC reads around it, from the tightest of a few tries. Read one after
// the other, a stall between the two clocks (the clock read is a system call
// in a VM that hides the invariant TSC, and the hypervisor takes the vCPU for
// 10-50 us at times) skews a 10 ms window: in the Soft-RoCE guest the windows'
// spread was 10x wider so (median 7e-5, up to 4.6e-4 against kTscCpuSpread's
// 1e-3), and 6 of 150 runs fell back to clock_gettime.
struct TscAt {
  uint64_t mono_ns;
  double tsc;
};
TscAt tsc_at_mono() {
  TscAt best{0, 0};
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 8; ++i) {
    const uint64_t before = __rdtsc();
    const uint64_t m = Clock::mono_ns();
    const uint64_t after = __rdtsc();
    if (after - before < best_gap) {
      best_gap = after - before;
      best = {m, (static_cast<double>(before) + static_cast<double>(after)) / 2};
    }
  }
  return best;
}

// While it lives, this thread is the first to run when it wakes: real-time priority 1 (SCHED_FIFO) where the
// process may take it (root, CAP_SYS_NICE or RLIMIT_RTPRIO), else the fair scheduler's shortest slice (sched_attr's
// sched_runtime, Linux 6.12 and later; unprivileged; elsewhere nothing changes). When a mesh round's engines all
// wake at one instant on a few CPUs, each takes its start then, not after the ones woken before it, or the pairs
// already sending, ran a slice each (0.75-3 ms, 1.4 ms on 2 CPUs). It lasts from the sleep to the start stamp only.
class WakeFirst {
  // The kernel's struct sched_attr (its header clashes with glibc's <sched.h>).
  struct Attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
  };

 public:
  WakeFirst() {
    if (syscall(SYS_sched_getattr, 0, &old_, sizeof old_, 0) != 0 || old_.sched_policy != SCHED_OTHER) return;
    Attr first{};
    first.size = sizeof first, first.sched_policy = SCHED_FIFO, first.sched_priority = 1;
    set_ = syscall(SYS_sched_setattr, 0, &first, 0) == 0;
    if (set_) return;
    first = old_;
    first.sched_runtime = kShortestSliceNs;
    set_ = syscall(SYS_sched_setattr, 0, &first, 0) == 0;
  }
  WakeFirst(const WakeFirst&) = delete;
  WakeFirst& operator=(const WakeFirst&) = delete;
  ~WakeFirst() { restore(); }
  void restore() {
    if (set_) (void)syscall(SYS_sched_setattr, 0, &old_, 0);
    set_ = false;
  }

 private:
  static constexpr uint64_t kShortestSliceNs = 100'000;  // the kernel's lower bound
  Attr old_{};
  bool set_ = false;
};

}  // namespace

Clock::Clock(bool want_tsc, bool one_cpu) {
  const bool invariant = tsc_invariant();
  source_ = !want_tsc ? ClockSource::monotonic : invariant ? ClockSource::tsc : one_cpu ? ClockSource::tsc_cpu
                                                                                      : ClockSource::monotonic;
  if (source_ != ClockSource::monotonic) {
    // Median of several short windows: one preempted window must not skew the rate.
    double rates[5];
    for (double& r : rates) {
      const TscAt a = tsc_at_mono();
      // Spinning keeps both reads on one CPU (a sleeper may wake on another, whose TSC a VM may offset).
      while (mono_ns() - a.mono_ns < 10'000'000) {
      }
      const TscAt b = tsc_at_mono();
      r = static_cast<double>(b.mono_ns - a.mono_ns) / (b.tsc - a.tsc);
    }
    std::sort(rates, rates + 5);
    ns_per_tick_ = rates[2];
    // The middle three: a window preempted between its two reads is the outlier the median is for.
    if (source_ == ClockSource::tsc_cpu && (rates[3] - rates[1]) / rates[2] > kTscCpuSpread) {
      source_ = ClockSource::monotonic;
      ns_per_tick_ = 1.0;
    }
  }
  // The origin: one instant on both scales. Read one after the other, the
  // time between the two reads (a process's first clock read: 230-270 ns
  // here, against 40 later; more if preempted) would put every conversion
  // off by that much, and one-way figures and clock fits by the difference
  // between two engines' (+57..+557 ns).
  if (source_ == ClockSource::monotonic) {
    tick0_ = mono0_ns_ = static_cast<double>(mono_ns());
  } else {
    const TscAt at = tsc_at_mono();
    mono0_ns_ = static_cast<double>(at.mono_ns);
    tick0_ = at.tsc;
  }
  if (const std::optional<ClockSkew> skew = clock_skew_from_env()) {
    // t -> (1 + drift) t + offset, in both the rate and the origin.
    const double k = 1 + skew->drift_ppm * 1e-6;
    skew_rate_ = k;
    ns_per_tick_ *= k;
    mono0_ns_ = mono0_ns_ * k + skew->offset_ns;
  }
  cost_ns_ = measure_cost_ns(*this, 200000);
}

std::optional<ClockSkew> clock_skew_from_env() {
  const char* env = std::getenv("FABMETER_CLOCK_SKEW");
  if (!env || !*env) return std::nullopt;
  const std::string_view text(env);
  auto bad = [&]() -> std::optional<ClockSkew> {
    usage_error("FABMETER_CLOCK_SKEW='" + std::string(text.substr(0, 40)) +
                "': expected OFFSET_NS,DRIFT_PPM (|offset| <= 1e12 ns, |drift| <= 500 ppm), e.g. 5000000,50");
  };
  const size_t comma = text.find(',');
  if (comma == std::string_view::npos) return bad();
  double v[2];
  const std::string_view parts[2] = {text.substr(0, comma), text.substr(comma + 1)};
  for (int i = 0; i < 2; ++i) {
    const std::string part(parts[i]);
    char* end = nullptr;
    v[i] = std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size() || !std::isfinite(v[i])) return bad();
  }
  // A drift no real clock has would only have its fit refused (kMaxClockDrift).
  if (std::abs(v[0]) > 1e12 || std::abs(v[1]) > kMaxClockDrift * 1e6) return bad();
  return ClockSkew{v[0], v[1]};
}

double Clock::measure_cost_ns(const Clock& c, int n) {
  uint64_t sink = 0;
  uint64_t m0 = mono_ns();
  for (int i = 0; i < n; ++i) sink += c.ticks();
  uint64_t m1 = mono_ns();
  asm volatile("" : : "r"(sink));
  return static_cast<double>(m1 - m0) / n;
}

int64_t wait_until_monotonic(int64_t ns, bool spin) {
  const int64_t wake = spin ? ns - kSpinTailNs : ns;
  // The default 50 us timer slack would let the kernel wake us that much late.
  const int slack = prctl(PR_GET_TIMERSLACK);
  prctl(PR_SET_TIMERSLACK, 1UL);
  WakeFirst wake_first;
  for (int64_t now = monotonic_ns(); now < wake && !stop_requested(); now = monotonic_ns()) {
    // Slices of at most 50 ms: Ctrl-C is seen even where EINTR is not.
    const int64_t until = std::min(wake, now + 50'000'000);
    timespec ts{static_cast<time_t>(until / 1000000000), static_cast<long>(until % 1000000000)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
  }
  int64_t now = monotonic_ns();
  while (now < ns && !stop_requested()) {
    cpu_relax();
    now = monotonic_ns();
  }
  wake_first.restore();
  if (slack > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack));
  return now;
}

}  // namespace fm
