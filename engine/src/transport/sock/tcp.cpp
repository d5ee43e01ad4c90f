#include "transport/sock/tcp.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"
#include "transport/sock/sock.hpp"

namespace fm {

TcpTransport::TcpTransport(const TcpOptions& t, const Use& use) : role_(use.role), cc_(t.cc) {}

TcpTransport::TcpTransport(ReaderOf r)
    : role_(r.owner.role_), cc_(r.owner.cc_), fd_(::fcntl(r.owner.fd_, F_DUPFD_CLOEXEC, 0)), rx_(r.owner.max_msg_ + 4),
      sndbuf_(r.owner.sndbuf_), rcvbuf_(r.owner.rcvbuf_), max_msg_(r.owner.max_msg_) {
  if (fd_ < 0) sys_error("tcp: duplicate the socket for a reader");
}

std::unique_ptr<TcpTransport> TcpTransport::reader() {
  // What the owner read ahead or left unsent would be lost to its readers.
  if (rx_end_ != rx_begin_ || pending_len_) runtime_error("tcp: a reader of a connection with bytes in its buffers");
  auto r = std::unique_ptr<TcpTransport>(new TcpTransport(ReaderOf{*this}));
  r->share_ = share_ ? share_ : (share_ = std::make_shared<Share>());
  return r;
}

TcpTransport::~TcpTransport() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpTransport::connect(Ctrl& ctrl, uint64_t max_msg) {
  steps_.start();
  if (role_ == Role::server) {
    uint16_t port;
    int lfd = sock::bind_near(ctrl, SOCK_STREAM, &port);
    if (::listen(lfd, 1) != 0) sys_error("listen on data socket");
    ctrl.exchange(std::to_string(port), "tcp data port");
    // In slices: a client that died or froze before connecting is noticed
    // on the control channel, not after the whole timeout.
    RemoteWatch watch(ctrl);
    const uint64_t deadline = Clock::mono_ns() + uint64_t(ctrl.timeout_ms()) * 1000000;
    for (pollfd pfd{lfd, POLLIN, 0}; ::poll(&pfd, 1, kWaitSliceMs) != 1;) {
      try {
        watch.check("the tcp data connection");
      } catch (const Error&) {
        ::close(lfd);
        throw;
      }
      if (Clock::mono_ns() > deadline) {
        ::close(lfd);
        runtime_error("tcp: the client did not open the data connection in time");
      }
    }
    fd_ = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(lfd);
    if (fd_ < 0) sys_error("accept data connection");
    sock::set_congestion(fd_, cc_);
  } else {
    uint16_t port = static_cast<uint16_t>(parse_remote_u64(ctrl.exchange("", "tcp data port"), "tcp data port", 65535));
    phase("port_exchange");
    sockaddr_storage ss;
    int len = sock::remote_sockaddr(ctrl, port, &ss);
    fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) sys_error("socket");
    sock::set_congestion(fd_, cc_);  // before the handshake: the connection starts under it
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) sys_error("tcp: connect data connection");
    phase("socket_connect");
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Blocking socket: event mode blocks in recv with a timeout slice; busy
  // mode passes MSG_DONTWAIT on each call.
  sock::set_rcv_timeout_ms(fd_, kWaitSliceMs);
  sndbuf_ = sock::get_int_opt(fd_, SOL_SOCKET, SO_SNDBUF);
  rcvbuf_ = sock::get_int_opt(fd_, SOL_SOCKET, SO_RCVBUF);
  max_msg_ = max_msg;
  rx_.resize(std::max<size_t>(2 * (max_msg + 4), 256 << 10));
  pending_.resize(max_msg + 4);
  phase("options_buffers");
  ctrl.barrier("tcp connected");
  phase("barrier");
}

void TcpTransport::describe(JsonObj& o) const {
  o.add("so_sndbuf", sndbuf_).add("so_rcvbuf", rcvbuf_).add("tcp_nodelay", true).add("framing_bytes", 4)
      .add("tcp_congestion", sock::congestion_of(fd_));
}

void TcpTransport::fail_errno(const char* what) {
  failure_text_ = std::string("tcp: ") + what + ": " + std::strerror(errno);
  failure_ = failure_text_.c_str();
}

bool TcpTransport::fill(int flags) {
  // Make room for at least the rest of the message at the head of the buffer.
  if (rx_begin_ > 0 && rx_end_ == rx_.size()) {
    std::memmove(rx_.data(), rx_.data() + rx_begin_, rx_end_ - rx_begin_);
    rx_end_ -= rx_begin_;
    rx_begin_ = 0;
  } else if (rx_begin_ > 0 && rx_end_ - rx_begin_ >= 4) {
    uint32_t len;
    std::memcpy(&len, rx_.data() + rx_begin_, 4);
    if (rx_begin_ + 4 + len > rx_.size()) {
      std::memmove(rx_.data(), rx_.data() + rx_begin_, rx_end_ - rx_begin_);
      rx_end_ -= rx_begin_;
      rx_begin_ = 0;
    }
  }
  ssize_t k = ::recv(fd_, rx_.data() + rx_end_, rx_.size() - rx_end_, flags);
  if (k > 0) {
    rx_end_ += static_cast<size_t>(k);
    return true;
  }
  if (k == 0) {
    failure_ = "tcp: the other end closed the data connection";
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    fail_errno("recv");
  }
  return false;
}

