// What the messaging-library transports (zmq, nng, nanomsg) share: the
// --endpoint syntax, where the server listens by default, how the client
// reaches a server that listens on every address, and a first exchange on
// the data socket so that a run starts on a working connection.
#pragma once
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <string_view>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/transport.hpp"

namespace fm::msg {

// Queue depth in messages (zmq HWM, nng send/receive buffers): the libraries'
// usual 1000, fewer for large messages so that a bw sender never queues more
// than kQueueBytes per direction in the library.
constexpr uint64_t kQueueBytes = 64ull << 20;
constexpr int queue_depth(uint64_t max_msg) {
  uint64_t n = kQueueBytes / (max_msg ? max_msg : 1);
  return n < 2 ? 2 : n > 1000 ? 1000 : static_cast<int>(n);
}
// Receive size limits are set to the largest message of the run plus room for
// the protocol's own header (nng pair1 counts its 4-byte header).
constexpr uint64_t kHeaderRoom = 64;
// The three libraries take any size; this is what fabmeter offers through them.
constexpr uint64_t kMaxMsg = 64ull << 20;

// A parsed --endpoint: tcp://HOST:PORT, or ipc:// (the server names the path).
struct Endpoint {
  std::string scheme;  // "tcp" or "ipc"
  std::string host;    // tcp: as written (IPv6 in brackets); *, 0.0.0.0 or [::]: the server's control address
  std::string port;    // tcp: decimal; "0" = a free port chosen when the server binds
  std::string path;    // ipc: the server's own socket file; "" as the client writes it

  bool free_port() const { return port == "0"; }
  std::string url() const { return scheme == "ipc" ? "ipc://" + path : url_with_port(port); }
  std::string url_with_port(std::string_view p) const { return "tcp://" + host + ":" + std::string(p); }
};

inline bool every_address(std::string_view host) { return host == "*" || host == "0.0.0.0" || host == "[::]"; }

inline std::string url_host(const std::string& addr) {
  return addr.find(':') == std::string::npos ? addr : "[" + addr + "]";
}

// Usage errors name the transport; "" is not accepted here (see listen_endpoint).
// An ipc path is accepted only from the server itself (its own socket file).
inline Endpoint parse_endpoint(const std::string& transport, std::string_view url) {
  auto bad = [&](const std::string& why) {
    usage_error(transport + ": --endpoint '" + std::string(url) + "': " + why);
  };
  if (url.rfind("inproc://", 0) == 0)
    bad("inproc:// connects sockets inside one process, and fabmeter's two ends are separate processes; "
        "use ipc:// for two processes on one host");
  Endpoint e;
  if (url.rfind("ipc://", 0) == 0) {
    e.scheme = "ipc";
    e.path = std::string(url.substr(6));
    return e;
  }
  if (url.rfind("tcp://", 0) != 0) bad("expected tcp://HOST:PORT or ipc://");
  std::string_view rest = url.substr(6);
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) bad("expected tcp://HOST:PORT");
  e.scheme = "tcp";
  e.host = std::string(rest.substr(0, colon));
  std::string_view port = rest.substr(colon + 1);
  if (e.host.front() == '[' && e.host.back() != ']') bad("an IPv6 address goes in brackets: tcp://[ADDR]:PORT");
  if (port == "*") port = "0";
  unsigned long n = 0;
  for (char ch : port) {
    if (ch < '0' || ch > '9') bad("PORT must be a number, or * (or 0) for a free one");
    n = n * 10 + static_cast<unsigned long>(ch - '0');
    if (n > 65535) bad("PORT must be at most 65535");
  }
  if (port.empty()) bad("PORT must be a number, or * (or 0) for a free one");
  e.port = std::to_string(n);
  return e;
}

// Lowest port a client may name: below it are the host's services (and a
// root server could take ports no user may).
constexpr unsigned long kMinClientPort = 1024;

