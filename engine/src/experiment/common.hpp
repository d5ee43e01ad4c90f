// What every experiment shares: the run context, the slow-path guard that
// notices a lost peer or Ctrl-C, and the receive helper for busy/event modes.
#pragma once
#include <csignal>
#include <cstring>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/transport.hpp"

namespace fm {


enum class Status {
  ok,
  ctrl_message,   // the peer sent something on the control channel (e.g. end of point)
  timeout,        // a deadline passed (a reply counted lost on unreliable transports)
  peer_lost,      // the peer went away or stopped answering
  interrupted,    // Ctrl-C / SIGTERM
  failed,         // the transport reported an error
};

struct Ctx {
  const Params& p;
  const Clock& clk;
  Ctrl& ctrl;
  Role role;
  Caps caps;
  bool same_host;            // both ends share one TSC
  std::string failure;       // why the point ended early
};

// What one measured point produced: summary fields and raw arrays to save.
struct PointOut {
  JsonObj fields;
  std::vector<std::pair<std::string, std::vector<double>>> arrays;  // name -> ns values
  bool partial = false;
};

// Slow-path checks, called every few thousand spins or once per event-mode
// wait slice. Only the control-channel poll is a system call, and it is
// rate-limited to once a millisecond.
class Guard {
 public:
  explicit Guard(Ctx& c) : c_(c), interval_(c.clk.ns_to_ticks(1e6)) {}

  template <class T>
  Status check(const T& t) {
    if (stop_requested()) return Status::interrupted;
    const char* f = t.failure();
    uint64_t now = c_.clk.ticks();
    if (now < next_ && !f) return Status::ok;
    next_ = now + interval_;
    // A peer that finished closes its data connection right after saying so
    // on the control channel: its message wins over our transport's failure.
    switch (c_.ctrl.peek()) {
      case Ctrl::Peek::closed:
        c_.failure = "the peer closed the control channel (process ended?)";
        return Status::peer_lost;
      case Ctrl::Peek::message:
        return Status::ctrl_message;
      case Ctrl::Peek::nothing:
        break;
    }
    if (f) {
      c_.failure = f;
      return Status::failed;
    }
    return Status::ok;
  }

 private:
  Ctx& c_;
  uint64_t interval_;
  uint64_t next_ = 0;
};

constexpr uint32_t kGuardSpins = 1024;

// Waits for the next message until `deadline` (ticks). Busy: spin on
// poll_recv; event: sleep in wait_recv slices. Returns ok with `m` filled, or
// why it stopped waiting.
template <class T>
[[gnu::always_inline]] inline Status recv_next(T& t, RecvMsg& m, Guard& g, const Clock& clk, Poll poll,
                                               uint64_t deadline = UINT64_MAX) {
  if (poll == Poll::busy) {
    if (t.poll_recv(m)) [[likely]] return Status::ok;
    for (uint32_t spins = 0;; ++spins) {
      if (t.poll_recv(m)) return Status::ok;
      if (spins == kGuardSpins) {
        spins = 0;
        if (Status s = g.check(t); s != Status::ok) return s;
        if (deadline != UINT64_MAX && clk.ticks() >= deadline) return Status::timeout;
      }
      cpu_relax();
    }
  }
  for (;;) {
    if (t.wait_recv(m)) return Status::ok;
    if (Status s = g.check(t); s != Status::ok) return s;
    if (deadline != UINT64_MAX && clk.ticks() >= deadline) return Status::timeout;
  }
}

// Posts one send, waiting for room as the poll mode says.
template <class T>
[[gnu::always_inline]] inline Status send_one(T& t, const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id,
                                              Guard& g, Poll poll) {
  if (t.post_send(buf, len, flags, wr_id)) [[likely]] return Status::ok;
  for (uint32_t spins = 0;; ++spins) {
    if (poll == Poll::event) t.wait_send();
    else cpu_relax();
    t.poll_send_comp(nullptr, 0);
    if (t.post_send(buf, len, flags, wr_id)) return Status::ok;
    if (spins >= kGuardSpins || poll == Poll::event) {
      spins = 0;
      if (Status s = g.check(t); s != Status::ok) return s;
    }
  }
}

// Sequence numbers ride in the payload only where the transport may lose or
// reorder (the receiver cannot count on arrival order).
inline void put_seq(std::byte* buf, uint64_t len, uint32_t seq) {
  std::memcpy(buf, &seq, len < 4 ? len : 4);
}
inline uint32_t get_seq(const std::byte* buf, uint64_t len) {
  uint32_t seq = 0;
  std::memcpy(&seq, buf, len < 4 ? len : 4);
  return seq;
}

const char* status_name(Status s);

}  // namespace fm