void TcpTransport::keep_unsent(const uint32_t* hdr, const std::byte* payload, uint32_t len, size_t sent) {
  // Copy what the kernel did not take, so the caller may reuse its buffer.
  size_t total = 4 + len;
  pending_len_ = total - sent;
  pending_off_ = 0;
  std::byte* dst = pending_.data();
  if (sent < 4) {
    std::memcpy(dst, reinterpret_cast<const std::byte*>(hdr) + sent, 4 - sent);
    std::memcpy(dst + 4 - sent, payload, len);
  } else {
    std::memcpy(dst, payload + (sent - 4), pending_len_);
  }
}

bool TcpTransport::flush() {
  while (pending_len_) {
    ssize_t k = ::send(fd_, pending_.data() + pending_off_, pending_len_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0) {
      if (errno != EAGAIN && errno != EINTR) fail_errno("send");
      return false;
    }
    pending_off_ += static_cast<size_t>(k);
    pending_len_ -= static_cast<size_t>(k);
  }
  return true;
}

// A busy reader that finds another one reading goes on (that one takes the
// message); an event-mode reader waits for the lock, then in recv.
bool TcpTransport::recv_shared(RecvMsg& m, int flags) {
  std::unique_lock lock(share_->rx, std::defer_lock);
  if (!(flags & MSG_DONTWAIT)) lock.lock();
  else if (!lock.try_lock()) return false;
  uint32_t len = 0;
  const ssize_t k = ::recv(fd_, &len, 4, MSG_PEEK | flags);
  if (k < 4) {  // no whole header yet
    if (k == 0) failure_ = "tcp: the other end closed the data connection";
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail_errno("recv");
    return false;
  }
  // The other end's length is bounded before anything is read into the buffer.
  if (len > max_msg_) {
    failure_text_ = "tcp: a message of " + std::to_string(len) + " B, above the plan's largest (" +
                    std::to_string(max_msg_) + " B)";
    failure_ = failure_text_.c_str();
    return false;
  }
  if (!rest_of(rx_.data(), 4 + static_cast<size_t>(len), false)) return false;
  m.data = rx_.data() + 4;
  m.len = len;
  m.imm = 0;
  return true;
}

bool TcpTransport::send_shared(const void* buf, uint32_t len) {
  std::lock_guard lock(share_->tx);
  iovec iov[2] = {{&len, 4}, {const_cast<void*>(buf), len}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  const ssize_t k = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (k == static_cast<ssize_t>(len) + 4) [[likely]] return true;
  if (k < 0) {
    if (errno != EAGAIN && errno != EINTR) fail_errno("send");
    return false;
  }
  // Part of the message went out: the rest must follow before any other
  // reader's message, so it goes now, under the lock.
  const size_t sent = static_cast<size_t>(k);
  if (sent < 4 && !rest_of(reinterpret_cast<const std::byte*>(&len) + sent, 4 - sent, true)) return true;
  const size_t body = sent < 4 ? 0 : sent - 4;
  rest_of(static_cast<const std::byte*>(buf) + body, len - body, true);
  return true;  // posted; a failure shows in failure()
}

// The socket's timeouts (kWaitSliceMs) slice the wait; a remote end silent
// mid-message for this many slices has broken the connection.
constexpr int kRestSlices = 100;

bool TcpTransport::rest_of(const std::byte* p, size_t n, bool sending) {
  for (int idle = 0; n;) {
    const ssize_t k = sending ? ::send(fd_, p, n, MSG_NOSIGNAL) : ::recv(fd_, const_cast<std::byte*>(p), n, MSG_WAITALL);
    if (k > 0) {
      p += k, n -= static_cast<size_t>(k), idle = 0;
      continue;
    }
    if (k == 0 && !sending) {
      failure_ = "tcp: the other end closed the data connection";
      return false;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      fail_errno(sending ? "send" : "recv");
      return false;
    }
    if (++idle == kRestSlices) {
      failure_ = sending ? "tcp: the other end took no byte of a message for 5 s" : "tcp: a message stopped arriving for 5 s";
      return false;
    }
  }
  return true;
}

bool TcpTransport::wait_recv(RecvMsg& m) {
  if (share_) [[unlikely]] return recv_shared(m, 0);
  if (pending_len_) {
    // Our own send is still going out: wait for either direction.
    wait_send();
    return poll_recv(m);
  }
  if (take(m)) return true;
  return fill(0) && take(m);
}

void TcpTransport::wait_send() {
  pollfd pfd{fd_, POLLIN | POLLOUT, 0};
  ::poll(&pfd, 1, kWaitSliceMs);
  if (pending_len_) flush();
}

}  // namespace fm
