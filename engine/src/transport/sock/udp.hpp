// udp: one connected datagram socket per end; a message is one datagram.
// Nothing is ever truncated: sizes above the datagram limit are refused
// before the run. Losses are counted by the measuring loops, never waited on.
// Several threads may read one socket (reader()): the kernel hands each
// datagram to one of them, whole, so they need no lock.
#pragma once
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/sock/sock.hpp"

namespace fm {

class UdpTransport {
 public:
  static constexpr uint64_t kMaxDatagram = 65507;  // IPv4: 65535 - 20 (IP) - 8 (UDP)

  explicit UdpTransport(const Use& use);
  ~UdpTransport();
  UdpTransport(const UdpTransport&) = delete;

  static Caps caps() {
    return {.max_msg_size = kMaxDatagram, .max_inline = 0, .reliable = false, .ordered = false,
            .supports_write = false, .send_completions = false, .same_host_only = false, .shared_rx = true};
  }
  void connect(Ctrl& ctrl, uint64_t max_msg);
  // The same socket (a duplicate descriptor) with a receive buffer of its own.
  std::unique_ptr<UdpTransport> reader() const;
  void describe(JsonObj& o) const;
  // setup: what connect() does.
  const char* connect_covers() const {
    return "both: socket, bind, ports swapped over the control channel, connect (no packet: udp has no "
           "handshake), buffers sized; a control-channel barrier (2 control-channel round trips)";
  }
  // Bytes queued in the socket's receive and send buffers (SIOCINQ, SIOCOUTQ: two system calls, slow path only).
  Pools pools() const { return sock::pools(fd_, rcvbuf_, sndbuf_); }
  const char* failure() const { return failure_; }

  // ---- data path ----
  bool post_send(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id) {
    ssize_t k = ::send(fd_, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k == static_cast<ssize_t>(len)) [[likely]] return true;
    // ENOBUFS/EAGAIN: the kernel queue is full, try again; the other end's port
    // going away shows up as ECONNREFUSED (ICMP port unreachable).
    if (k < 0 && errno != EAGAIN && errno != ENOBUFS && errno != EINTR) fail_errno("send");
    return false;
  }

  bool poll_recv(RecvMsg& m) { return recv_one(m, MSG_DONTWAIT); }
  void release(const RecvMsg&) {}
  int poll_send_comp(uint64_t*, int) { return 0; }

  bool wait_recv(RecvMsg& m) { return recv_one(m, 0); }
  void wait_send();

 private:
  bool recv_one(RecvMsg& m, int flags) {
    ssize_t k = ::recv(fd_, rx_.data(), rx_.size(), flags);
    if (k >= 0) [[likely]] {
      m.data = rx_.data();
      m.len = static_cast<uint32_t>(k);
      m.imm = 0;
      return true;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail_errno("recv");
    return false;
  }
  void fail_errno(const char* what);
  struct ReaderOf {
    const UdpTransport& owner;
  };
  explicit UdpTransport(ReaderOf r);

  uint32_t loss_timeout_ms_;
  int fd_ = -1;
  std::vector<std::byte> rx_;
  const char* failure_ = nullptr;
  std::string failure_text_;
  int sndbuf_ = 0, rcvbuf_ = 0;
};

}  // namespace fm
