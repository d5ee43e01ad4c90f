// zmq: one ZMQ_PAIR socket per end (libzmq). The server binds, the client
// connects. Busy mode spins on zmq_msg_recv(ZMQ_DONTWAIT); event mode blocks
// in zmq_msg_recv with ZMQ_RCVTIMEO = one wait slice. Receives are zero-copy:
// the message stays in the library's zmq_msg_t until the next receive.
// libzmq moves bytes in its own I/O thread (and frees in a reaper thread),
// placed by --io-cpu through the context's ZMQ_THREAD_AFFINITY_CPU_ADD.
#pragma once
#include <zmq.h>

#include <cerrno>
#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/msg/messaging.hpp"
#include "transport/msg/msg_transport.hpp"

namespace fm {

class ZmqTransport : public msg::MsgTransport<ZmqTransport> {
 public:
  static constexpr const char* kName = "zmq";
  static constexpr int kNonBlock = ZMQ_DONTWAIT;
  // connect()'s own steps, between the base's (setup).
  static constexpr const char* kConnectSteps =
      "zmq_ctx_new and a PAIR socket (its I/O and reaper threads) and its monitor; server: bind, its endpoint over "
      "the control channel; client: zmq_connect; a one-byte ping-pong on the data connection (zmq connects in the "
      "background)";

  ZmqTransport(const MessagingOptions& m, const Use& use);
  ~ZmqTransport();

  void describe(JsonObj& o) const;

  // ---- data path ----
  // zmq_send copies (in place for up to 33 B, else into a heap block): the
  // contract lets the caller reuse `buf` as soon as post_send returns, which
  // rules out zmq_msg_init_data's zero-copy send (the I/O thread reads the
  // buffer later). A full queue (HWM) is EAGAIN: no room now.
  bool post_send(const void* buf, uint32_t len, uint32_t, uint64_t) {
    if (zmq_send(sock_, buf, len, ZMQ_DONTWAIT) >= 0) [[likely]] return true;
    if (errno != EAGAIN && errno != EINTR) fail("zmq_send", zmq_strerror(errno));
    return false;
  }

  // zmq_msg_recv frees the previous content of rx_ when it reuses it.
  void release(const RecvMsg&) {}

  void wait_send();

 private:
  friend msg::MsgTransport<ZmqTransport>;
  void open(uint64_t max_msg);
  void listen(const msg::Endpoint& e);
  void dial();
  // Any event of the socket monitor: only the other end's disconnect is subscribed.
  bool remote_gone() const;
  bool take(int flags, RecvMsg& m) {
    if (zmq_msg_recv(&rx_, sock_, flags) < 0) [[unlikely]] {
      if (errno != EAGAIN && errno != EINTR) fail("zmq_msg_recv", zmq_strerror(errno));
      return false;
    }
    m.data = static_cast<const std::byte*>(zmq_msg_data(&rx_));
    m.len = static_cast<uint32_t>(zmq_msg_size(&rx_));
    m.imm = 0;
    return true;
  }

  void* ctx_ = nullptr;
  void* sock_ = nullptr;
  void* monitor_ = nullptr;   // PAIR socket reading the data socket's monitor events
  zmq_msg_t rx_;
  std::string ipc_path_;      // server: the socket file to remove at the end
  int hwm_ = 0;
  int64_t max_msg_size_ = 0;
};

}  // namespace fm
