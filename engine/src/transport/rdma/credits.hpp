// What verbs and ofi share on their data paths: receive refill and write
// credits, both over a ring of receive slots, and the send ring's fills.
//
// Refill: released receive buffers go back in batches of --rq-refill (one
// post per batch, not per message). To an end that RDMA-writes into our
// ring, the count of buffers given back is its credit, sent after each
// batch; a credit that finds no room in the send queue is due and is sent
// from the next poll.
//
// Credits: message n goes to the other end's slot n mod slots, and may be written
// only once the other end has given back message n - slots (its credit count).
#pragma once
#include <cstdint>

namespace fm::rdma {

class RecvRefill {
 public:
  // One more buffer released; true when a batch of `refill` is waiting.
  [[gnu::always_inline]] bool release(uint32_t refill) { return ++released_ - given_back_ >= refill; }
  // Released, not yet given back.
  uint32_t held() const { return static_cast<uint32_t>(released_ - given_back_); }
  void gave_back(uint32_t n) { given_back_ += n; }
  uint64_t released() const { return released_; }
  uint64_t given_back() const { return given_back_; }

  bool credit_due = false;  // a credit to send from the next poll

 private:
  uint64_t released_ = 0, given_back_ = 0;
};

class WriteCredits {
 public:
  // No slot of the other end's `slots` is free until it gives back more.
  [[gnu::always_inline]] bool full(uint64_t remote_given_back, uint64_t slots) const {
    return written_ - remote_given_back >= slots;
  }
  // The other end's slot for the next message.
  uint64_t slot() const { return slot_; }
  uint64_t written() const { return written_; }
  void wrote(uint64_t slots) {
    ++written_;
    if (++slot_ == slots) slot_ = 0;
  }

 private:
  uint64_t written_ = 0, slot_ = 0;
};

// Send n goes from slot n mod slots of a ring the payload is copied into.
// Within one unbroken run of kSameBytes posts from one buffer and length, a
// slot filled earlier in the run holds those bytes already: bw's copies end
// after the first lap (perftest never copies; send and write bw 1-3 %
// faster in the Soft-RoCE guest).
class SlotFill {
 public:
  // Whether post n (from buf, len bytes) must copy into its slot.
  [[gnu::always_inline]] bool needs_copy(uint64_t n, uint64_t slots, const void* buf, uint32_t len, bool same) {
    if (!same || buf != buf_ || len != len_ || n < since_) [[unlikely]] {
      buf_ = buf;
      len_ = len;
      since_ = n;
      return true;
    }
    return n - since_ < slots;
  }

 private:
  const void* buf_ = nullptr;
  uint32_t len_ = 0;
  uint64_t since_ = 0;  // the run's first post
};

}  // namespace fm::rdma
