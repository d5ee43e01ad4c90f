#include "transport/sock/sock.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <netinet/tcp.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "fabmeter/error.hpp"

namespace fm::sock {

int to_sockaddr(const std::string& host, uint16_t port, sockaddr_storage* ss) {
  std::memset(ss, 0, sizeof *ss);
  auto* v4 = reinterpret_cast<sockaddr_in*>(ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return sizeof(sockaddr_in);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return sizeof(sockaddr_in6);
  }
  runtime_error("cannot parse address '" + host + "'");
}

int bind_near(const Ctrl& ctrl, int type, uint16_t* port) {
  sockaddr_storage ss;
  int len = to_sockaddr(ctrl.local_addr(), 0, &ss);
  int fd = ::socket(ss.ss_family, type | SOCK_CLOEXEC, 0);
  if (fd < 0) sys_error("socket");
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) sys_error("bind data socket");
  socklen_t sl = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
  *port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(ss).sin_port
                                        : reinterpret_cast<sockaddr_in6&>(ss).sin6_port);
  return fd;
}

int remote_sockaddr(const Ctrl& ctrl, uint16_t port, sockaddr_storage* ss) {
  return to_sockaddr(ctrl.remote_addr(), port, ss);
}

void set_rcv_timeout_ms(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int set_buf(int fd, int opt, int force_opt, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
  return get_int_opt(fd, SOL_SOCKET, opt);
}

int get_int_opt(int fd, int level, int opt) {
  int v = 0;
  socklen_t len = sizeof v;
  getsockopt(fd, level, opt, &v, &len);
  return v;
}

void set_congestion(int fd, const std::string& name) {
  if (name.empty() || setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size()) == 0) return;
  const int err = errno;
  // This network namespace's view: what a socket here may be given.
  std::string offered;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_available_congestion_control"), offered);
  usage_error("--tcp-cc " + name + ": " + std::strerror(err) + "; this kernel offers: " +
              (offered.empty() ? "(unreadable)" : offered));
}

std::string congestion_of(int fd) {
  char name[16] = {};
  socklen_t len = sizeof name;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

Pools pools(int fd, int rcvbuf, int sndbuf) {
  int in = 0, out = 0;
  if (ioctl(fd, SIOCINQ, &in) != 0) in = 0;
  if (ioctl(fd, SIOCOUTQ, &out) != 0) out = 0;
  return {"bytes", static_cast<uint64_t>(in), static_cast<uint64_t>(rcvbuf), static_cast<uint64_t>(out),
          static_cast<uint64_t>(sndbuf)};
}

}  // namespace fm::sock
