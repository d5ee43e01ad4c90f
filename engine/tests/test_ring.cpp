#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "transport/shm/shm_ring.hpp"

using namespace fm::shm;

struct Ring {
  explicit Ring(uint32_t count, uint64_t max_msg)
      : slot_size(slot_size_for(max_msg)), mem(slot_size * count + kLine), head{} {
    auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(mem.data()) + kLine - 1) & ~(kLine - 1));
    prod = RingProducer(base, count, slot_size, &head);
    cons = RingConsumer(base, count, slot_size, &head);
  }
  size_t slot_size;
  std::vector<std::byte> mem;
  RingHead head;
  RingProducer prod;
  RingConsumer cons;
};

TEST(Ring, SlotSizeKeepsSmallMessagesInOneLine) {
  EXPECT_EQ(slot_size_for(32), 64u);
  EXPECT_EQ(slot_size_for(48), 64u);
  EXPECT_EQ(slot_size_for(49), 128u);
}

TEST(Ring, EmptyRingHasNothing) {
  Ring r(8, 32);
  EXPECT_EQ(r.cons.peek(), nullptr);
}

TEST(Ring, FullRingRefusesUntilCreditsReturn) {
  Ring r(8, 32);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(r.prod.push(&v, sizeof v, 0)) << i;
  EXPECT_FALSE(r.prod.push(&v, sizeof v, 0));  // full
  // Credits come back every quarter ring (2 slots for 8), not per message.
  ASSERT_NE(r.cons.peek(), nullptr);
  EXPECT_FALSE(r.cons.pop());
  EXPECT_FALSE(r.prod.push(&v, sizeof v, 0));
  ASSERT_NE(r.cons.peek(), nullptr);
  EXPECT_TRUE(r.cons.pop());
  EXPECT_TRUE(r.prod.push(&v, sizeof v, 0));
  EXPECT_TRUE(r.prod.push(&v, sizeof v, 0));
  EXPECT_FALSE(r.prod.push(&v, sizeof v, 0));
}

TEST(Ring, WrapsAroundManyLapsInOrder) {
  Ring r(4, 100);
  std::vector<std::byte> msg(100);
  for (uint32_t i = 0; i < 1000; ++i) {
    uint32_t len = 1 + i % 100;
    std::memset(msg.data(), static_cast<int>(i & 0xff), len);
    ASSERT_TRUE(r.prod.push(msg.data(), len, i));
    const SlotHeader* s = r.cons.peek();
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->len, len);
    EXPECT_EQ(s->imm, i);
    EXPECT_EQ(static_cast<uint8_t>(RingConsumer::payload(s)[len - 1]), i & 0xff);
    r.cons.pop();
    EXPECT_EQ(r.cons.peek(), nullptr);
  }
}

TEST(Ring, TwoThreadsDeliverEverythingInOrder) {
  Ring r(16, 8);
  constexpr uint64_t kN = 200000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i)
      while (!r.prod.push(&i, sizeof i, 0)) {}
  });
  uint64_t bad = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const SlotHeader* s;
    while (!(s = r.cons.peek())) {}
    uint64_t v;
    std::memcpy(&v, RingConsumer::payload(s), sizeof v);
    bad += v != i;
    r.cons.pop();
  }
  producer.join();
  EXPECT_EQ(bad, 0u);
}
