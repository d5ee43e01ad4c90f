// The members the messaging-library transports (zmq, nng, nanomsg) share,
// as the base of each: Lib is the transport, which names itself (kName),
// its library's non-blocking receive flag (kNonBlock), its own steps of
// connect() in words (kConnectSteps), and provides
//
//   void open(uint64_t max_msg);        // the socket and its options; adopts the library's threads
//   void listen(const Endpoint& e);     // server: binds e, sets url_ to what the client dials
//   void dial();                        // client: connects to url_
//   bool take(int flags, RecvMsg& m);   // a receive; without kNonBlock it blocks one wait slice at most
//   bool remote_gone() const;           // the other end dropped the data connection
//
// Lib calls are resolved at compile time (CRTP): no virtual call on the data path.
#pragma once
#include <optional>
#include <string>

#include "fabmeter/ctrl.hpp"
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

  // Lib inherits it where it has nothing of its own to set up (public for the registry).
  MsgTransport(const MessagingOptions& m, const Use& use)
      : role_(use.role), use_(use), endpoint_param_(m.endpoint), io_cpu_(m.io_cpu) {}
  MsgTransport(const MsgTransport&) = delete;
  MsgTransport& operator=(const MsgTransport&) = delete;

  // Where each end's busy loop runs, the socket, the server's endpoint over
  // the control channel (the client dials it), a first message each way,
  // where each end's library threads run.
  void connect(Ctrl& ctrl, uint64_t max_msg) {
    const std::string name = Lib::kName;
    io_.emplace(name, io_cpu_, use_, ctrl);
    lib().open(max_msg);
    if (role_ == Role::server) {
      const Endpoint e = listen_endpoint(name, endpoint_param_, ctrl);
      lib().listen(e);
      share_ipc_socket(e);
      ctrl.exchange(url_, (name + " endpoint").c_str());
    } else {
      url_ = dial_url(name, ctrl.exchange("", (name + " endpoint").c_str()));
      lib().dial();
    }
    data_handshake(lib(), ctrl, role_, name);
    connected_ = true;
    io_->exchange_where(ctrl, (name + " connected").c_str());
  }

  // setup: what connect() does.
  const char* connect_covers() const {
    static const std::string covers = std::string("where each end's busy loop runs (a control-channel round trip); ") +
                                      Lib::kConnectSteps +
                                      "; where each end's I/O threads run (3 control-channel round trips)";
    return covers.c_str();
  }

  // Library errors, and the other end's going away as the library reports it.
  const char* failure() const {
    if (!failure_ && lib().remote_gone()) {
      failure_text_ = std::string(Lib::kName) + ": the other end dropped the data connection";
      failure_ = failure_text_.c_str();
    }
    return failure_;
  }

  // ---- data path ----
  bool poll_recv(RecvMsg& m) { return lib().take(Lib::kNonBlock, m); }
  bool wait_recv(RecvMsg& m) { return lib().take(0, m); }
  // Sends complete in the library: nothing to reap.
  int poll_send_comp(uint64_t*, int) { return 0; }

 protected:

  // A library call failed: `why` in the library's words. Off the data path's inlined code.
  [[gnu::cold, gnu::noinline]] void fail(const char* what, const char* why) {
    failure_text_ = std::string(Lib::kName) + ": " + what + ": " + why;
    failure_ = failure_text_.c_str();
  }

  Role role_;
  Use use_;
  std::string endpoint_param_;
  std::string io_cpu_;
  std::optional<IoThreads> io_;
  std::string url_;
  bool connected_ = false;  // the first message each way went through

 private:
  Lib& lib() { return static_cast<Lib&>(*this); }
  const Lib& lib() const { return static_cast<const Lib&>(*this); }

  mutable const char* failure_ = nullptr;
  mutable std::string failure_text_;
};

}  // namespace fm::msg
