#include "transport/msg/nng.hpp"

#include <nng/protocol/pair1/pair.h>
#include <poll.h>

#include "fabmeter/error.hpp"

namespace fm {

namespace {

void check(int rv, const std::string& what) {
  if (rv != 0) runtime_error("nng: " + what + ": " + nng_strerror(rv));
}

std::vector<pid_t> g_threads;  // nng's threads seen so far (msg::remember_threads)

}  // namespace

NngTransport::~NngTransport() {
  if (nng_socket_id(sock_) > 0) nng_close(sock_);  // also closes its listener or dialer
}

void NngTransport::on_pipe_removed(nng_pipe, nng_pipe_ev, void* self) {
  static_cast<NngTransport*>(self)->pipe_removed_.store(true, std::memory_order_relaxed);
}

void NngTransport::open(uint64_t max_msg) {
  const std::vector<pid_t> before = msg::own_threads();
  check(nng_pair1_open(&sock_), "nng_pair1_open");
  io_->adopt(msg::remember_threads(g_threads, msg::started_since(before, msg::own_threads())), true);
  queue_depth_ = msg::queue_depth(max_msg);
  recv_max_ = max_msg + msg::kHeaderRoom;  // the default (1 MiB) would drop larger messages
  check(nng_socket_set_size(sock_, NNG_OPT_RECVMAXSZ, recv_max_), "set NNG_OPT_RECVMAXSZ");
  check(nng_socket_set_int(sock_, NNG_OPT_SENDBUF, queue_depth_), "set NNG_OPT_SENDBUF");
  check(nng_socket_set_int(sock_, NNG_OPT_RECVBUF, queue_depth_), "set NNG_OPT_RECVBUF");
  check(nng_socket_set_ms(sock_, NNG_OPT_RECVTIMEO, kWaitSliceMs), "set NNG_OPT_RECVTIMEO");
  check(nng_socket_get_int(sock_, NNG_OPT_SENDFD, &send_fd_), "get NNG_OPT_SENDFD");
  // A pair socket says nothing when the other end goes away; the pipe callback does.
  check(nng_pipe_notify(sock_, NNG_PIPE_EV_REM_POST, on_pipe_removed, this), "nng_pipe_notify");
}

void NngTransport::listen(const msg::Endpoint& e) {
  nng_listener l;
  std::string url = e.url();  // port 0 = a free port, read back below
  check(nng_listener_create(&l, sock_, url.c_str()), "listen on " + url);
  check(nng_listener_start(l, 0), "listen on " + url);
  if (e.scheme == "tcp") {
    int port = 0;
    check(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), "get NNG_OPT_TCP_BOUND_PORT");
    url_ = e.url_with_port(std::to_string(port));
  } else {
    url_ = url;
  }
}

// Non-blocking: the dialer keeps retrying in the background; the first
// message on the connection bounds the wait.
void NngTransport::dial() { check(nng_dial(sock_, url_.c_str(), nullptr, NNG_FLAG_NONBLOCK), "dial " + url_); }

void NngTransport::wait_send() {
  pollfd pfd{send_fd_, POLLIN, 0};
  ::poll(&pfd, 1, kWaitSliceMs);
}

void NngTransport::describe(JsonObj& o) const {
  bool nodelay = false;
  nng_socket_get_bool(sock_, NNG_OPT_TCP_NODELAY, &nodelay);
  o.add("library", "nng").add("library_version", nng_version())
      .add("protocol", "pair1").add("endpoint", url_)
      .add("send_buffer_msgs", queue_depth_).add("recv_buffer_msgs", queue_depth_)
      .add("recv_size_max", static_cast<uint64_t>(recv_max_));
  if (url_.rfind("tcp://", 0) == 0) o.add("tcp_nodelay", nodelay);
  o.add("send", "nng_send (copy)").add("recv", "nng_recvmsg (zero-copy)");
  if (io_) io_->describe(o);
}

}  // namespace fm
