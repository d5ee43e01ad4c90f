// rdma::SlotFill: which posts must copy bw's payload into the send ring.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "transport/rdma/credits.hpp"

namespace fm::rdma {
namespace {

constexpr uint64_t kSlots = 4;

TEST(SlotFill, ARunOfTheSameBytesCopiesOneLapOnly) {
  SlotFill f;
  std::array<char, 64> buf{};
  EXPECT_TRUE(f.needs_copy(0, kSlots, buf.data(), 32, false));  // the run's first post
  for (uint64_t n = 1; n < kSlots; ++n) EXPECT_TRUE(f.needs_copy(n, kSlots, buf.data(), 32, true)) << n;
  for (uint64_t n = kSlots; n < 3 * kSlots; ++n) EXPECT_FALSE(f.needs_copy(n, kSlots, buf.data(), 32, true)) << n;
}

TEST(SlotFill, AnyChangeStartsANewRun) {
  SlotFill f;
  std::array<char, 64> a{}, b{};
  for (uint64_t n = 0; n < 2 * kSlots; ++n) f.needs_copy(n, kSlots, a.data(), 32, n > 0);
  // Without the promise, from another buffer, with another length: copied,
  // and so is every slot of the next lap, which the old run had filled.
  EXPECT_TRUE(f.needs_copy(8, kSlots, a.data(), 32, false));
  for (uint64_t n = 9; n < 12; ++n) EXPECT_TRUE(f.needs_copy(n, kSlots, a.data(), 32, true)) << n;
  EXPECT_FALSE(f.needs_copy(12, kSlots, a.data(), 32, true));
  EXPECT_TRUE(f.needs_copy(13, kSlots, b.data(), 32, true));
  EXPECT_TRUE(f.needs_copy(14, kSlots, b.data(), 16, true));
  for (uint64_t n = 15; n < 18; ++n) EXPECT_TRUE(f.needs_copy(n, kSlots, b.data(), 16, true)) << n;
  EXPECT_FALSE(f.needs_copy(18, kSlots, b.data(), 16, true));
}

TEST(SlotFill, APostTriedAgainCopiesAgainUntilALapIsDone) {
  SlotFill f;
  std::array<char, 64> buf{};
  EXPECT_TRUE(f.needs_copy(0, kSlots, buf.data(), 32, false));
  EXPECT_TRUE(f.needs_copy(1, kSlots, buf.data(), 32, true));
  EXPECT_TRUE(f.needs_copy(1, kSlots, buf.data(), 32, true));  // the window was full: the same post again
}

}  // namespace
}  // namespace fm::rdma
