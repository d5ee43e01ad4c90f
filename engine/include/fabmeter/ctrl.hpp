// Control channel: a TCP side channel between the two ends, kept off the data
// path (as fabtests' ft_sock_*). Framed messages; every wait has a timeout.
// A frame is a 5-byte header (length, little-endian uint32; type byte) and
// the body. The header is checked (known type, the one expected, length
// within that type's limit) before a byte of the body is read or allocated.
// In a session with a token every frame after the welcome is authenticated
// (frame_auth.hpp): its tag follows the body and the length counts both.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <string_view>

#include "fabmeter/frame_auth.hpp"

namespace fm {

enum class CtrlType : uint8_t {
  hello = 1,     // client -> server: version, host id, client nonce, parameters
  welcome,       // server -> client: accepted (server proof, host id, environment)
  refuse,        // either way: parameters refused (text; exit 2)
  exchange,      // symmetric blob exchange (addresses, results)
  barrier,
  end_point,     // client -> server: the measured point is over
  bye,           // session over
  challenge,     // server -> client: server nonce (empty: the server has no token)
  auth,          // client -> server: HMAC proof of the token
  heartbeat,     // either way during points: still alive (swallowed by recv/peek)
  fail,          // either way: a runtime failure such as "authentication failed" (text; exit 3)
  cpu_cost,      // server -> client after each point: its CPU cost (JSON, at most kMaxCpuFrame)
};
constexpr uint8_t kCtrlTypeMax = static_cast<uint8_t>(CtrlType::cpu_cost);

constexpr size_t kFrameHeaderBytes = 5;
// Before the session's plan is known (and always on the server, which
// receives no reports) a variable-size frame is at most this big: a hello
// needs about 1 KiB.
constexpr uint32_t kMaxFrameDefault = 16 * 1024;
constexpr uint32_t kMaxWelcome = 64 * 1024;  // host id + the server's environment JSON
constexpr uint32_t kMaxText = 4096;          // refuse / fail reasons
constexpr uint32_t kMaxCpuFrame = 32 * 1024; // a side's CPU cost (cpu_cost.hpp), pinned CPUs listed
// The end that closes first waits this long at most for the other end to read the
// last frame and close too: a client after its bye, a session after its end.
constexpr uint32_t kCloseDrainMs = 1000;

struct FrameHeader {
  uint32_t len = 0;
  CtrlType type{};
};

// Decodes and checks one header: a known type, `expect` (or refuse, fail,
// heartbeat), length within the type's limit (`max_frame` for hello and
// exchange). `tag_bytes` > 0 (an authenticated frame): the length counts a
// tag after the body (out->len is the body's), and the type is checked
// against `expect` only once the tag is verified (check_frame_type), so that
// a frame changed on the way is named as such. Returns "" when it may be
// read, else the one-line reason. Pure: the fuzz targets feed it arbitrary bytes.
std::string check_frame_header(const unsigned char* hdr, CtrlType expect, uint32_t max_frame, uint32_t tag_bytes,
                               FrameHeader* out);
std::string check_frame_type(CtrlType got, CtrlType expect);
const char* ctrl_type_name(CtrlType t);
// The other end's text (refuse/fail reasons) made one printable line, at most kMaxText bytes.
std::string printable_line(std::string_view s);

class Heartbeat;

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
  // Every frame either way after this call is authenticated under `key`
  // (frame_auth.hpp; `server`: this end is the server).
  void authenticate(std::string_view key, bool server);
  // The server's welcome, then authenticate(), in one turn of the send lock:
  // no heartbeat slips between the two.
  void send_then_authenticate(CtrlType t, std::string_view payload, std::string_view key, bool server);
  bool authenticated() const { return auth_ != nullptr; }
  // Never throws: a remote end that is gone shows up at the next peek or recv.
  bool send_heartbeat() noexcept;
  // Waits up to the timeout for the next message, skipping heartbeats; a
  // different type than expected, an invalid or oversized frame, EOF or
  // timeout is a runtime error naming `what`; refuse is a usage error.
  std::string recv(CtrlType expect, const char* what);
  // The next frame of any type but a heartbeat, its type in *type: refuse
  // and fail come back as frames (a hop passes them on: forward.hpp).
  std::string recv_any(CtrlType* type, const char* what);
  // Sends mine, returns the other end's (both ends call it).
  std::string exchange(std::string_view mine, const char* what);
  void barrier(const char* what);

  enum class Peek { nothing, message, closed };
  // Non-blocking: is a message (or EOF) waiting? Heartbeats are consumed
  // here, so `message` is always a real one. For the slow-path guard.
  Peek peek() const;
  // Frames received so far, heartbeats included: the guard's proof of life.
  uint64_t frames_in() const { return frames_in_; }
  // From now on a wait in recv() also ends when nothing at all came from
  // the other end for `ms` (its Heartbeat thread beats even while it computes):
  // a frozen remote end is noticed without waiting out the whole timeout. 0: off.
  void expect_heartbeats(uint32_t ms) { silence_ms_ = ms; }
  uint32_t silence_ms() const { return silence_ms_; }

  // Largest hello/exchange body accepted (see kMaxFrameDefault); the
  // session raises it to what its plan's reports need.
  void set_max_frame(uint64_t bytes) { max_frame_ = bytes > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(bytes); }
  uint32_t max_frame() const { return max_frame_; }

