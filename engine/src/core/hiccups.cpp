#include "fabmeter/hiccups.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"

namespace fm {
namespace {

// Per CPU: more gaps than this above the threshold say the threshold is too low.
constexpr size_t kMaxListedGaps = 10000;
// Time for every reader to start and pin itself before the common window opens.
constexpr double kStartNs = 50e6;

struct Gap {
  uint64_t start, ticks;
};

struct Reader {
  int cpu = -1;
  std::vector<Gap> listed;  // prefaulted: the hot loop never allocates
  size_t n_listed = 0;
  uint64_t count = 0, longest = 0, total = 0;
  std::string refused;  // why it could not take the real-time priority asked
};

// The hot loop: consecutive TSC reads; a long step between two is a gap.
void spin(const Clock& clk, Reader& r, uint64_t open, uint64_t close, uint64_t threshold, int fifo) {
  pin_to_cpu(r.cpu);
  const sched_param prio{fifo};
  if (fifo > 0 && pthread_setschedparam(pthread_self(), SCHED_FIFO, &prio) != 0)
    r.refused = "SCHED_FIFO " + std::to_string(fifo) + " refused (CAP_SYS_NICE, RLIMIT_RTPRIO)";
  while (clk.ticks() < open) {}
  uint64_t prev = clk.ticks();
  while (prev < close) {
    const uint64_t now = clk.ticks(), step = now - prev;
    if (step > threshold) [[unlikely]] {
      if (r.n_listed < r.listed.size()) r.listed[r.n_listed++] = {prev, step};
      ++r.count;
      r.total += step;
      r.longest = std::max(r.longest, step);
    }
    prev = now;
  }
}

// The spans in which every reader was in a gap at once: a sweep over the gaps'
// starts and ends, counting the readers inside one (a reader's gaps never overlap).
std::vector<Gap> all_cpu_spans(const std::vector<Reader>& readers) {
  std::vector<std::pair<uint64_t, int>> edges;
  for (const Reader& r : readers)
    for (size_t i = 0; i < r.n_listed; ++i)
      edges.insert(edges.end(), {{r.listed[i].start, 1}, {r.listed[i].start + r.listed[i].ticks, -1}});
  std::sort(edges.begin(), edges.end());  // at one instant an end (-1) before a start: touching is not overlapping
  std::vector<Gap> spans;
  int inside = 0;
  const int all = static_cast<int>(readers.size());
  for (const auto& [t, d] : edges) {
    if (d < 0 && inside == all) spans.back().ticks = t - spans.back().start;
    inside += d;
    if (d > 0 && inside == all) spans.push_back({t, 0});
  }
  return spans;
}

}  // namespace

JsonObj measure_hiccups(const Clock& clk, const HiccupOptions& o) {
  const std::vector<int>& cpus = o.cpus.empty() ? usable_cpus() : o.cpus;
  const uint64_t threshold = clk.ns_to_ticks(o.threshold_us * 1e3);
  std::vector<Reader> readers;
  for (int c : cpus) {
    Reader& r = readers.emplace_back();
    r.cpu = c;
    r.listed.resize(kMaxListedGaps);
  }
  const uint64_t open = clk.ticks() + clk.ns_to_ticks(kStartNs), close = open + clk.ns_to_ticks(o.seconds * 1e9);
  std::vector<std::thread> threads;
  for (Reader& r : readers)
    threads.emplace_back([&clk, &r, open, close, threshold, &o] { spin(clk, r, open, close, threshold, o.fifo); });
  for (std::thread& t : threads) t.join();
  for (const Reader& r : readers)
    if (!r.refused.empty()) usage_error("--hiccup-fifo: " + r.refused);

  const std::vector<Gap> spans = readers.size() >= 2 ? all_cpu_spans(readers) : std::vector<Gap>{};
  auto us = [&clk](uint64_t ticks) { return clk.to_ns(static_cast<double>(ticks)) / 1e3; };
  auto since_open_us = [&](uint64_t t) { return t >= open ? us(t - open) : -us(open - t); };
  nlohmann::json gaps = nlohmann::json::array(), per_cpu = nlohmann::json::array(), all = nlohmann::json::array();
  uint64_t count = 0, longest = 0, total = 0, unlisted = 0;
  for (const Reader& r : readers) {
    for (size_t i = 0; i < r.n_listed; ++i) {
      const Gap& g = r.listed[i];
      const bool everywhere = std::any_of(spans.begin(), spans.end(), [&g](const Gap& s) {
        return s.start < g.start + g.ticks && g.start < s.start + s.ticks;
      });
      gaps.push_back({{"cpu", r.cpu}, {"start_us", since_open_us(g.start)}, {"length_us", us(g.ticks)},
                      {"all_cpus", everywhere}});
    }
    per_cpu.push_back({{"cpu", r.cpu}, {"count", r.count}, {"longest_us", us(r.longest)}, {"total_us", us(r.total)}});
    count += r.count, total += r.total, unlisted += r.count - r.n_listed;
    longest = std::max(longest, r.longest);
  }
  std::stable_sort(gaps.begin(), gaps.end(),
                   [](const auto& a, const auto& b) { return a["start_us"].template get<double>() < b["start_us"].template get<double>(); });
  for (const Gap& s : spans) all.push_back({{"start_us", since_open_us(s.start)}, {"length_us", us(s.ticks)}});
  JsonObj out;
  out.add("seconds", o.seconds)
      .add("threshold_us", o.threshold_us)
      .add("fifo", o.fifo)
      .add_raw("cpus", nlohmann::json(cpus).dump())
      .add("count", count)
      .add("longest_us", us(longest))
      .add("total_us", us(total))
      .add("unlisted", unlisted)
      .add_raw("per_cpu", per_cpu.dump())
      .add_raw("gaps", gaps.dump())
      .add_raw("all_cpus_gaps", all.dump());
  return out;
}

}  // namespace fm