// The server's own reading of the client's --endpoint ("" stays ""): never a
// path or address the client chose. ipc:// becomes the server's socket file
// `ipc_path` (made by calling `make_ipc_path` only then); tcp binds only the
// address the control connection arrived at (`ctrl_addr`), on a free port or
// one >= 1024. Anything else is refused with the reason.
template <class MakePath>
std::string server_endpoint(const std::string& transport, const std::string& client_url, const std::string& ctrl_addr,
                            MakePath make_ipc_path) {
  if (client_url.empty()) return client_url;
  Endpoint e = parse_endpoint(transport, client_url);
  auto bad = [&](const std::string& why) { usage_error(transport + ": --endpoint '" + client_url + "': " + why); };
  if (e.scheme == "ipc") {
    if (!e.path.empty()) bad("the server names its ipc socket file itself; give ipc:// (no path)");
    e.path = make_ipc_path();
    return e.url();
  }
  const std::string mine = url_host(ctrl_addr);
  if (!every_address(e.host) && e.host != mine)
    bad("the server listens only on the address the client reached it at; give tcp://" + mine + ":PORT or tcp://*:PORT");
  if (!e.free_port() && std::stoul(e.port) < kMinClientPort)
    bad("ports below " + std::to_string(kMinClientPort) + " are refused; give one >= " + std::to_string(kMinClientPort) +
        ", or * for a free one");
  e.host = mine;
  return e.url();
}

// The transports' server_claim (transport.hpp): the endpoint as
// server_endpoint makes it, an ipc socket in the session's own directory.
inline void claim_endpoint(const std::string& transport, MessagingOptions& m, const ServerPlaces& at) {
  m.endpoint =
      server_endpoint(transport, m.endpoint, at.ctrl_addr, [&] { return at.own_dir() + "/" + transport + ".sock"; });
}

// The transports' queued_bytes: the library's queues, both directions.
inline double queued_bytes(uint64_t size) { return 2.0 * queue_depth(size) * static_cast<double>(size); }

// After the server bound its ipc socket: connectable by a client of another
// user (the directory above it is 0711 and named by mkdtemp).
inline void share_ipc_socket(const Endpoint& e) {
  if (e.scheme == "ipc") ::chmod(e.path.c_str(), 0666);
}

// The server's endpoint: --endpoint as server_endpoint() made it, else tcp on
// the address the control connection arrived at, on a free port (as the tcp
// transport does).
inline Endpoint listen_endpoint(const std::string& transport, const std::string& endpoint, const Ctrl& ctrl) {
  if (!endpoint.empty()) {
    Endpoint e = parse_endpoint(transport, endpoint);
    if (e.scheme == "ipc" && e.path.empty()) runtime_error(transport + ": no ipc path from the server's session");
    return e;
  }
  return {"tcp", url_host(ctrl.local_addr()), "0", ""};
}

// A fixed --endpoint names one listening socket, which the first of several
// connections (--flows, --conns) would take.
inline const char* one_connection(const std::string& transport, const std::string& endpoint) {
  if (endpoint.empty()) return nullptr;
  const Endpoint e = parse_endpoint(transport, endpoint);
  if (e.scheme == "ipc")
    return "--endpoint ipc:// is one socket file per session, which one connection takes: leave --endpoint out "
           "(tcp, a free port per connection)";
  if (!e.free_port())
    return "--endpoint names one tcp port, which one connection takes: give tcp://HOST:* (a free port per "
           "connection) or leave --endpoint out";
  return nullptr;
}

// ipc:// needs both ends on one host.
inline bool same_host_only(const std::string& transport, const std::string& endpoint) {
  return !endpoint.empty() && parse_endpoint(transport, endpoint).scheme == "ipc";
}

// The URL the client dials: the server's, as it bound it (its control
// address, or its own ipc socket file).
inline std::string dial_url(const std::string& transport, const std::string& server_url) {
  Endpoint e = parse_endpoint(transport, server_url);
  if (e.scheme == "ipc" && e.path.empty()) runtime_error(transport + ": the server sent an ipc endpoint without a path");
  return e.url();
}

// The client sends one message on the data socket and the server answers.
// The libraries connect in the background and would otherwise queue the first
// messages silently; after this both ends know the path works.
template <class T>
void data_handshake(T& t, const Ctrl& ctrl, Role role, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ctrl.timeout_ms());
  RemoteWatch watch(ctrl);
  auto check = [&] {
    if (const char* f = t.failure()) runtime_error(f);
    if (stop_requested()) runtime_error(what + ": interrupted while connecting");
    watch.check(what + "'s first message");
    if (std::chrono::steady_clock::now() > deadline)
      runtime_error(what + ": no message on the data connection within " + std::to_string(ctrl.timeout_ms()) + " ms");
  };
  auto send = [&] {
    const char hello = 'h';
    while (!t.post_send(&hello, 1, 0, 0)) {
      check();
      t.wait_send();
    }
  };
  auto recv = [&] {
    RecvMsg m;
    while (!t.wait_recv(m)) check();
    t.release(m);
  };
  if (role == Role::client) {
    send();
    recv();
  } else {
    recv();
    send();
  }
}

}  // namespace fm::msg