  // Ends the connection so that our last frames reach the other end: a plain
  // close() with unread input (its heartbeats) resets the connection, and
  // the other end's kernel then drops what it had not read yet (our reason).
  // Stops sending, discards input until the other end closes or `ms` passes.
  // A Heartbeat on this channel is stopped first, so that the close here is
  // the socket's last reference (see Heartbeat).
  void close_draining(uint32_t ms) noexcept;
  // The client's end of a session: bye, then close_draining, so that an
  // unread heartbeat cannot turn the close into a reset that overtakes the
  // bye (the server would then fail a session that went well).
  void say_bye();
  int fd() const { return fd_; }
  // The local address this connection uses (where data sockets should bind).
  std::string local_addr() const;
  // The other end's address.
  std::string remote_addr() const;
  uint32_t timeout_ms() const { return timeout_ms_; }
  void set_timeout_ms(uint32_t ms) { timeout_ms_ = ms; }

 private:
  void send_locked(CtrlType t, std::string_view payload);
  std::string read_frame(CtrlType expect, CtrlType* any, const char* what);
  int fd_ = -1;
  uint32_t timeout_ms_ = 5000;
  uint32_t max_frame_ = kMaxFrameDefault;
  mutable uint64_t frames_in_ = 0;  // peek() consumes heartbeats
  uint32_t silence_ms_ = 0;
  std::unique_ptr<FrameAuth> auth_;  // null: frames carry no tag (before the welcome, or no token)
  // Frames go out whole: the Heartbeat thread and the session share the socket.
  std::unique_ptr<std::mutex> send_mu_ = std::make_unique<std::mutex>();
  Heartbeat* beat_ = nullptr;  // the one beating on this channel; not moved with it
  friend class Heartbeat;
};

// Proof of life, as RemoteWatch and the measuring loops' Guard read it: a frame
// came in since the last look, or a message waits unread (the other end's next
// step, e.g. its barrier after a tcp connect whose last ACK was lost, holds
// back the heartbeats behind it: the other end is alive, and the wait's own
// deadline bounds it).
class RemoteHeard {
 public:
  explicit RemoteHeard(const Ctrl& ctrl) : frames_(ctrl.frames_in()) {}
  bool since_last(const Ctrl& ctrl, Ctrl::Peek peek) {
    if (ctrl.frames_in() == frames_ && peek != Ctrl::Peek::message) return false;
    frames_ = ctrl.frames_in();
    return true;
  }

 private:
  uint64_t frames_;
};

// For a wait outside recv() (a data listener's accept, a library's
// connection handshake): check() ends it, as recv() would, when the other end
// closes the control channel or, heartbeats expected, falls silent; so a
// remote end that dies or freezes while transports connect costs the other side
// kSilenceMs, not the whole --timeout-ms. Call check() between short waits
// (transport.hpp's kWaitSliceMs); it polls the channel without blocking.
class RemoteWatch {
 public:
  explicit RemoteWatch(const Ctrl& ctrl);
  void check(const std::string& what);

 private:
  const Ctrl& ctrl_;
  RemoteHeard remote_heard_;
  uint64_t heard_ns_;
};

// A session's proof of life: a thread that sends a heartbeat frame every
// kHeartbeatMs for as long as it exists, whatever the session's own thread
// is doing (measuring, computing, writing). A SIGSTOPped process stops all
// its threads, so the other end notices it after kSilenceMs.
//
// The beat thread takes a descriptor table of its own holding the control
// socket alone. While two threads share a table, every system call on a
// descriptor takes and drops a reference on its file (the kernel's fdget
// slow path); with Soft-RoCE every post is such a call (docs/performance.md).
// Its copy of the socket goes with stop(), before the session's close.
constexpr uint32_t kHeartbeatMs = 1000;
constexpr uint32_t kSilenceMs = 3000;
class Heartbeat {
 public:
  explicit Heartbeat(Ctrl& ctrl);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  // Ends the beats and the thread; its descriptors are closed on return.
  void stop() noexcept;

 private:
  Ctrl& ctrl_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class Listener {
 public:
  Listener(const std::string& bind_addr, uint16_t port);
  ~Listener();
  uint16_t port() const { return port_; }
  int fd() const { return fd_; }  // for a server that polls it beside other work
  // Bound to a loopback address only (127/8, ::1): no other host can connect.
  bool loopback_only() const;
  // Blocks until a client connects or Ctrl-C (checked every 100 ms); returns
  // an invalid Ctrl (fd -1) in that case. `timeout_ms` applies to the session.
  Ctrl accept(uint32_t timeout_ms);

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

constexpr uint16_t kDefaultPort = 18515;  // perftest's default, so firewall rules carry over
// 2: challenge-response authentication, heartbeats, bounded frames.
// 3: the hello's relay line (a session that runs a client elsewhere).
// 4: the server's cpu_cost frame after each point.
// 5: the hello's tool line (a session that runs a peer tool's server side).
// 6: a relayed series (start/next/done).
// 7: with a token, every frame after the welcome authenticated (frame_auth.hpp).
// 9: the hello's hop line (a session forwarded through this host: session/forward.hpp).
constexpr uint32_t kProtocolVersion = 9;

// Splits "host:port", "[v6]:port" or "host".
void split_host_port(const std::string& s, uint16_t default_port, std::string& host, uint16_t& port);

}  // namespace fm
