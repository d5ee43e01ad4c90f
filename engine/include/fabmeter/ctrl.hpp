// Control channel: a TCP side channel between the two ends, kept off the data
// path (as fabtests' ft_sock_*). Framed messages; every wait has a timeout.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace fm {

enum class CtrlType : uint8_t {
  hello = 1,     // client -> server: version, host id, parameters
  welcome,       // server -> client: accepted (host id, environment)
  refuse,        // server -> client: parameters refused (text)
  exchange,      // symmetric blob exchange (addresses, results)
  barrier,
  end_point,     // client -> server: the measured point is over
  bye,           // session over
};

class Ctrl {
 public:
  Ctrl() = default;
  explicit Ctrl(int fd, uint32_t timeout_ms);
  Ctrl(Ctrl&& o) noexcept;
  Ctrl& operator=(Ctrl&& o) noexcept;
  ~Ctrl();

  // "host", "host:port" or "[v6]:port"; retries until timeout_ms.
  static Ctrl connect(const std::string& server, uint16_t default_port, uint32_t timeout_ms);

  void send(CtrlType t, std::string_view payload = {});
  // Waits up to the timeout for the next message; a different type than
  // expected, EOF or timeout is a runtime error naming `what`.
  std::string recv(CtrlType expect, const char* what);
  // Sends mine, returns the peer's (both ends call it).
  std::string exchange(std::string_view mine, const char* what);
  void barrier(const char* what);

  enum class Peek { nothing, message, closed };
  // Non-blocking: is a message (or EOF) waiting? For the slow-path guard.
  Peek peek() const;

  int fd() const { return fd_; }
  // The local address this connection uses (where data sockets should bind).
  std::string local_addr() const;
  std::string peer_addr() const;
  uint32_t timeout_ms() const { return timeout_ms_; }
  void set_timeout_ms(uint32_t ms) { timeout_ms_ = ms; }

 private:
  int fd_ = -1;
  uint32_t timeout_ms_ = 5000;
};

class Listener {
 public:
  Listener(const std::string& bind_addr, uint16_t port);
  ~Listener();
  uint16_t port() const { return port_; }
  int fd() const { return fd_; }  // for a server that polls it beside other work
  // Blocks until a client connects or Ctrl-C (checked every 100 ms); returns
  // an invalid Ctrl (fd -1) in that case. `timeout_ms` applies to the session.
  Ctrl accept(uint32_t timeout_ms);

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

constexpr uint16_t kDefaultPort = 18515;  // perftest's default, so firewall rules carry over
constexpr uint32_t kProtocolVersion = 1;

// Splits "host:port", "[v6]:port" or "host".
void split_host_port(const std::string& s, uint16_t default_port, std::string& host, uint16_t& port);

}  // namespace fm
