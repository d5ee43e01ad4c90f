// Memory faulted in before use (fabmeter/pages.hpp).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "fabmeter/pages.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// While a GiB is faulted in, another thread of the process maps memory as
// often as it likes: no mapping waits for the whole region (MAP_POPULATE held
// the address-space lock throughout, and a session's heartbeat, mapping its
// first allocation's arena, fell silent for seconds).
TEST(MapFaultedIn, AnotherThreadMapsMemoryMeanwhile) {
  constexpr size_t kBytes = size_t(1) << 30;
  std::atomic<bool> started{false}, done{false};
  Clock::duration took{}, longest{};
  int maps = 0;
  std::thread other([&] {
    while (!started) std::this_thread::yield();
    while (!done) {
      const auto t0 = Clock::now();
      // PROT_NONE: never merged into the region being faulted in.
      void* m = mmap(nullptr, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      longest = std::max(longest, Clock::now() - t0);
      ASSERT_NE(m, MAP_FAILED);
      munmap(m, 1 << 16);
      ++maps;
    }
  });
  started = true;
  const auto t0 = Clock::now();
  bool locked = false;
  void* region = fm::map_faulted_in(kBytes, -1, &locked);
  took = Clock::now() - t0;
  done = true;
  other.join();
  ASSERT_NE(region, MAP_FAILED);
  // Every page is in: writing the region now faults nothing.
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  for (size_t i = 0; i < kBytes; i += 4096) static_cast<volatile char*>(region)[i] = 1;
  getrusage(RUSAGE_THREAD, &after);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 16) << "pages left to fault in";
  munmap(region, kBytes);
  using ms = std::chrono::duration<double, std::milli>;
  EXPECT_GT(maps, 0);
  EXPECT_LT(ms(longest).count(), ms(took).count() / 2)
      << "a mapping waited " << ms(longest).count() << " ms of the region's " << ms(took).count() << " ms";
}

}  // namespace
