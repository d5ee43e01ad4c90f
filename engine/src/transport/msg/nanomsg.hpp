// nanomsg: one NN_PAIR socket per end. The server binds, the client
// connects. Busy mode spins on nn_recv(NN_DONTWAIT); event mode blocks in
// nn_recv with NN_RCVTIMEO = one wait slice. Receives are zero-copy (NN_MSG:
// the library's own buffer, freed with nn_freemsg in release()). nanomsg
// moves bytes in its own worker thread (one per process, started by the
// first socket); --io-cpu places it by its affinity, nanomsg having no option for it.
#pragma once
#include <nanomsg/nn.h>

#include <cerrno>
#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/msg/messaging.hpp"
#include "transport/msg/msg_transport.hpp"

namespace fm {

class NanomsgTransport : public msg::MsgTransport<NanomsgTransport> {
 public:
  static constexpr const char* kName = "nanomsg";
  static constexpr int kNonBlock = NN_DONTWAIT;
  // connect()'s own steps, between the base's (setup).
  static constexpr const char* kConnectSteps =
      "an NN_PAIR socket (the first of the process starts nanomsg's worker thread); server: nn_bind, its endpoint "
      "over the control channel; client: nn_connect; a one-byte ping-pong on the data connection (nanomsg connects "
      "in the background)";

  using MsgTransport::MsgTransport;
  ~NanomsgTransport();

  void describe(JsonObj& o) const;

  // ---- data path ----
  // nn_send copies into a chunk of its own; the zero-copy alternative
  // (nn_allocmsg + NN_MSG) hands the chunk to the library, so it needs a fresh
  // chunk and the same copy per send. NN_PAIR holds one outgoing message
  // beyond the kernel's socket buffer: EAGAIN until it is written.
  bool post_send(const void* buf, uint32_t len, uint32_t, uint64_t) {
    if (nn_send(sock_, buf, len, NN_DONTWAIT) >= 0) [[likely]] return true;
    if (errno != EAGAIN && errno != EINTR) fail("nn_send", nn_strerror(nn_errno()));
    return false;
  }

  void release(const RecvMsg& m) { nn_freemsg(const_cast<std::byte*>(m.data)); }

  void wait_send();

 private:
  friend msg::MsgTransport<NanomsgTransport>;
  void open(uint64_t max_msg);
  void listen(const msg::Endpoint& e);
  void dial();
  // nanomsg's connection count dropped to zero once the connection was up.
  bool remote_gone() const;
  bool take(int flags, RecvMsg& m) {
    void* body;
    int n = nn_recv(sock_, &body, NN_MSG, flags);
    if (n < 0) [[unlikely]] {
      if (errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR) fail("nn_recv", nn_strerror(nn_errno()));
      return false;
    }
    m.data = static_cast<const std::byte*>(body);
    m.len = static_cast<uint32_t>(n);
    m.imm = 0;
    return true;
  }

  int sock_ = -1;
  int rcvmaxsize_ = 0;
};

}  // namespace fm
