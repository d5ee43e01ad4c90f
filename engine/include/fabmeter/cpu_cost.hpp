// CPU cost of a measured window, from the kernel's own accounting: the
// process's getrusage (user, system, context switches), the measuring
// thread's own CPU time, sleeps and run-queue wait, and the /proc/stat
// lines of the CPUs it is pinned to (where the network stack's irq and
// softirq work ran). Snapshots are taken outside the timed part of a loop,
// just before the first measured message and just after the last one.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fabmeter/results.hpp"

namespace fm {

// One CPU's /proc/stat counters, in seconds.
struct CpuStatTimes {
  int cpu = -1;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
};

struct CpuSnapshot {
  double user_s = 0, system_s = 0;          // this process, all its threads
  int64_t voluntary = 0, involuntary = 0;   // context switches
  double run_delay_s = -1;                  // the measuring thread's wait on a run queue (-1: unknown)
  double on_cpu_s = -1;                     // the measuring thread's own CPU time (-1: unknown)
  int64_t sleeps = -1;                      // the measuring thread's voluntary switches (-1: unknown)
  int64_t mono_ns = 0;                      // CLOCK_MONOTONIC
  int64_t read_ns = 0;                      // how long taking this snapshot took
  std::vector<CpuStatTimes> cpus;           // the pinned CPUs, in order
};

// The CPUs this process may run on when that is fewer than the online ones
// (pinned: --cpu, taskset); empty when it may run anywhere.
std::vector<int> pinned_cpus();
// `closing`: the snapshot that ends a window reads the clock first and
// /proc/stat last, the one that opens it the other way round, so neither
// the window's time nor its CPU holds the reading of /proc/stat.
CpuSnapshot cpu_snapshot(const std::vector<int>& cpus, bool closing = false);

// What one side of a point cost, and over which window: "measured" (the
// measured messages alone, warm-up excluded), "with_warmup" (from the first
// warm-up message to the last measured one, where the warm-up's end is not
// one instant, e.g. load's threads) or "point" (the whole point, where the
// experiment marked nothing).
inline constexpr const char* kMeasured = "measured";
inline constexpr const char* kWithWarmup = "with_warmup";
class CpuWindow {
 public:
  // Session, before a point: a "point" window starts.
  void open_point();
  // Experiment: just before the first measured message.
  void begin(const char* window = kMeasured);
  // Experiment: just after the last one; `units` were measured (round
  // trips, messages, requests: `per` names them), `bytes` moved (bw,
  // stream: netperf's service demand; 0 elsewhere).
  void end(uint64_t units, const char* per, uint64_t bytes = 0);
  // --flows: a flow's ended window joins this one, which then runs from the
  // first flow's start to the last one's end with their counts added: the
  // process's CPU (every thread's) over that span. No thread figures nor
  // CPU lines: each flow is a thread of its own, on a CPU of its own.
  void add_flow(const CpuWindow& flow);
  // Session, after the point: ends a window the experiment left open.
  void close_point(uint64_t units);
  bool ended() const { return ended_; }
  uint64_t units() const { return units_; }
  // The side's JSON object (docs/results.md "cpu").
  JsonObj side() const;

 private:
  std::vector<int> cpus_;
  bool cpus_known_ = false;
  CpuSnapshot start_, stop_;
  const char* window_ = "point";
  const char* per_ = "message";
  uint64_t units_ = 0, bytes_ = 0;
  int64_t read_ns_ = 0;  // the two snapshots' reads (every flow's, added)
  uint32_t flows_ = 0;
  bool ended_ = false;
};

// What the other end's side may claim, from the point's plan: its process had at
// most `threads` threads on a CPU at once (the plan's flows or server
// threads and the engine's own: kOwnThreads) and counted at most
// `max_count` units.
struct CpuSidePlan {
  // The control thread, oneway's time thread and a transport library's own
  // (progress, I/O), beside the plan's threads.
  static constexpr uint32_t kOwnThreads = 4;
  uint32_t threads = 64 + kOwnThreads;  // the most any plan has (--flows' kMaxFlows)
  uint64_t max_count = 9007199254740992ull;  // 2^53: exact in a double
};

// The other end's side as it sent it (at most ctrl.hpp's kMaxCpuFrame bytes): parsed with nlohmann/json, every field
// checked (names, types, ranges, at most 1024 CPUs), then the fields against
// each other and the plan (cpu_s = user_s + system_s <= window_s x threads,
// utilization = cpu_s / window_s, per_message_ns = cpu_s / count, count <=
// max_count, each within the rounding of their 10 printed digits and
// kCpuTickS), and re-encoded from the checked values; anything else is a
// runtime error (a protocol error).
inline constexpr double kCpuTickS = 0.01;  // the kernel's CPU accounting is exact to a tick (100 Hz)
std::string decode_cpu_side(std::string_view frame, const CpuSidePlan& plan = {});

}  // namespace fm
