// Machine limits measured beside every benchmark: what no transport between
// these two CPUs can beat, and what measuring itself costs.
#pragma once
#include <cstdint>
#include <vector>

#include "fabmeter/hiccups.hpp"
#include "fabmeter/results.hpp"

namespace fm {

struct LimitsOptions {
  int cpu_a = 0, cpu_b = 1;
  uint64_t iterations = 100000;                       // cache-line round trips
  std::vector<uint64_t> sizes = {32, 4096, 65536, 1 << 20};  // memcpy sizes
  uint64_t timer_wakeups = 200;                       // per timer kind
  uint64_t wakeup_round_trips = 1000;                 // futex wake-up ping-pong
  double timer_period_us = 100;
  uint64_t schedule_rate = 100000;                    // schedule floor: steps per second (stream's --rate)
  uint64_t schedule_steps = 100000;                   // measured steps, after stream's default warm-up
  uint64_t connects = 1000;                           // bare tcp connect/accept on loopback (setup's floor)
  bool hiccups = false;                               // the hiccup detector too
  HiccupOptions hiccup;
};

// - cache line bounced between threads pinned to cpu_a and cpu_b: RTT/2 with a
//   timestamp pair per round trip (as fabmeter's lat takes them) and in bulk,
//   once through one shared line and once through a line per direction;
// - a sleeping thread woken from the other CPU (futex ping-pong), RTT/2;
// - memcpy bandwidth for each size; the cost of one timestamp and of recording
//   one (timestamp + store into prefaulted storage); wake-up lateness of
//   timerfd and clock_nanosleep at a fixed period;
// - the schedule floor: the steps a bare TSC spin on cpu_a (the stream
//   source's CPU) misses at schedule_rate, counted as stream counts them,
//   once with cpu_b idle and once with a thread spinning on it (as the
//   stream's busy sink keeps it);
// - the connect floor: a bare tcp connect/accept on loopback in one thread
//   (socket, connect, accept), what setup's tcp connect costs at least;
// - with `hiccups`, first, before anything is pinned: measure_hiccups.
JsonObj measure_limits(const LimitsOptions& o);

}  // namespace fm
