// Single-producer single-consumer ring in shared memory, one cache-line
// transfer per small message:
//  - power-of-two slots {seq, len, imm, payload}, 64 B aligned; the consumer
//    polls only the slot's seq (message index + 1), so an empty poll reads a
//    line the producer has not touched since the last lap;
//  - the producer keeps a cached copy of the consumer's head and re-reads the
//    shared one only when the ring looks full; the consumer publishes its head
//    lazily, every quarter ring;
//  - only offsets in the shared region, never pointers.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fm::shm {

constexpr size_t kLine = 64;
constexpr size_t kSlotHeader = 16;

struct SlotHeader {
  std::atomic<uint32_t> seq;  // index + 1 of the message in this slot (0 = never written)
  uint32_t len;
  uint32_t imm;
  uint32_t reserved;
};
static_assert(sizeof(SlotHeader) == kSlotHeader);

// The consumer's published position, alone on its line and 128 B from any
// other shared line so the adjacent-line prefetcher does not pair them.
struct alignas(128) RingHead {
  std::atomic<uint64_t> head;
};

inline size_t slot_size_for(uint64_t max_msg) {
  return (kSlotHeader + max_msg + kLine - 1) / kLine * kLine;
}

class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(std::byte* slots, uint32_t count, size_t slot_size, RingHead* head)
      : slots_(slots), mask_(count - 1), count_(count), slot_size_(slot_size), head_(head) {}

  bool has_room() {
    if (tail_ - cached_head_ < count_) return true;
    cached_head_ = head_->head.load(std::memory_order_acquire);
    return tail_ - cached_head_ < count_;
  }

  // Copies the message into the next slot; false when the ring is full.
  [[gnu::always_inline]] bool push(const void* buf, uint32_t len, uint32_t imm) {
    if (!has_room()) [[unlikely]] return false;
    auto* s = reinterpret_cast<SlotHeader*>(slots_ + (tail_ & mask_) * slot_size_);
    std::memcpy(reinterpret_cast<std::byte*>(s) + kSlotHeader, buf, len);
    s->len = len;
    s->imm = imm;
    s->seq.store(static_cast<uint32_t>(tail_ + 1), std::memory_order_release);
    ++tail_;
    return true;
  }

  uint64_t tail() const { return tail_; }

 private:
  std::byte* slots_ = nullptr;
  uint64_t mask_ = 0, count_ = 0;
  size_t slot_size_ = 0;
  RingHead* head_ = nullptr;
  uint64_t tail_ = 0;
  uint64_t cached_head_ = 0;
};

class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(std::byte* slots, uint32_t count, size_t slot_size, RingHead* head)
      : slots_(slots), mask_(count - 1), slot_size_(slot_size), head_(head),
        credit_batch_(count / 4 ? count / 4 : 1) {}

  // The next message if the producer has published it. Stays valid until pop().
  [[gnu::always_inline]] const SlotHeader* peek() const {
    auto* s = reinterpret_cast<const SlotHeader*>(slots_ + (next_ & mask_) * slot_size_);
    if (s->seq.load(std::memory_order_acquire) != static_cast<uint32_t>(next_ + 1)) return nullptr;
    return s;
  }
  static const std::byte* payload(const SlotHeader* s) {
    return reinterpret_cast<const std::byte*>(s) + kSlotHeader;
  }

  // Frees the slot; returns true when it published credits (the producer may
  // be waiting for room).
  [[gnu::always_inline]] bool pop() {
    ++next_;
    if (next_ - published_ < credit_batch_) return false;
    head_->head.store(next_, std::memory_order_release);
    published_ = next_;
    return true;
  }

  uint64_t next() const { return next_; }

 private:
  std::byte* slots_ = nullptr;
  uint64_t mask_ = 0;
  size_t slot_size_ = 0;
  RingHead* head_ = nullptr;
  uint64_t credit_batch_ = 1;
  uint64_t next_ = 0;
  uint64_t published_ = 0;
};

}  // namespace fm::shm
