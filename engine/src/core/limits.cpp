#include "fabmeter/limits.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <thread>

#include "fabmeter/clock.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/futex.hpp"
#include "fabmeter/hiccups.hpp"
#include "fabmeter/histogram.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/schedule.hpp"
#include "fabmeter/stats.hpp"

namespace fm {
namespace {

struct PingPong {
  std::vector<double> half_rtt_ns;  // per round trip, timestamped like lat
  double bulk_half_rtt_ns;          // median over chunks of (chunk time / round trips / 2), no timestamps inside
};

// Hand-over between the two pinned CPUs. One line: both directions write the
// same line, the fastest hand-over there is. Two lines: each direction owns a
// line (128 B apart, so the adjacent-line prefetcher does not pair them), the
// floor for any duplex transport whose two messages do not fit in one line.
PingPong cacheline_pingpong(const Clock& clk, int cpu_a, int cpu_b, uint64_t n, bool one_line) {
  struct alignas(128) Line {
    std::atomic<uint64_t> v{0};
  };
  static Line lines[2];
  lines[0].v.store(0);
  lines[1].v.store(0);
  std::atomic<uint64_t>& ping = lines[0].v;
  std::atomic<uint64_t>& pong = one_line ? lines[0].v : lines[1].v;
  const uint64_t warmup = n / 10 + 100;
  const uint64_t rounds = 2 * (warmup + n);  // timestamped phase, then bulk phase
  SampleBuf rtt(n);
  // No pause in these spins: the limit is the fastest hand-over possible.
  std::thread echo([&] {
    pin_to_cpu(cpu_b);
    for (uint64_t i = 0; i < rounds; ++i) {
      while (ping.load(std::memory_order_acquire) != 2 * i + 1) {}
      pong.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin_to_cpu(cpu_a);
  uint64_t i = 0;
  for (; i < warmup + n; ++i) {
    uint64_t t0 = clk.ticks();
    ping.store(2 * i + 1, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != 2 * i + 2) {}
    uint64_t t1 = clk.ticks();
    if (i >= warmup) rtt[i - warmup] = t1 - t0;
  }
  // Bulk: chunks of round trips timed as a whole; the median chunk, so one
  // preemption on a shared machine does not move the figure.
  constexpr uint64_t kChunk = 1000;
  std::vector<double> chunk_ns;
  while (i < rounds) {
    const uint64_t end = std::min(rounds, i + kChunk), len = end - i;
    uint64_t b0 = clk.ticks();
    for (; i < end; ++i) {
      ping.store(2 * i + 1, std::memory_order_release);
      while (pong.load(std::memory_order_acquire) != 2 * i + 2) {}
    }
    chunk_ns.push_back(clk.to_ns(static_cast<double>(clk.ticks() - b0)) / static_cast<double>(len) / 2);
  }
  echo.join();
  PingPong r;
  r.half_rtt_ns.resize(n);
  for (uint64_t k = 0; k < n; ++k) r.half_rtt_ns[k] = clk.to_ns(static_cast<double>(rtt[k])) / 2;
  r.bulk_half_rtt_ns = summarize(chunk_ns.data(), chunk_ns.size()).p50;
  return r;
}

// Cross-CPU wake-up of a sleeping thread: two threads take turns waking each
// other through a futex and sleeping until woken, never spinning. RTT/2 is
// what an event-mode one-way pays at least between these CPUs, before any
// transport work (the idle CPU's halt and wake-up, the scheduler, the futex).
std::vector<double> wakeup_pingpong(const Clock& clk, int cpu_a, int cpu_b, uint64_t n) {
  std::atomic<uint32_t> word{0};
  const uint64_t warmup = n / 10 + 10;
  auto await = [&word](uint32_t want) {
    for (uint32_t v; (v = word.load(std::memory_order_acquire)) != want;) futex_wait(&word, v, -1);
  };
  std::thread echo([&] {
    pin_to_cpu(cpu_b);
    for (uint64_t i = 0; i < warmup + n; ++i) {
      await(static_cast<uint32_t>(2 * i + 1));
      word.store(static_cast<uint32_t>(2 * i + 2), std::memory_order_release);
      futex_wake(&word);
    }
  });
  pin_to_cpu(cpu_a);
  std::vector<double> half(n);
  for (uint64_t i = 0; i < warmup + n; ++i) {
    uint64_t t0 = clk.ticks();
    word.store(static_cast<uint32_t>(2 * i + 1), std::memory_order_release);
    futex_wake(&word);
    await(static_cast<uint32_t>(2 * i + 2));
    uint64_t t1 = clk.ticks();
    if (i >= warmup) half[i - warmup] = clk.to_ns(static_cast<double>(t1 - t0)) / 2;
  }
  echo.join();
  return half;
}

// Bytes per second copying `size` bytes between two prefaulted buffers.
double memcpy_gbps(const Clock& clk, uint64_t size) {
  PayloadBuf a(size), b(size);
  std::memset(a.data(), 1, size);
  const uint64_t reps = std::max<uint64_t>(4, (256ull << 20) / size);
  uint64_t t0 = clk.ticks();
  for (uint64_t r = 0; r < reps; ++r) {
    std::memcpy(b.data(), a.data(), size);
    asm volatile("" : : "r"(b.data()) : "memory");
  }
  double ns = clk.to_ns(static_cast<double>(clk.ticks() - t0));
  return static_cast<double>(size * reps) * 8 / ns;
}

// What recording one timestamp costs on the hot path: read the clock, store it.
double record_cost_ns(const Clock& clk) {
  constexpr uint64_t kN = 1 << 20;
  SampleBuf buf(kN);
  uint64_t m0 = Clock::mono_ns();
  for (uint64_t i = 0; i < kN; ++i) buf[i] = clk.ticks();
  return static_cast<double>(Clock::mono_ns() - m0) / kN;
}

// What recording one latency into a histogram costs (load's hot path, and
// --samples hist): values spread over four decades, as latencies are, so the
// bucket index and the branch predictor see a realistic mix.
double hist_record_cost_ns() {
  constexpr uint64_t kN = 1 << 20;
  std::vector<int64_t> values(kN);
  uint64_t x = 88172645463325252ull;  // xorshift: cheap, fixed
  for (int64_t& v : values) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<int64_t>(100 << (x % 14)) + static_cast<int64_t>(x >> 52);
  }
  Histogram h;
  const uint64_t m0 = Clock::mono_ns();
  for (int64_t v : values) h.record(v);
  const uint64_t m1 = Clock::mono_ns();
  asm volatile("" : : "r"(h.count()) : "memory");
  return static_cast<double>(m1 - m0) / kN;
}

// Lateness of each wake-up against an absolute schedule.
Summary timer_lateness(const std::string& kind, uint64_t n, double period_us) {
  std::vector<double> late;
  late.reserve(n);
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  const double t0 = static_cast<double>(start.tv_sec) * 1e9 + static_cast<double>(start.tv_nsec) + 1e6;
  const double period = period_us * 1e3;
  auto ts_of = [](double ns) { return timespec{static_cast<time_t>(ns / 1e9), static_cast<long>(std::fmod(ns, 1e9))}; };
  int fd = -1;
  if (kind == "timerfd") {
    fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (fd < 0) sys_error("timerfd_create");
    itimerspec its{ts_of(period), ts_of(t0)};
    timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, nullptr);
  }
  for (uint64_t k = 0; k < n; ++k) {
    const double due = t0 + static_cast<double>(k) * period;
    if (fd >= 0) {
      uint64_t exp;
      if (::read(fd, &exp, sizeof exp) < 0) break;
      k += exp - 1;  // a late wake-up covers several periods: measure it once
    } else {
      timespec ts = ts_of(due);
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double due_k = t0 + static_cast<double>(k) * period;
    late.push_back(static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec) - due_k);
  }
  if (fd >= 0) ::close(fd);
  return summarize(late.data(), late.size());
}

// The stream source's schedule with nothing to send: spin on the TSC to each
// step's due time on the source's CPU and skip late steps as stream --timer
// tsc does (StepSchedule). What stream misses there is at least this.
// Each measured step's lag: the first instant the loop could act for it (its
// wake-up at or after its due time) less its due time, a skipped step's too
// (the least lag any sender on this CPU could have had for it, as the load
// generator's lag is its send less its due time).
// busy_cpu >= 0: a thread spins on that CPU meanwhile, as stream's
// busy-polling sink does; in a VM two busy vCPUs are not two idle ones.
JsonObj schedule_floor(const Clock& clk, int cpu, uint64_t rate, uint64_t steps, int busy_cpu) {
  std::atomic<bool> stop{false};
  std::thread spinner;
  if (busy_cpu >= 0)
    spinner = std::thread([&] {
      pin_to_cpu(busy_cpu);
      while (!stop.load(std::memory_order_relaxed)) cpu_relax();
    });
  pin_to_cpu(cpu);
  const uint64_t warmup = default_step_warmup(rate), total = warmup + steps;
  const StepSchedule s = StepSchedule::starting_soon(clk, rate);
  uint64_t missed = 0;
  Histogram lag;  // the load generator's own record of its lag: its memory touched before the loop
  for (uint64_t k = 0; k < total; ++k) {
    s.spin_until_due(clk, k);
    const uint64_t now = clk.ticks(), took = s.catch_up(k, now, warmup, total, missed);
    for (uint64_t j = std::max(k, warmup); j <= took && j < total; ++j)
      lag.record(std::llround(clk.to_ns(static_cast<double>(now - s.due(j)))));
    k = took;
  }
  stop = true;
  if (spinner.joinable()) spinner.join();
  JsonObj o;
  o.add("cpu", static_cast<uint64_t>(cpu)).add("schedule_rate", rate).add("schedule_steps", steps).add("warmup", warmup)
      .add("missed_steps", missed).add("missed_pct", 100.0 * static_cast<double>(missed) / static_cast<double>(steps))
      .add("lag_ns", to_json(summarize(lag)));
  if (busy_cpu >= 0) o.add("busy_cpu", static_cast<uint64_t>(busy_cpu));
  return o;
}

// setup's floor: socket, connect and accept on loopback, in one thread (the
// kernel completes a loopback handshake inside connect), a tenth of n as
// warm-up. The client closes with a reset (SO_LINGER 0), so that the loop
// leaves no TIME_WAIT behind, outside the timed part.
std::vector<double> connect_floor(const Clock& clk, uint64_t n) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 16) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (lfd >= 0) ::close(lfd);
    sys_error("limits: a loopback listening socket");
  }
  const uint64_t warmup = n / 10;
  std::vector<double> ns;
  ns.reserve(n);
  const linger reset{1, 0};
  for (uint64_t i = 0; i < warmup + n; ++i) {
    const uint64_t t0 = clk.ticks();
    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool ok = c >= 0 && ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    const int s = ok ? ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    const uint64_t t1 = clk.ticks();
    if (c >= 0) {
      setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      ::close(c);
    }
    if (s < 0) {
      ::close(lfd);
      sys_error("limits: loopback connect/accept");
    }
    ::close(s);
    if (i >= warmup) ns.push_back(clk.to_ns(static_cast<double>(t1 - t0)));
  }
  ::close(lfd);
  return ns;
}

}  // namespace

