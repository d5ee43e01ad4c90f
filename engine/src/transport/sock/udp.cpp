#include "transport/sock/udp.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"
#include "transport/sock/sock.hpp"

namespace fm {

// Bursts of small datagrams overflow the default 208 KiB receive buffer long
// before the receiver is slow; ask for more and record what was granted.
constexpr int kSockBufBytes = 8 << 20;

UdpTransport::UdpTransport(const Use& use) : loss_timeout_ms_(use.loss_timeout_ms) {}

UdpTransport::UdpTransport(ReaderOf r)
    : loss_timeout_ms_(r.owner.loss_timeout_ms_), fd_(::fcntl(r.owner.fd_, F_DUPFD_CLOEXEC, 0)),
      rx_(r.owner.rx_.size()), sndbuf_(r.owner.sndbuf_), rcvbuf_(r.owner.rcvbuf_) {
  if (fd_ < 0) sys_error("udp: duplicate the socket for a reader");
}

std::unique_ptr<UdpTransport> UdpTransport::reader() const {
  return std::unique_ptr<UdpTransport>(new UdpTransport(ReaderOf{*this}));
}

UdpTransport::~UdpTransport() {
  if (fd_ >= 0) ::close(fd_);
}

void UdpTransport::connect(Ctrl& ctrl, uint64_t max_msg) {
  uint16_t port;
  fd_ = sock::bind_near(ctrl, SOCK_DGRAM, &port);
  uint16_t remote_port = static_cast<uint16_t>(parse_remote_u64(ctrl.exchange(std::to_string(port), "udp data port"), "udp data port", 65535));
  sockaddr_storage ss;
  int len = sock::remote_sockaddr(ctrl, remote_port, &ss);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) sys_error("udp: connect");
  sndbuf_ = sock::set_buf(fd_, SO_SNDBUF, SO_SNDBUFFORCE, kSockBufBytes);
  rcvbuf_ = sock::set_buf(fd_, SO_RCVBUF, SO_RCVBUFFORCE, kSockBufBytes);
  sock::set_rcv_timeout_ms(fd_, static_cast<int>(std::min<uint32_t>(kWaitSliceMs, loss_timeout_ms_)));
  rx_.resize(kMaxDatagram + 1);
  ctrl.barrier("udp connected");
}

void UdpTransport::describe(JsonObj& o) const {
  o.add("so_sndbuf", sndbuf_).add("so_rcvbuf", rcvbuf_).add("max_datagram", kMaxDatagram);
}

void UdpTransport::fail_errno(const char* what) {
  failure_text_ = std::string("udp: ") + what + ": " + std::strerror(errno) +
                  (errno == ECONNREFUSED ? " (the other end's port is closed)" : "");
  failure_ = failure_text_.c_str();
}

void UdpTransport::wait_send() {
  pollfd pfd{fd_, POLLIN | POLLOUT, 0};
  ::poll(&pfd, 1, kWaitSliceMs);
}

}  // namespace fm
