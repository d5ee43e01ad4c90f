// oneway's time thread (t_send): where it may run, and what it writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "experiment/time_thread.hpp"

namespace {

const int kOnline = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));

TEST(TimeThread, TakesACpuNeitherEndIsPinnedTo) {
  EXPECT_EQ(fm::place_time_thread("off", 0, 1, true).why, "--time-thread off");
  // One host, client on 0, server on 1: the thread wants a third CPU.
  const fm::TimeThreadPlace one_host = fm::place_time_thread("auto", 0, 1, true);
  if (kOnline >= 3) {
    EXPECT_EQ(one_host.cpu, 2);
    EXPECT_EQ(one_host.why, "");
  } else {
    EXPECT_EQ(one_host.cpu, -1);
    EXPECT_NE(one_host.why.find("no CPU of its own"), std::string::npos) << one_host.why;
    EXPECT_NE(one_host.why.find("the server CPU 1"), std::string::npos) << one_host.why;
  }
  // The server elsewhere: its CPU number says nothing about ours.
  if (kOnline >= 2) {
    EXPECT_EQ(fm::place_time_thread("auto", 0, 1, false).cpu, 1);
  }
  // Unpinned ends: unpinned, where the host has a CPU beyond the busy ones.
  EXPECT_EQ(fm::place_time_thread("auto", -1, -1, true).why.empty(), kOnline >= 3);
  // Named: taken as given, never the client's or (one host) the server's.
  EXPECT_EQ(fm::place_time_thread("5", 0, 1, true).cpu, 5);
  EXPECT_THROW(fm::place_time_thread("0", 0, 1, true), fm::Error);
  EXPECT_THROW(fm::place_time_thread("1", 0, 1, true), fm::Error);
  EXPECT_EQ(fm::place_time_thread("1", 0, 1, false).cpu, 1);
}

// Waits (at most 10 s) until the stamp at p changes from `was`; returns it.
uint64_t next_stamp(const std::byte* p, uint64_t was) {
  uint64_t v = was;
  for (int i = 0; i < 10000 && v == was; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    v = __atomic_load_n(reinterpret_cast<const uint64_t*>(p + fm::kSendStampOffset), __ATOMIC_RELAXED);
  }
  return v;
}

TEST(TimeThread, StampsThePayloadsNotYetReadOnly) {
  const fm::Clock clk(true);
  alignas(64) std::byte a[64] = {}, b[64] = {};
  fm::TimeThread tt(clk, -1);
  const uint64_t before = clk.ticks();
  tt.publish(0, a);
  const uint64_t first = next_stamp(a, 0);
  EXPECT_GE(first, before) << "a stamp older than the publication";
  EXPECT_GT(next_stamp(a, first), first) << "the thread stopped rewriting an unread payload";
  // Send 0 completed: only send 1 is stamped from now on.
  tt.publish(1, b);
  tt.read_before(1);
  EXPECT_NE(next_stamp(b, 0), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const uint64_t a_then = __atomic_load_n(reinterpret_cast<const uint64_t*>(a + fm::kSendStampOffset), __ATOMIC_RELAXED);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(__atomic_load_n(reinterpret_cast<const uint64_t*>(a + fm::kSendStampOffset), __ATOMIC_RELAXED), a_then);
  // Bytes outside the stamp field are never touched.
  for (size_t i = 0; i < sizeof a; ++i)
    if (i < fm::kSendStampOffset || i >= fm::kSendStampEnd) {
      EXPECT_EQ(a[i], std::byte{0}) << i;
    }
  tt.stop();
  EXPECT_GT(tt.pass_ns(), 0.0);
}

}  // namespace
