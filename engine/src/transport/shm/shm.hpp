// shm: two SPSC rings (one per direction) in one POSIX shared-memory segment.
// Event mode sleeps on a futex behind an "armed" flag, so a busy remote end never
// pays for a wake-up it does not need.
#pragma once
#include <atomic>
#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/futex.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/shm/shm_ring.hpp"

namespace fm {

namespace shm {

constexpr uint64_t kMagic = 0x5245544d42414621ull;  // "!FABMETR"
constexpr uint32_t kVersion = 1;

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint64_t slot_size;
  uint64_t ring_offset[2];  // ring 0: client -> server, ring 1: server -> client
};

// One per end: the other end bumps `seq` and wakes the futex only while `armed`.
struct alignas(128) Doorbell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> armed;
};

struct alignas(128) Control {
  Header header;
  RingHead head[2];
  Doorbell bell[2];  // index = role (0 client, 1 server)
};

}  // namespace shm

class ShmTransport {
 public:
  ShmTransport(const QueueOptions& q, const Use& use);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;

  static Caps caps(const QueueOptions&) {
    return {.max_msg_size = 64ull << 20, .max_inline = 0, .reliable = true, .ordered = true,
            .supports_write = false, .send_completions = false, .same_host_only = true,
            .one_poll_mode = "each end sleeps on one futex bell, rung for its messages and its credits alike",
            .woken_by_remote = "an end sleeps on a futex bell that only the other end rings, in event mode"};
  }
  static double queued_bytes(const QueueOptions& q, uint64_t size) { return ring_pair_bytes(q, size); }
  void connect(Ctrl& ctrl, uint64_t max_msg);
  void describe(JsonObj& o) const;
  // setup: what connect() does.
  const char* connect_covers() const {
    return "server: shm_open, ftruncate; the segment name over the control channel; client: shm_open; both: "
           "mmap the two rings, every page faulted in, and mlock them; the server writes the header; a barrier, "
           "the client checks the header; a barrier, the server unlinks the name (3 control-channel round trips)";
  }
  const char* failure() const { return nullptr; }  // a dead remote end shows on the control channel

  // ---- data path ----
  [[gnu::always_inline]] bool post_send(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id) {
    if (!tx_.push(buf, len, 0)) return false;
    if (event_) ring_remote();
    return true;
  }

  [[gnu::always_inline]] bool poll_recv(RecvMsg& m) {
    const shm::SlotHeader* s = rx_.peek();
    if (!s) return false;
    m.data = shm::RingConsumer::payload(s);
    m.len = s->len;
    m.imm = s->imm;
    return true;
  }

  [[gnu::always_inline]] void release(const RecvMsg&) {
    if (rx_.pop() && event_) ring_remote();
  }

  int poll_send_comp(uint64_t*, int) { return 0; }

  bool wait_recv(RecvMsg& m);
  void wait_send();

 private:
  // After publishing a message or credits: wake the other end if it sleeps.
  void ring_remote() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (remote_bell_->armed.load(std::memory_order_relaxed)) [[unlikely]] {
      remote_bell_->seq.fetch_add(1, std::memory_order_release);
      futex_wake(&remote_bell_->seq);
    }
  }
  template <class Ready> bool sleep_until(Ready ready);

  Role role_;
  bool event_;
  uint32_t rq_depth_;
  std::string name_;
  bool unlinked_ = true;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool locked_ = false;
  shm::Control* ctl_ = nullptr;
  shm::Doorbell* my_bell_ = nullptr;
  shm::Doorbell* remote_bell_ = nullptr;
  shm::RingProducer tx_;
  shm::RingConsumer rx_;
};

}  // namespace fm
