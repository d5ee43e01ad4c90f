#include "transport/msg/zmq.hpp"

#include <unistd.h>

#include <cstring>

#include "fabmeter/error.hpp"

namespace fm {

namespace {

constexpr const char* kMonitorUrl = "inproc://fabmeter-zmq-monitor";  // one per context, and we own the context

void set_int(void* sock, int opt, int value, const char* name) {
  if (zmq_setsockopt(sock, opt, &value, sizeof value) != 0)
    runtime_error(std::string("zmq: cannot set ") + name + ": " + zmq_strerror(errno));
}

}  // namespace

ZmqTransport::ZmqTransport(const MessagingOptions& m, const Use& use)
    : MsgTransport(m, use) {
  zmq_msg_init(&rx_);
}

ZmqTransport::~ZmqTransport() {
  zmq_msg_close(&rx_);
  // Stop the monitor before closing its reader: an event sent to a monitor
  // without a reader blocks libzmq's I/O thread, holding a lock we need.
  if (sock_) zmq_socket_monitor(sock_, nullptr, 0);
  if (monitor_) zmq_close(monitor_);
  if (sock_) zmq_close(sock_);
  if (ctx_) zmq_ctx_term(ctx_);  // LINGER 0: returns at once
  if (!ipc_path_.empty()) ::unlink(ipc_path_.c_str());  // libzmq leaves the socket file of ipc:// behind
}

void ZmqTransport::open(uint64_t max_msg) {
  ctx_ = zmq_ctx_new();
  if (!ctx_) sys_error("zmq_ctx_new");
  if (io_->cpu() >= 0 && zmq_ctx_set(ctx_, ZMQ_THREAD_AFFINITY_CPU_ADD, io_->cpu()) != 0)
    runtime_error(std::string("zmq: cannot set ZMQ_THREAD_AFFINITY_CPU_ADD: ") + zmq_strerror(errno));
  const std::vector<pid_t> before = msg::own_threads();
  sock_ = zmq_socket(ctx_, ZMQ_PAIR);  // the context's first socket starts its threads
  if (!sock_) runtime_error(std::string("zmq: zmq_socket: ") + zmq_strerror(errno));
  io_->adopt(msg::started_since(before, msg::own_threads()), false);
  hwm_ = msg::queue_depth(max_msg);
  max_msg_size_ = static_cast<int64_t>(max_msg + msg::kHeaderRoom);
  set_int(sock_, ZMQ_SNDHWM, hwm_, "ZMQ_SNDHWM");
  set_int(sock_, ZMQ_RCVHWM, hwm_, "ZMQ_RCVHWM");
  set_int(sock_, ZMQ_LINGER, 0, "ZMQ_LINGER");
  set_int(sock_, ZMQ_RCVTIMEO, kWaitSliceMs, "ZMQ_RCVTIMEO");
  if (zmq_setsockopt(sock_, ZMQ_MAXMSGSIZE, &max_msg_size_, sizeof max_msg_size_) != 0)
    runtime_error(std::string("zmq: cannot set ZMQ_MAXMSGSIZE: ") + zmq_strerror(errno));

  // PAIR sockets say nothing when the other end goes away; the monitor does.
  if (zmq_socket_monitor(sock_, kMonitorUrl, ZMQ_EVENT_DISCONNECTED) != 0)
    runtime_error(std::string("zmq: zmq_socket_monitor: ") + zmq_strerror(errno));
  monitor_ = zmq_socket(ctx_, ZMQ_PAIR);
  if (!monitor_ || zmq_connect(monitor_, kMonitorUrl) != 0)
    runtime_error(std::string("zmq: cannot read the socket monitor: ") + zmq_strerror(errno));
  set_int(monitor_, ZMQ_LINGER, 0, "ZMQ_LINGER");
}

void ZmqTransport::listen(const msg::Endpoint& e) {
  if (e.scheme == "tcp" && e.host.front() == '[') set_int(sock_, ZMQ_IPV6, 1, "ZMQ_IPV6");
  std::string url = e.free_port() ? e.url_with_port("*") : e.url();  // zmq's spelling of "a free port"
  if (zmq_bind(sock_, url.c_str()) != 0) runtime_error("zmq: cannot bind " + url + ": " + zmq_strerror(errno));
  char bound[512];
  size_t len = sizeof bound;
  if (zmq_getsockopt(sock_, ZMQ_LAST_ENDPOINT, bound, &len) != 0)
    runtime_error(std::string("zmq: ZMQ_LAST_ENDPOINT: ") + zmq_strerror(errno));
  url_ = bound;
  if (e.scheme == "ipc") ipc_path_ = e.path;
}

void ZmqTransport::dial() {
  if (url_.rfind("tcp://[", 0) == 0) set_int(sock_, ZMQ_IPV6, 1, "ZMQ_IPV6");
  if (zmq_connect(sock_, url_.c_str()) != 0) runtime_error("zmq: cannot connect to " + url_ + ": " + zmq_strerror(errno));
}

bool ZmqTransport::remote_gone() const {
  if (!monitor_) return false;
  zmq_msg_t ev;
  zmq_msg_init(&ev);
  const bool gone = zmq_msg_recv(&ev, monitor_, ZMQ_DONTWAIT) >= 0;
  zmq_msg_close(&ev);
  return gone;
}

void ZmqTransport::wait_send() {
  zmq_pollitem_t item{sock_, 0, ZMQ_POLLOUT, 0};
  zmq_poll(&item, 1, kWaitSliceMs);
}

void ZmqTransport::describe(JsonObj& o) const {
  int major, minor, patch;
  zmq_version(&major, &minor, &patch);
  o.add("library", "libzmq")
      .add("library_version", std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch))
      .add("socket", "ZMQ_PAIR").add("endpoint", url_)
      .add("sndhwm", hwm_).add("rcvhwm", hwm_).add("maxmsgsize", max_msg_size_)
      .add("io_threads", zmq_ctx_get(ctx_, ZMQ_IO_THREADS))
      .add("send", "zmq_send (copy)").add("recv", "zmq_msg_recv (zero-copy)");
  if (io_) io_->describe(o);
}

}  // namespace fm
