// A UDP socket whose datagrams the kernel timestamps (SO_TIMESTAMPING,
// software stamps, as PTP's software mode uses them): a received datagram
// is stamped where it came in from the network device, a sent one where it
// left for the device (drivers that call skb_tx_timestamp: veth, loopback,
// most NICs). The socket layers of both hosts then fall outside the stamps.
// Stamps are CLOCK_REALTIME; ClockPair puts them on an engine's clock.
#pragma once
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace fm {

class Clock;

// One reading of CLOCK_REALTIME bracketed by two of the engine's clock
// (the narrowest of a few brackets): a kernel stamp taken near it maps onto
// the engine's clock as engine_ns + (stamp - realtime_ns) x the engine's
// skew rate (FABMETER_CLOCK_SKEW's drift applies to the stamps as to every
// reading), within +- width_ns / 2 (where in the bracket the realtime read
// fell). Taken per probe, so the slewing of CLOCK_REALTIME (NTP, a few ppm)
// cannot build up between pair and stamp: microseconds apart.
struct ClockPair {
  double engine_ns;     // the bracket's middle (Clock::ticks_to_mono_ns)
  double width_ns;      // the bracket's width
  int64_t realtime_ns;
  double rate;          // Clock::skew_rate
  static ClockPair read(const Clock& clk);
  double to_engine(int64_t stamp_ns) const {
    return engine_ns + static_cast<double>(stamp_ns - realtime_ns) * rate;
  }
  // The earliest and the latest engine time the stamp may have been.
  double earliest(int64_t stamp_ns) const { return to_engine(stamp_ns) - width_ns / 2; }
  double latest(int64_t stamp_ns) const { return to_engine(stamp_ns) + width_ns / 2; }
};

class StampedUdp {
 public:
  // Bound to `local`'s address with a port the kernel picks. Throws (a
  // runtime error) if the socket or its timestamping cannot be had.
  explicit StampedUdp(const sockaddr_storage& local);
  ~StampedUdp();
  StampedUdp(const StampedUdp&) = delete;
  StampedUdp& operator=(const StampedUdp&) = delete;

  uint16_t port() const { return port_; }
  // Only `remote` (address and port) may send to us from now on: the kernel
  // drops datagrams from anyone else.
  void connect(const sockaddr_storage& remote, uint16_t port);

  // Non-blocking send; false if the kernel did not take the datagram. The
  // n-th datagram taken (from 0) gets TX stamp id n.
  bool send(const void* buf, size_t len);
  uint32_t sent() const { return sent_; }

  struct Datagram {
    size_t len;        // bytes received (at most the buffer's)
    bool truncated;    // it was longer than the buffer
    int64_t stamp_ns;  // kernel RX stamp (CLOCK_REALTIME); 0 if it had none
  };
  // Non-blocking: the next datagram, if one is waiting.
  std::optional<Datagram> poll_recv(void* buf, size_t cap);

  struct TxStamp {
    uint32_t id;       // which datagram (see send)
    int64_t stamp_ns;  // when it left for the device (CLOCK_REALTIME)
  };
  // Non-blocking: the next transmit stamp from the socket's error queue.
  std::optional<TxStamp> poll_tx_stamp();

  // Sleeps until something may be read (a datagram or a TX stamp) or
  // `ctrl_fd` (if >= 0) has input, at most `ms`.
  void wait(int ctrl_fd, int ms) const;

  // Whether CLOCK_REALTIME, the stamps' clock, was set (stepped: date -s,
  // settimeofday, an NTP step) since the socket was made or the last call.
  // A step between a ClockPair and its stamps moves them by the step, which
  // no delay shows; NTP's slewing is no step (the pairs absorb it). A
  // timerfd armed on CLOCK_REALTIME with TFD_TIMER_CANCEL_ON_SET: the
  // kernel cancels it on every set of the clock.
  bool clock_stepped();

 private:
  bool arm_step_watch();
  int fd_ = -1;
  int step_fd_ = -1;
  uint16_t port_ = 0;
  uint32_t sent_ = 0;
};

}  // namespace fm