JsonObj measure_limits(const LimitsOptions& o) {
  Clock clk(true);
  Clock mono(false);
  const JsonObj hiccups = o.hiccups ? measure_hiccups(clk, o.hiccup) : JsonObj{};
  PingPong one = cacheline_pingpong(clk, o.cpu_a, o.cpu_b, o.iterations, true);
  PingPong two = cacheline_pingpong(clk, o.cpu_a, o.cpu_b, o.iterations, false);
  std::vector<double> wake = wakeup_pingpong(clk, o.cpu_a, o.cpu_b, o.wakeup_round_trips);
  JsonObj copy;
  for (uint64_t s : o.sizes) copy.add(std::to_string(s), memcpy_gbps(clk, s));
  JsonObj cost;
  // Where the TSC is not invariant, what a pinned lat or bw would read instead (tsc_cpu).
  const Clock tsc = clk.reads_tsc() ? clk : Clock(true, true);
  if (tsc.reads_tsc()) cost.add(tsc.source_name(), tsc.timestamp_cost_ns());
  cost.add("clock_gettime", mono.timestamp_cost_ns());
  JsonObj timers;
  timers.add("period_us", o.timer_period_us)
      .add("timerfd_late_ns", to_json(timer_lateness("timerfd", o.timer_wakeups, o.timer_period_us)))
      .add("nanosleep_late_ns", to_json(timer_lateness("nanosleep", o.timer_wakeups, o.timer_period_us)));
  const std::vector<double> floor = connect_floor(clk, o.connects);
  JsonObj out;
  out.add("type", "limits")
      .add_raw("cpus", "[" + std::to_string(o.cpu_a) + ", " + std::to_string(o.cpu_b) + "]")
      .add("iterations", o.iterations)
      .add("cacheline_kind", "rtt/2")
      .add("cacheline_oneway_ns", to_json(summarize(one.half_rtt_ns.data(), one.half_rtt_ns.size())))
      .add("cacheline_oneway_bulk_ns", one.bulk_half_rtt_ns)
      .add("two_lines_oneway_ns", to_json(summarize(two.half_rtt_ns.data(), two.half_rtt_ns.size())))
      .add("two_lines_oneway_bulk_ns", two.bulk_half_rtt_ns)
      .add("wakeup_oneway_ns", to_json(summarize(wake.data(), wake.size())))
      .add("memcpy_gbps", copy)
      .add("timestamp_cost_ns", cost)
      .add("record_cost_ns", record_cost_ns(clk))
      .add("hist_record_cost_ns", hist_record_cost_ns())
      .add("timer_wakeup", timers)
      .add("schedule_floor", schedule_floor(clk, o.cpu_a, o.schedule_rate, o.schedule_steps, -1))
      .add("schedule_floor_busy_sink", schedule_floor(clk, o.cpu_a, o.schedule_rate, o.schedule_steps, o.cpu_b))
      .add("connect_floor_ns", to_json(summarize(floor.data(), floor.size())))
      .add("connect_floor_covers", "tcp socket, connect and accept on loopback in one thread, no control channel")
      .add("clock_source", clk.source_name());
  if (o.hiccups) out.add("hiccups", hiccups);
  return out;
}

}  // namespace fm
