#include "fabmeter/limits.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/stats.hpp"

namespace fm {

JsonObj measure_limits(int cpu_a, int cpu_b, uint64_t n) {
  Clock clk(true);
  alignas(128) static std::atomic<uint64_t> line{0};
  line.store(0);
  const uint64_t warmup = n / 10 + 100;
  SampleBuf rtt(n);

  // No pause in these spins: the limit is the fastest hand-over possible.
  std::thread echo([&] {
    pin_to_cpu(cpu_b);
    for (uint64_t i = 0; i < warmup + n; ++i) {
      while (line.load(std::memory_order_acquire) != 2 * i + 1) {}
      line.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin_to_cpu(cpu_a);
  for (uint64_t i = 0; i < warmup + n; ++i) {
    uint64_t t0 = clk.ticks();
    line.store(2 * i + 1, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != 2 * i + 2) {}
    uint64_t t1 = clk.ticks();
    if (i >= warmup) rtt[i - warmup] = t1 - t0;
  }
  echo.join();

  std::vector<double> half(n);
  for (uint64_t i = 0; i < n; ++i) half[i] = clk.to_ns(static_cast<double>(rtt[i])) / 2;
  Clock mono(false);
  JsonObj cost;
  cost.add("tsc", clk.source() == ClockSource::tsc ? clk.timestamp_cost_ns() : 0.0)
      .add("clock_gettime", mono.timestamp_cost_ns());
  JsonObj o;
  o.add("type", "limits").add_raw("cpus", "[" + std::to_string(cpu_a) + ", " + std::to_string(cpu_b) + "]")
      .add("iterations", n).add("warmup", warmup)
      .add("cacheline_kind", "rtt/2")
      .add("cacheline_oneway_ns", to_json(summarize(half.data(), n)))
      .add("timestamp_cost_ns", cost)
      .add("clock_source", clk.source_name());
  return o;
}

}  // namespace fm
