#include "fabmeter/stamped_udp.hpp"

#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"

namespace fm {

namespace {
int64_t read_realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

socklen_t addr_len(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

void set_port(sockaddr_storage& a, uint16_t port) {
  if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(port);
  else reinterpret_cast<sockaddr_in&>(a).sin_port = htons(port);
}

// The software stamp (ts[0]) of an SCM_TIMESTAMPING message, or 0.
int64_t software_stamp(msghdr& m) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING) {
      scm_timestamping ts;
      std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
      return static_cast<int64_t>(ts.ts[0].tv_sec) * 1000000000 + ts.ts[0].tv_nsec;
    }
  return 0;
}
}  // namespace

ClockPair ClockPair::read(const Clock& clk) {
  // The narrowest of three brackets: a read interrupted in between is dropped.
  ClockPair best{};
  double width = 0;
  for (int i = 0; i < 3; ++i) {
    const uint64_t before = clk.ticks();
    const int64_t rt = read_realtime_ns();
    const uint64_t after = clk.ticks();
    const double w = clk.to_ns(static_cast<double>(after - before));
    if (i == 0 || w < width) {
      width = w;
      best = {(clk.ticks_to_mono_ns(before) + clk.ticks_to_mono_ns(after)) / 2, w, rt, clk.skew_rate()};
    }
  }
  return best;
}

StampedUdp::StampedUdp(const sockaddr_storage& local) {
  fd_ = ::socket(local.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) sys_error("clock probe socket");
  // OPT_ID numbers each datagram's TX stamp; OPT_TSONLY returns the stamp
  // without the datagram (nothing of ours to copy back).
  const int flags = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE |
                    SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY;
  sockaddr_storage me = local;
  set_port(me, 0);
  if (::setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) != 0 ||
      ::bind(fd_, reinterpret_cast<const sockaddr*>(&me), addr_len(me)) != 0) {
    const int err = errno;
    ::close(fd_);
    errno = err;
    sys_error("clock probe socket (SO_TIMESTAMPING, bind)");
  }
  socklen_t len = sizeof me;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&me), &len);
  port_ = ntohs(me.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(me).sin6_port
                                         : reinterpret_cast<sockaddr_in&>(me).sin_port);
  step_fd_ = ::timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
  if (step_fd_ < 0 || !arm_step_watch()) {
    const int err = errno;
    ::close(fd_);
    if (step_fd_ >= 0) ::close(step_fd_);
    errno = err;
    sys_error("clock probe socket: a timerfd to see CLOCK_REALTIME steps");
  }
}

StampedUdp::~StampedUdp() {
  ::close(fd_);
  ::close(step_fd_);
}

// Armed to expire only in a century: all it does is get cancelled.
bool StampedUdp::arm_step_watch() {
  itimerspec far{};
  far.it_value.tv_sec = ::time(nullptr) + 100LL * 365 * 86400;
  return ::timerfd_settime(step_fd_, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &far, nullptr) == 0;
}

bool StampedUdp::clock_stepped() {
  uint64_t expirations;
  if (::read(step_fd_, &expirations, sizeof expirations) >= 0 || errno != ECANCELED) return false;
  arm_step_watch();  // failing, the watch stays cancelled: every later burst counts as stepped
  return true;
}

void StampedUdp::connect(const sockaddr_storage& remote, uint16_t port) {
  sockaddr_storage to = remote;
  set_port(to, port);
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&to), addr_len(to)) != 0) sys_error("clock probe socket: connect");
}

bool StampedUdp::send(const void* buf, size_t len) {
  if (::send(fd_, buf, len, MSG_DONTWAIT) != static_cast<ssize_t>(len)) return false;
  ++sent_;
  return true;
}

std::optional<StampedUdp::Datagram> StampedUdp::poll_recv(void* buf, size_t cap) {
  alignas(cmsghdr) char control[256];
  iovec iov{buf, cap};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  // A refused earlier datagram (ICMP port unreachable) shows up here as an
  // error: nothing to read.
  const ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT);
  if (n < 0) return std::nullopt;
  return Datagram{static_cast<size_t>(n), (m.msg_flags & MSG_TRUNC) != 0, software_stamp(m)};
}

std::optional<StampedUdp::TxStamp> StampedUdp::poll_tx_stamp() {
  for (;;) {
    alignas(cmsghdr) char control[256];
    msghdr m{};
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    if (::recvmsg(fd_, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return std::nullopt;
    const int64_t stamp = software_stamp(m);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (!((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
            (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)))
        continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      // Only the stamp taken when the datagram left for the device.
      if (ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING && ee.ee_info == SCM_TSTAMP_SND && stamp)
        return TxStamp{ee.ee_data, stamp};
    }
    // Anything else on the error queue (an ICMP error): skip it.
  }
}

void StampedUdp::wait(int ctrl_fd, int ms) const {
  // POLLERR: a TX stamp waits on the error queue.
  pollfd fds[2] = {{fd_, POLLIN, 0}, {ctrl_fd, POLLIN, 0}};
  ::poll(fds, ctrl_fd >= 0 ? 2 : 1, ms);
}

}  // namespace fm
