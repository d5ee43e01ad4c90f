// tcp: one TCP_NODELAY connection, messages framed by a 4-byte length.
// Busy mode spins on non-blocking recv; event mode blocks in recv (one system
// call per message, no epoll in between). Several threads may share one
// connection (reader()): each reads one whole message at a time under a lock
// (a byte stream has no message boundaries the kernel would keep), without
// reading ahead, and sends each whole message under another.
#pragma once
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/sock/sock.hpp"

namespace fm {

class TcpTransport {
 public:
  TcpTransport(const TcpOptions& t, const Use& use);
  ~TcpTransport();
  TcpTransport(const TcpTransport&) = delete;

  static Caps caps(const TcpOptions&) {
    return {.max_msg_size = 1ull << 30, .max_inline = 0, .reliable = true, .ordered = true,
            .supports_write = false, .send_completions = false, .same_host_only = false, .shared_rx = true};
  }
  void connect(Ctrl& ctrl, uint64_t max_msg);
  // The same connection (a duplicate descriptor), shared with this one's
  // other readers: a message at a time, each in a buffer of the reader's own.
  std::unique_ptr<TcpTransport> reader();
  void describe(JsonObj& o) const;
  // setup: what connect() does.
  const char* connect_covers() const {
    return "server: socket, bind, listen, its port over the control channel; client: socket, connect (the "
           "three-way handshake); server: accept; TCP_NODELAY, buffers read; a control-channel barrier (2 "
           "control-channel round trips)";
  }
  // setup: the client's steps of its last connect() (the server's show inside its port and barrier steps).
  std::span<const ConnectPhase> connect_phases() const { return steps_.phases(); }
  // Bytes queued in the socket's receive and send buffers (SIOCINQ, SIOCOUTQ: two system calls, slow path only).
  Pools pools() const { return sock::pools(fd_, rcvbuf_, sndbuf_); }
  const char* failure() const { return failure_; }

  // ---- data path ----
  bool post_send(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id) {
    if (share_) [[unlikely]] return send_shared(buf, len);
    if (pending_len_ && !flush()) return false;
    iovec iov[2] = {{&len, 4}, {const_cast<void*>(buf), len}};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    ssize_t k = ::sendmsg(fd_, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k == static_cast<ssize_t>(len) + 4) [[likely]] return true;
    if (k < 0) {
      if (errno != EAGAIN && errno != EINTR) fail_errno("send");
      return false;
    }
    keep_unsent(&len, static_cast<const std::byte*>(buf), len, static_cast<size_t>(k));
    return true;
  }

  bool poll_recv(RecvMsg& m) {
    if (share_) [[unlikely]] return recv_shared(m, MSG_DONTWAIT);
    if (pending_len_) flush();
    if (take(m)) return true;
    return fill(MSG_DONTWAIT) && take(m);
  }

  void release(const RecvMsg& m) {
    if (share_) [[unlikely]] return;  // a reader's buffer holds one message
    rx_begin_ += 4 + m.len;
    if (rx_begin_ == rx_end_) rx_begin_ = rx_end_ = 0;
  }

  int poll_send_comp(uint64_t*, int) {
    if (pending_len_) flush();
    return 0;
  }

  bool wait_recv(RecvMsg& m);
  void wait_send();
  bool tx_idle() const { return pending_len_ == 0; }

 private:
  // A whole framed message at rx_begin_?
  bool take(RecvMsg& m) {
    size_t have = rx_end_ - rx_begin_;
    if (have < 4) return false;
    uint32_t len;
    std::memcpy(&len, rx_.data() + rx_begin_, 4);
    if (have < 4 + static_cast<size_t>(len)) return false;
    m.data = rx_.data() + rx_begin_ + 4;
    m.len = len;
    m.imm = 0;
    return true;
  }
  bool fill(int flags);   // one recv into the buffer; false if nothing came
  bool flush();           // sends what a partial send left; true when all is out
  void keep_unsent(const uint32_t* hdr, const std::byte* payload, uint32_t len, size_t sent);
  void fail_errno(const char* what);
  void phase(const char* name) {  // the client's: its connect is setup's measure
    if (role_ == Role::client) steps_.step(name);
  }
  // A reader's data path: one whole message under the shared locks.
  bool recv_shared(RecvMsg& m, int flags);
  bool send_shared(const void* buf, uint32_t len);
  bool rest_of(const std::byte* p, size_t n, bool sending);  // blocks until n more bytes went in or out
  struct Share {
    std::mutex rx, tx;
  };
  struct ReaderOf {
    TcpTransport& owner;
  };
  explicit TcpTransport(ReaderOf r);

  Role role_;
  std::string cc_;  // --tcp-cc, "": the kernel's default
  int fd_ = -1;
  std::vector<std::byte> rx_;
  size_t rx_begin_ = 0, rx_end_ = 0;
  std::vector<std::byte> pending_;
  size_t pending_off_ = 0, pending_len_ = 0;
  const char* failure_ = nullptr;
  std::string failure_text_;
  int sndbuf_ = 0, rcvbuf_ = 0;
  uint64_t max_msg_ = 0;
  ConnectSteps<4> steps_;
  std::shared_ptr<Share> share_;  // set in readers only
};

}  // namespace fm
