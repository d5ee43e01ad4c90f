// What the raw-API ping-pongs (rawpp_zmq, rawpp_nng, rawpp_nanomsg) share:
// arguments, CPU pinning, the library's threads' placement, the clock and the
// one JSON line. Each tool's own file holds only its library's loop, written
// as a user of that library would.
//
//   rawpp_LIB server ENDPOINT busy|event SIZE CPU IO_CPU              echoes until killed
//   rawpp_LIB client ENDPOINT busy|event SIZE CPU IO_CPU ITERS [WARMUP]
//
// busy: non-blocking receive in a spin; event: blocking receive. CPU -1 =
// unpinned. IO_CPU: where the library's own threads run once its socket is
// up (as fabmeter's --io-cpu puts them); -1: where they start (CPU's). The
// client times every round trip (CLOCK_MONOTONIC), excludes WARMUP (default
// 1000, as fabmeter lat) and prints
//   {"tool", "mode", "size", "iterations", "warmup", "rtt_ns_p50",
//    "oneway_ns_p50" (RTT/2), "rtt_ns_mean", "library_version", "endpoint",
//    "io_cpu", "io_threads" (the library's threads moved there)}
#pragma once
#include <dirent.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace rawpp {

struct Args {
  bool server = false;
  const char* endpoint = nullptr;
  bool busy = true;
  size_t size = 0;
  int cpu = -1, io_cpu = -1;
  uint64_t iters = 0, warmup = 1000;
};

[[noreturn]] inline void die(const char* tool, const std::string& msg) {
  std::fprintf(stderr, "%s: error: %s\n", tool, msg.c_str());
  std::exit(1);
}

inline Args parse(const char* tool, int argc, char** argv) {
  Args a;
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s server ENDPOINT busy|event SIZE CPU IO_CPU\n"
                 "       %s client ENDPOINT busy|event SIZE CPU IO_CPU ITERS [WARMUP]\n", tool, tool);
    std::exit(2);
  };
  if (argc < 7) usage();
  a.server = std::strcmp(argv[1], "server") == 0;
  if (!a.server && std::strcmp(argv[1], "client") != 0) usage();
  if (a.server ? argc != 7 : (argc != 8 && argc != 9)) usage();
  a.endpoint = argv[2];
  if (std::strcmp(argv[3], "busy") != 0 && std::strcmp(argv[3], "event") != 0) usage();
  a.busy = std::strcmp(argv[3], "busy") == 0;
  a.size = std::strtoull(argv[4], nullptr, 10);
  a.cpu = std::atoi(argv[5]);
  a.io_cpu = std::atoi(argv[6]);
  if (!a.server) a.iters = std::strtoull(argv[7], nullptr, 10);
  if (argc == 9) a.warmup = std::strtoull(argv[8], nullptr, 10);
  if (a.size == 0 || (!a.server && a.iters == 0)) usage();
  if (a.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a.cpu, &set);
    // Before the library starts its threads, so they inherit the CPU (as in the engine).
    if (sched_setaffinity(0, sizeof set, &set) != 0) die(tool, "cannot pin to CPU " + std::to_string(a.cpu));
  }
  return a;
}

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Every thread of this process but the calling one (the library's, once its
// socket is up) moved to IO_CPU; how many. -1: left where they started.
inline uint32_t place_io_threads(const char* tool, const Args& a) {
  if (a.io_cpu < 0) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(a.io_cpu, &set);
  uint32_t moved = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) die(tool, "cannot list /proc/self/task");
  while (dirent* e = readdir(d)) {
    const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
    if (tid <= 0 || tid == gettid()) continue;
    if (sched_setaffinity(tid, sizeof set, &set) != 0) die(tool, "cannot move thread " + std::string(e->d_name) + " to CPU " + std::to_string(a.io_cpu));
    ++moved;
  }
  closedir(d);
  return moved;
}

// Round-trip times of the measured iterations, kept without allocating in the loop.
struct Timer {
  std::vector<uint64_t> rtt;
  uint64_t loop_start = 0, loop_end = 0;
  uint32_t io_threads = 0;
  explicit Timer(const Args& a) : rtt(a.iters) {
    for (auto& x : rtt) x = 0;  // touch every page before the loop
  }
};

// The ping-pong itself, the same for every library, called with the socket
// up (its library's threads started): they go to IO_CPU; the server echoes
// forever; the client times each round trip after the warm-up.
template <class Send, class Recv>
Timer pingpong(const char* tool, const Args& a, Send send, Recv recv) {
  const uint32_t io_threads = place_io_threads(tool, a);
  if (a.server) {
    for (;;) {
      recv();
      send();
    }
  }
  Timer t(a);
  t.io_threads = io_threads;
  for (uint64_t i = 0; i < a.warmup + a.iters; ++i) {
    if (i == a.warmup) t.loop_start = now_ns();
    uint64_t t0 = now_ns();
    send();
    recv();
    if (i >= a.warmup) t.rtt[i - a.warmup] = now_ns() - t0;
  }
  t.loop_end = now_ns();
  return t;
}

inline void report(const char* tool, const Args& a, Timer& t, const std::string& version) {
  double mean = static_cast<double>(t.loop_end - t.loop_start) / static_cast<double>(a.iters);
  std::sort(t.rtt.begin(), t.rtt.end());
  // Median with linear interpolation, as numpy.percentile and fabmeter.
  double pos = 0.5 * static_cast<double>(a.iters - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, t.rtt.size() - 1);
  double p50 = static_cast<double>(t.rtt[lo]) + (pos - static_cast<double>(lo)) * static_cast<double>(t.rtt[hi] - t.rtt[lo]);
  std::printf("{\"tool\": \"%s\", \"mode\": \"%s\", \"size\": %zu, \"iterations\": %llu, \"warmup\": %llu, "
              "\"rtt_ns_p50\": %.1f, \"oneway_ns_p50\": %.1f, \"rtt_ns_mean\": %.1f, \"library_version\": \"%s\", "
              "\"endpoint\": \"%s\", \"io_cpu\": %d, \"io_threads\": %u}\n",
              tool, a.busy ? "busy" : "event", a.size, static_cast<unsigned long long>(a.iters),
              static_cast<unsigned long long>(a.warmup), p50, p50 / 2, mean, version.c_str(), a.endpoint, a.io_cpu,
              t.io_threads);
  std::fflush(stdout);
}

}  // namespace rawpp
