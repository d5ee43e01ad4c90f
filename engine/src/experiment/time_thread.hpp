// oneway's time thread, for the thesis' t_send: the moment the device read a
// send's payload out of the sender's memory. Once a send is posted, a thread
// of its own keeps writing the clock into the stamp field of every payload
// the device may not have read yet (from the oldest send not seen completed
// to the newest posted), so the stamp the receiver finds is the last one
// written before the device read the buffer. A stamp is a lower bound of
// that read, below it by at most one pass of the thread (pass_ns). It needs
// a transport whose device reads the payload after the post (verbs and ofi
// non-inline: their registered send slots) and a CPU no busy thread of the
// run takes: sharing one, it would write only when the scheduler lets it.
#pragma once
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/transport.hpp"

namespace fm {

// Where the thread may run: a CPU (>= 0), anywhere (-1, the client is
// unpinned), or nowhere (why says so).
struct TimeThreadPlace {
  int cpu = -1;
  std::string why;
};

// --time-thread: auto takes the lowest online CPU that neither the client
// nor (on one host) the server is pinned to; a number is taken as given,
// refused when the client or the server (one host) runs there. Unpinned,
// the thread runs unpinned where the host has a CPU beyond the busy ends.
inline TimeThreadPlace place_time_thread(const std::string& option, int own_cpu, int server_cpu, bool same_host) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int busy = same_host ? 2 : 1;
  auto taken = [&](int c) { return c == own_cpu || (same_host && c == server_cpu); };
  if (option == "off") return {-1, "--time-thread off"};
  if (option != "auto") {
    const int cpu = std::stoi(option);
    if (taken(cpu))
      usage_error("--time-thread " + option + ": the " + (cpu == own_cpu ? "client" : "server") +
                  " runs on that CPU; the time thread needs one of its own");
    return {cpu, ""};
  }
  const std::string have = "this host has " + std::to_string(online) + " online CPUs";
  if (own_cpu < 0)
    return online > busy ? TimeThreadPlace{-1, ""}
                         : TimeThreadPlace{-1, "no CPU of its own for the time thread: " + have + ", the run's " +
                                                   std::to_string(busy) + " busy end" + (busy > 1 ? "s" : "") +
                                                   " take them"};
  for (int c = 0; c < online; ++c)
    if (!taken(c)) return {c, ""};
  std::string ends = "the client has CPU " + std::to_string(own_cpu);
  if (same_host) ends += ", the server CPU " + std::to_string(server_cpu);
  return {-1, "no CPU of its own for the time thread: " + have + ", " + ends + " (--time-thread N names one)"};
}

class TimeThread {
 public:
  // Payload addresses remembered (a power of two); one pass stamps at most half.
  static constexpr uint64_t kRing = 1024;

  TimeThread(const Clock& clk, int cpu) : clk_(clk) {
    for (auto& s : src_) s.store(nullptr, std::memory_order_relaxed);
    thread_ = std::thread([this] { run(); });
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      if (pthread_setaffinity_np(thread_.native_handle(), sizeof set, &set) != 0) {
        stop();
        usage_error("--time-thread " + std::to_string(cpu) + ": cannot run on that CPU (not online or not allowed)");
      }
    }
  }
  ~TimeThread() { stop(); }
  TimeThread(const TimeThread&) = delete;

  // Send n's payload is at `payload` (nullptr: nothing to stamp); before its post.
  [[gnu::always_inline]] void publish(uint64_t n, std::byte* payload) {
    src_[n & (kRing - 1)].store(payload, std::memory_order_relaxed);
    hi_.store(n + 1, std::memory_order_release);
  }
  // Sends before n completed: the device has read them.
  [[gnu::always_inline]] void read_before(uint64_t n) {
    if (n > lo_.load(std::memory_order_relaxed)) lo_.store(n, std::memory_order_relaxed);
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  // Mean time of one pass over the sends in flight, ns (0: none made).
  double pass_ns() const { return passes_ ? clk_.to_ns(static_cast<double>(busy_ticks_)) / static_cast<double>(passes_) : 0; }

 private:
  void run() {
    uint64_t start = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t hi = hi_.load(std::memory_order_acquire);
      const uint64_t lo = std::max(lo_.load(std::memory_order_relaxed), hi > kRing / 2 ? hi - kRing / 2 : 0);
      if (lo >= hi) {
        start = 0;  // idle time is no pass
        cpu_relax();
        continue;
      }
      // One clock read per pass: every payload of the pass gets it.
      const uint64_t now = clk_.ticks();
      if (start) busy_ticks_ += now - start, ++passes_;
      start = now;
      for (uint64_t k = lo; k < hi; ++k)
        if (std::byte* p = src_[k & (kRing - 1)].load(std::memory_order_relaxed))
          __atomic_store_n(reinterpret_cast<uint64_t*>(p + kSendStampOffset), now, __ATOMIC_RELAXED);
    }
  }

  const Clock& clk_;
  std::atomic<std::byte*> src_[kRing];
  alignas(64) std::atomic<uint64_t> hi_{0};
  alignas(64) std::atomic<uint64_t> lo_{0};
  alignas(64) std::atomic<bool> stop_{false};
  uint64_t passes_ = 0, busy_ticks_ = 0;  // the thread's; read after stop()
  std::thread thread_;
};

}  // namespace fm
