// The members the messaging-library transports (zmq, nng, nanomsg) share,
// as the base of each: Lib is the transport, which names itself (kName),
// its library's non-blocking receive flag (kNonBlock) and a receive,
// take(flags, m), that blocks for at most one wait slice without the flag.
#pragma once
#include <optional>
#include <string>

#include "fabmeter/params.hpp"
#include "fabmeter/transport.hpp"
#include "transport/msg/io_threads.hpp"
#include "transport/msg/messaging.hpp"

namespace fm::msg {

template <class Lib>
class MsgTransport {
 public:
  static Caps caps(const MessagingOptions& m) {
    return {.max_msg_size = kMaxMsg, .max_inline = 0, .reliable = true, .ordered = true,
            .supports_write = false, .send_completions = false, .same_host_only = same_host_only(Lib::kName, m.endpoint),
            .one_connection = one_connection(Lib::kName, m.endpoint)};
  }
  // The server names the endpoint (messaging.hpp's server_endpoint).
  static void server_claim(MessagingOptions& m, const ServerPlaces& at) { claim_endpoint(Lib::kName, m, at); }
  static double queued_bytes(const MessagingOptions&, uint64_t size) { return msg::queued_bytes(size); }

  // ---- data path ----
  bool poll_recv(RecvMsg& m) { return lib().take(Lib::kNonBlock, m); }
  bool wait_recv(RecvMsg& m) { return lib().take(0, m); }
  // Sends complete in the library: nothing to reap.
  int poll_send_comp(uint64_t*, int) { return 0; }

 protected:
  MsgTransport(const MessagingOptions& m, const Use& use)
      : role_(use.role), use_(use), endpoint_param_(m.endpoint), io_cpu_(m.io_cpu) {}

  Role role_;
  Use use_;
  std::string endpoint_param_;
  std::string io_cpu_;
  std::optional<IoThreads> io_;
  std::string url_;

 private:
  Lib& lib() { return static_cast<Lib&>(*this); }
};

}  // namespace fm::msg
