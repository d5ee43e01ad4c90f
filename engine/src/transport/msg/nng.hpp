// nng: one pair1 socket per end (nng, the successor of nanomsg). The server
// listens, the client dials. Busy mode spins on nng_recvmsg(NNG_FLAG_NONBLOCK);
// event mode blocks in nng_recvmsg with NNG_OPT_RECVTIMEO = one wait slice.
// Receives are zero-copy: the nng_msg is handed over as is and freed in
// release(). nng moves bytes in threads of its own (a task pool, a poller,
// resolvers: one set per process, started by the first socket); --io-cpu
// places them by their affinity, nng having no option for it.
#pragma once
#include <nng/nng.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/msg/messaging.hpp"
#include "transport/msg/msg_transport.hpp"

namespace fm {

class NngTransport : public msg::MsgTransport<NngTransport> {
 public:
  static constexpr const char* kName = "nng";
  static constexpr int kNonBlock = NNG_FLAG_NONBLOCK;
  // connect()'s own steps, between the base's (setup).
  static constexpr const char* kConnectSteps =
      "a pair1 socket (the first of the process starts nng's threads); server: listener started, its endpoint over "
      "the control channel; client: nng_dial (non-blocking); a one-byte ping-pong on the data connection";

  using MsgTransport::MsgTransport;
  ~NngTransport();

  void describe(JsonObj& o) const;

  // ---- data path ----
  // nng_send copies into a new nng_msg; the zero-copy alternative
  // (nng_sendmsg) also needs a fresh message per send, since a sent message
  // belongs to the library, so the copy costs nothing extra. A full send
  // buffer is NNG_EAGAIN: no room now.
  bool post_send(const void* buf, uint32_t len, uint32_t, uint64_t) {
    int rv = nng_send(sock_, const_cast<void*>(buf), len, NNG_FLAG_NONBLOCK);
    if (rv == 0) [[likely]] return true;
    if (rv != NNG_EAGAIN) fail("nng_send", nng_strerror(rv));
    return false;
  }

  void release(const RecvMsg& m) { nng_msg_free(reinterpret_cast<nng_msg*>(m.slot)); }

  void wait_send();

 private:
  friend msg::MsgTransport<NngTransport>;
  void open(uint64_t max_msg);
  void listen(const msg::Endpoint& e);
  void dial();
  bool remote_gone() const { return pipe_removed_.load(std::memory_order_relaxed); }
  bool take(int flags, RecvMsg& m) {
    nng_msg* msg;
    if (int rv = nng_recvmsg(sock_, &msg, flags); rv != 0) [[unlikely]] {
      if (rv != NNG_EAGAIN && rv != NNG_ETIMEDOUT) fail("nng_recvmsg", nng_strerror(rv));
      return false;
    }
    m.data = static_cast<const std::byte*>(nng_msg_body(msg));
    m.len = static_cast<uint32_t>(nng_msg_len(msg));
    m.imm = 0;
    m.slot = reinterpret_cast<uintptr_t>(msg);
    return true;
  }
  static void on_pipe_removed(nng_pipe, nng_pipe_ev, void* self);

  nng_socket sock_ = NNG_SOCKET_INITIALIZER;
  int send_fd_ = -1;          // readable when a send would be accepted (NNG_OPT_SENDFD)
  int queue_depth_ = 0;
  size_t recv_max_ = 0;
  std::atomic<bool> pipe_removed_{false};  // set from nng's thread when the connection's pipe goes away
};

}  // namespace fm
