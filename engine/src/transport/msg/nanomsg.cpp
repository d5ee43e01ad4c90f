#include "transport/msg/nanomsg.hpp"

#include <arpa/inet.h>
#include <nanomsg/pair.h>
#include <nanomsg/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "fabmeter/error.hpp"

#ifndef FM_NANOMSG_VERSION
#define FM_NANOMSG_VERSION "unknown"
#endif

namespace fm {

namespace {

void set_int(int sock, int level, int opt, int value, const char* name) {
  if (nn_setsockopt(sock, level, opt, &value, sizeof value) != 0)
    runtime_error(std::string("nanomsg: cannot set ") + name + ": " + nn_strerror(nn_errno()));
}

int get_int(int sock, int level, int opt) {
  int value = 0;
  size_t len = sizeof value;
  nn_getsockopt(sock, level, opt, &value, &len);
  return value;
}

// nanomsg cannot say which port a port-0 bind got, so the kernel picks a free
// one for a throw-away socket first (the bind is retried if it is taken meanwhile).
uint16_t free_port(const std::string& host) {
  sockaddr_storage ss{};
  socklen_t len;
  std::string bare = host.front() == '[' ? host.substr(1, host.size() - 2) : host;
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET6, bare.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof *v6;
  } else {
    // An IPv4 address, else * or an interface name: a port free on every address is free there too.
    v4->sin_family = AF_INET;
    if (inet_pton(AF_INET, bare.c_str(), &v4->sin_addr) != 1) v4->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof *v4;
  }
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) sys_error("socket");
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    sys_error("nanomsg: cannot find a free port on " + host);
  }
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  ::close(fd);
  return ntohs(ss.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port);
}

std::vector<pid_t> g_threads;  // nanomsg's threads seen so far (msg::remember_threads)

}  // namespace

NanomsgTransport::~NanomsgTransport() {
  if (sock_ >= 0) nn_close(sock_);
}

void NanomsgTransport::open(uint64_t max_msg) {
  const std::vector<pid_t> before = msg::own_threads();
  sock_ = nn_socket(AF_SP, NN_PAIR);
  if (sock_ < 0) runtime_error(std::string("nanomsg: nn_socket: ") + nn_strerror(nn_errno()));
  io_->adopt(msg::remember_threads(g_threads, msg::started_since(before, msg::own_threads())), true);
  rcvmaxsize_ = static_cast<int>(max_msg + msg::kHeaderRoom);  // the default (1 MiB) would drop larger messages
  set_int(sock_, NN_SOL_SOCKET, NN_RCVMAXSIZE, rcvmaxsize_, "NN_RCVMAXSIZE");
  set_int(sock_, NN_SOL_SOCKET, NN_RCVTIMEO, kWaitSliceMs, "NN_RCVTIMEO");
  // nanomsg leaves Nagle on; zmq, nng and fabmeter's tcp turn it off.
  set_int(sock_, NN_TCP, NN_TCP_NODELAY, 1, "NN_TCP_NODELAY");
}

void NanomsgTransport::listen(const msg::Endpoint& e) {
  if (e.scheme == "tcp" && e.host.front() == '[') set_int(sock_, NN_SOL_SOCKET, NN_IPV4ONLY, 0, "NN_IPV4ONLY");
  for (int attempt = 1;; ++attempt) {
    std::string url = e.free_port() ? e.url_with_port(std::to_string(free_port(e.host))) : e.url();
    if (nn_bind(sock_, url.c_str()) >= 0) {
      url_ = url;
      return;
    }
    int err = nn_errno();
    if (!(e.free_port() && err == EADDRINUSE && attempt < 8))
      runtime_error("nanomsg: cannot bind " + url + ": " + nn_strerror(err));
  }
}

void NanomsgTransport::dial() {
  if (url_.rfind("tcp://[", 0) == 0) set_int(sock_, NN_SOL_SOCKET, NN_IPV4ONLY, 0, "NN_IPV4ONLY");
  if (nn_connect(sock_, url_.c_str()) < 0)
    runtime_error("nanomsg: cannot connect to " + url_ + ": " + nn_strerror(nn_errno()));
}

bool NanomsgTransport::remote_gone() const {
  return connected_ && nn_get_statistic(sock_, NN_STAT_CURRENT_CONNECTIONS) == 0;
}

void NanomsgTransport::wait_send() {
  nn_pollfd pfd{sock_, NN_POLLOUT, 0};
  nn_poll(&pfd, 1, kWaitSliceMs);
}

void NanomsgTransport::describe(JsonObj& o) const {
  o.add("library", "nanomsg").add("library_version", FM_NANOMSG_VERSION)
      .add("abi_version", std::to_string(NN_VERSION_CURRENT) + "." + std::to_string(NN_VERSION_REVISION) + "." +
                              std::to_string(NN_VERSION_AGE))
      .add("socket", "NN_PAIR").add("endpoint", url_)
      .add("sndbuf_bytes", get_int(sock_, NN_SOL_SOCKET, NN_SNDBUF))
      .add("rcvbuf_bytes", get_int(sock_, NN_SOL_SOCKET, NN_RCVBUF))
      .add("rcvmaxsize", rcvmaxsize_);
  if (url_.rfind("tcp://", 0) == 0) o.add("tcp_nodelay", get_int(sock_, NN_TCP, NN_TCP_NODELAY) != 0);
  o.add("send", "nn_send (copy)").add("recv", "nn_recv NN_MSG (zero-copy)");
  if (io_) io_->describe(o);
}

}  // namespace fm
