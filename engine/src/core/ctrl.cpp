#include "fabmeter/ctrl.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/signals.hpp"

namespace fm {
namespace {

// Reads at least n bytes, and at most `room` (0: exactly n), before the
// deadline (CLOCK_MONOTONIC_RAW ns). Returns how many, 0 on EOF before the
// first byte; throws on timeout or error. With silence_ns > 0, also throws
// when no byte came for that long.
size_t read_full(int fd, void* buf, size_t n, uint64_t deadline, const char* what, uint64_t silence_ns = 0,
                 size_t room = 0) {
  room = std::max(room, n);
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  uint64_t heard = Clock::mono_ns();
  while (got < n) {
    uint64_t now = Clock::mono_ns();
    if (now >= deadline)
      runtime_error(std::string("timed out waiting for the other end (") + what + "); --timeout-ms sets how long to wait");
    if (silence_ns && now - heard >= silence_ns)
      remote_lost("the other end stopped answering (no heartbeat for " + std::to_string(silence_ns / 1000000000) +
                  " s; frozen?) (" + what + ")");
    const uint64_t until = silence_ns ? std::min(deadline, heard + silence_ns) : deadline;
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>((until - now) / 1000000 + 1));
    if (r < 0) {
      if (errno == EINTR && stop_requested()) runtime_error("interrupted");
      if (errno == EINTR) continue;
      sys_error("control channel poll");
    }
    if (r == 0) continue;
    ssize_t k = ::recv(fd, p + got, room - got, 0);
    if (k == 0) {
      if (got == 0) return 0;
      remote_lost(std::string("the other end closed the control channel mid-message (") + what + ")");
    }
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET) remote_lost(std::string("the other end reset the control channel (") + what + ")");
      sys_error("control channel recv");
    }
    got += static_cast<size_t>(k);
    heard = Clock::mono_ns();
  }
  return got;
}

std::string addr_string(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, host, sizeof host);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, host, sizeof host);
  return host;
}

uint32_t limit_of(CtrlType t, uint32_t max_frame) {
  switch (t) {
    case CtrlType::hello: return kMaxFrameDefault;
    case CtrlType::welcome: return kMaxWelcome;
    case CtrlType::refuse:
    case CtrlType::fail: return kMaxText;
    case CtrlType::exchange: return max_frame;
    case CtrlType::end_point: return 32;  // a decimal count
    case CtrlType::cpu_cost: return kMaxCpuFrame;
    case CtrlType::challenge:
    case CtrlType::auth: return 32;       // a nonce or an HMAC-SHA-256
    case CtrlType::barrier:
    case CtrlType::bye:
    case CtrlType::heartbeat: return 0;
  }
  return 0;
}

}  // namespace

const char* ctrl_type_name(CtrlType t) {
  switch (t) {
    case CtrlType::hello: return "hello";
    case CtrlType::welcome: return "welcome";
    case CtrlType::refuse: return "refuse";
    case CtrlType::exchange: return "exchange";
    case CtrlType::barrier: return "barrier";
    case CtrlType::end_point: return "end_point";
    case CtrlType::bye: return "bye";
    case CtrlType::challenge: return "challenge";
    case CtrlType::auth: return "auth";
    case CtrlType::heartbeat: return "heartbeat";
    case CtrlType::fail: return "fail";
    case CtrlType::cpu_cost: return "cpu_cost";
  }
  return "?";
}

std::string check_frame_type(CtrlType got, CtrlType expect) {
  if (got != expect && got != CtrlType::refuse && got != CtrlType::fail && got != CtrlType::heartbeat)
    return std::string("control channel: expected ") + ctrl_type_name(expect) + ", got " + ctrl_type_name(got);
  return {};
}

std::string check_frame_header(const unsigned char* hdr, CtrlType expect, uint32_t max_frame, uint32_t tag_bytes,
                               FrameHeader* out) {
  const uint32_t len = uint32_t(hdr[0]) | uint32_t(hdr[1]) << 8 | uint32_t(hdr[2]) << 16 | uint32_t(hdr[3]) << 24;
  const uint8_t type = hdr[4];
  if (type == 0 || type > kCtrlTypeMax)
    return "control channel: unknown frame type " + std::to_string(type) + " (the other end is not fabmeter, or another version?)";
  const auto t = static_cast<CtrlType>(type);
  if (tag_bytes == 0)
    if (std::string why = check_frame_type(t, expect); !why.empty()) return why;
  if (len < tag_bytes)
    return std::string("control channel: ") + ctrl_type_name(t) + " frame of " + std::to_string(len) +
           " bytes is shorter than its authentication tag";
  if (len - tag_bytes > limit_of(t, max_frame))
    return std::string("control channel: ") + ctrl_type_name(t) + " frame of " + std::to_string(len - tag_bytes) +
           " bytes exceeds its limit of " + std::to_string(limit_of(t, max_frame));
  *out = {len - tag_bytes, t};
  return {};
}

std::string printable_line(std::string_view s) {
  std::string out(s.substr(0, kMaxText));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

void split_host_port(const std::string& s, uint16_t default_port, std::string& host, uint16_t& port) {
  port = default_port;
  std::string p;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos) usage_error("bad address '" + s + "'");
    host = s.substr(1, close - 1);
    if (close + 1 < s.size() && s[close + 1] == ':') p = s.substr(close + 2);
  } else if (auto c = s.rfind(':'); c != std::string::npos && s.find(':') == c) {
    host = s.substr(0, c);
    p = s.substr(c + 1);
  } else {
    host = s;
  }
  if (!p.empty()) {
    char* end = nullptr;
    long v = std::strtol(p.c_str(), &end, 10);
    if (*end || v < 0 || v > 65535) usage_error("bad port in '" + s + "'");
    port = static_cast<uint16_t>(v);
  }
  if (host.empty()) usage_error("bad address '" + s + "'");
}

Ctrl::Ctrl(int fd, uint32_t timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
Ctrl::Ctrl(Ctrl&& o) noexcept
    : fd_(o.fd_), timeout_ms_(o.timeout_ms_), max_frame_(o.max_frame_), frames_in_(o.frames_in_),
      silence_ms_(o.silence_ms_), auth_(std::move(o.auth_)) {
  o.fd_ = -1;
}
Ctrl& Ctrl::operator=(Ctrl&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    timeout_ms_ = o.timeout_ms_;
    max_frame_ = o.max_frame_;
    frames_in_ = o.frames_in_;
    silence_ms_ = o.silence_ms_;
    auth_ = std::move(o.auth_);
    o.fd_ = -1;
  }
  return *this;
}
Ctrl::~Ctrl() {
  if (fd_ >= 0) ::close(fd_);
}

void Ctrl::close_draining(uint32_t ms) noexcept {
  if (fd_ < 0) return;
  if (beat_) beat_->stop();  // its table's copy of the socket would outlive our close
  {
    std::lock_guard lock(*send_mu_);  // frames go out whole, as everywhere
    ::shutdown(fd_, SHUT_WR);
  }
  const uint64_t deadline = Clock::mono_ns() + uint64_t(ms) * 1000000;
  char sink[4096];
  for (uint64_t now = Clock::mono_ns();; now = Clock::mono_ns()) {  // once at least: what is there already
    pollfd pfd{fd_, POLLIN, 0};
    const int left_ms = now < deadline ? static_cast<int>((deadline - now + 999999) / 1000000) : 0;
    const int ready = ::poll(&pfd, 1, left_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t k = ::recv(fd_, sink, sizeof sink, 0);
    if (k == 0 || (k < 0 && errno != EINTR) || now >= deadline) break;
  }
  std::lock_guard lock(*send_mu_);  // no beat may go to a descriptor number reused after this
  ::close(fd_);
  fd_ = -1;
}

void Ctrl::say_bye() {
  send(CtrlType::bye);
  close_draining(kCloseDrainMs);
}

namespace {
// 127/8, ::1 or ::ffff:127/104.
bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}
}  // namespace

Ctrl Ctrl::connect(const std::string& server, uint16_t default_port, uint32_t timeout_ms) {
  std::string host;
  uint16_t port;
  split_host_port(server, default_port, host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    usage_error("cannot resolve server '" + host + "': " + gai_strerror(rc));
  uint64_t deadline = Clock::mono_ns() + uint64_t(timeout_ms) * 1000000;
  std::string last_error = "no address";
  bool refused_remote = false;  // nothing listens at a non-loopback address: perhaps a serve on its default bind
  // A server that is still starting refuses connections: retry until the deadline.
  while (Clock::mono_ns() < deadline) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc < 0 && errno == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        uint64_t now = Clock::mono_ns();
        int wait_ms = now < deadline ? static_cast<int>((deadline - now) / 1000000) + 1 : 0;
        if (::poll(&pfd, 1, wait_ms) == 1) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err ? -1 : 0;
          errno = err ? err : ETIMEDOUT;
        } else {
          rc = -1;
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        // Back to blocking: reads go through poll() with deadlines anyway.
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        freeaddrinfo(res);
        return Ctrl(fd, timeout_ms);
      }
      last_error = std::strerror(errno);
      refused_remote = errno == ECONNREFUSED && !is_loopback(ai->ai_addr);
      ::close(fd);
    }
    usleep(50000);
  }
  freeaddrinfo(res);
  runtime_error("cannot reach fabmeter server at " + host + ":" + std::to_string(port) + " within " +
                std::to_string(timeout_ms) + " ms (" + last_error + ")" +
                (refused_remote ? "; is a `fabmeter serve` running there with --bind on an address this host "
                                  "reaches? Its default --bind 127.0.0.1 takes local clients only"
                                : ""));
}

void Ctrl::send(CtrlType t, std::string_view payload) {
  std::lock_guard lock(*send_mu_);
  send_locked(t, payload);
}

void Ctrl::authenticate(std::string_view key, bool server) {
  std::lock_guard lock(*send_mu_);
  auth_ = std::make_unique<FrameAuth>(key, server);
}

void Ctrl::send_then_authenticate(CtrlType t, std::string_view payload, std::string_view key, bool server) {
  std::lock_guard lock(*send_mu_);
  send_locked(t, payload);
  auth_ = std::make_unique<FrameAuth>(key, server);
}

void Ctrl::send_locked(CtrlType t, std::string_view payload) {
  // Reasons are cut to what the other end accepts rather than lost with the session.
  if ((t == CtrlType::refuse || t == CtrlType::fail) && payload.size() > kMaxText) payload = payload.substr(0, kMaxText);
  const std::string tag = auth_ ? auth_->seal(static_cast<uint8_t>(t), payload) : std::string();
  if (payload.size() > UINT32_MAX - tag.size()) runtime_error("control channel: message too large");
  uint32_t len = static_cast<uint32_t>(payload.size() + tag.size());
  char hdr[kFrameHeaderBytes] = {char(len), char(len >> 8), char(len >> 16), char(len >> 24), static_cast<char>(t)};
  iovec iov[3] = {{hdr, kFrameHeaderBytes},
                  {const_cast<char*>(payload.data()), payload.size()},
                  {const_cast<char*>(tag.data()), tag.size()}};
  size_t total = kFrameHeaderBytes + len, sent = 0;
  while (sent < total) {
    msghdr m{};
    iovec v[3];
    int n = 0;
    size_t skip = sent;
    for (auto& i : iov) {
      if (skip >= i.iov_len) { skip -= i.iov_len; continue; }
      v[n++] = {static_cast<char*>(i.iov_base) + skip, i.iov_len - skip};
      skip = 0;
    }
    m.msg_iov = v;
    m.msg_iovlen = n;
    ssize_t k = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) remote_lost("the other end closed the control channel");
      sys_error("control channel send");
    }
    sent += static_cast<size_t>(k);
  }
}

bool Ctrl::send_heartbeat() noexcept {
  std::lock_guard lock(*send_mu_);
  if (fd_ < 0) return false;
  try {
    send_locked(CtrlType::heartbeat, {});
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::string Ctrl::recv(CtrlType expect, const char* what) { return read_frame(expect, nullptr, what); }

std::string Ctrl::recv_any(CtrlType* type, const char* what) { return read_frame(CtrlType::hello, type, what); }

std::string Ctrl::read_frame(CtrlType expect, CtrlType* any, const char* what) {
  // Heartbeats do not extend the deadline: a remote end that only beats is no answer.
  const uint64_t deadline = Clock::mono_ns() + uint64_t(timeout_ms_) * 1000000;
  const uint32_t tag_bytes = auth_ ? kTagBytes : 0;
  for (;;) {
    // An authenticated frame has at least its tag after the header: the
    // header's read takes up to that much more (an empty body's frame whole).
    unsigned char hdr[kFrameHeaderBytes + kTagBytes];
    const size_t got = read_full(fd_, hdr, kFrameHeaderBytes, deadline, what, uint64_t(silence_ms_) * 1000000,
                                 kFrameHeaderBytes + tag_bytes);
    if (!got) remote_lost(std::string("the other end closed the control channel (while waiting for ") + what + ")");
    FrameHeader h;
    // Any type: each is still held to its own length limit (an unknown one is refused).
    if (any) expect = static_cast<CtrlType>(hdr[4]);
    if (std::string why = check_frame_header(hdr, expect, max_frame_, tag_bytes, &h); !why.empty())
      runtime_error(why + " (" + what + ")");
    ++frames_in_;
    std::string frame(h.len + tag_bytes, '\0');
    const size_t early = got - kFrameHeaderBytes;  // at most tag_bytes: within this frame
    std::memcpy(frame.data(), hdr + kFrameHeaderBytes, early);
    // Large result blobs may take longer than one timeout: the deadline is per message start.
    if (frame.size() > early && !read_full(fd_, frame.data() + early, frame.size() - early,
                                           deadline + uint64_t(h.len) * 10, what, uint64_t(silence_ms_) * 1000000))
      remote_lost("the other end closed the control channel mid-message");
    if (auth_) {
      const std::string_view body = std::string_view(frame).substr(0, h.len);
      if (std::string why = auth_->open(static_cast<uint8_t>(h.type), body, std::string_view(frame).substr(h.len));
          !why.empty())
        runtime_error(why + " (" + what + ")");
      if (std::string why = check_frame_type(h.type, expect); !why.empty()) runtime_error(why + " (" + what + ")");
      frame.resize(h.len);
    }
    if (h.type == CtrlType::heartbeat) continue;
    if (any) {
      *any = h.type;
      return frame;
    }
    if (h.type == CtrlType::refuse) usage_error(printable_line(frame));
    if (h.type == CtrlType::fail) runtime_error(printable_line(frame));
    return frame;
  }
}

std::string Ctrl::exchange(std::string_view mine, const char* what) {
  send(CtrlType::exchange, mine);
  return recv(CtrlType::exchange, what);
}

void Ctrl::barrier(const char* what) {
  send(CtrlType::barrier);
  recv(CtrlType::barrier, what);
}

Heartbeat::Heartbeat(Ctrl& ctrl) : ctrl_(ctrl) {
  ctrl_.expect_heartbeats(kSilenceMs);
  ctrl_.beat_ = this;
  const int fd = ctrl_.fd();
  thread_ = std::thread([this, fd] {
    // A table of our own with the control socket alone (see the header);
    // failing, the tables stay shared, which costs only speed.
    const bool own_table = fd >= 0 && ::unshare(CLONE_FILES) == 0;
    if (own_table) {
      if (fd > 0) ::close_range(0, static_cast<unsigned>(fd) - 1, 0);
      ::close_range(static_cast<unsigned>(fd) + 1, ~0U, 0);
    }
    {
      std::unique_lock lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::milliseconds(kHeartbeatMs), [this] { return stop_; }))
        if (!ctrl_.send_heartbeat()) break;  // the other end is gone: the session finds out itself
    }
    if (own_table) ::close(fd);
  });
}

void Heartbeat::stop() noexcept {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

Heartbeat::~Heartbeat() {
  stop();
  ctrl_.beat_ = nullptr;
  ctrl_.expect_heartbeats(0);
}

RemoteWatch::RemoteWatch(const Ctrl& ctrl) : ctrl_(ctrl), remote_heard_(ctrl), heard_ns_(Clock::mono_ns()) {}

void RemoteWatch::check(const std::string& what) {
  const Ctrl::Peek peek = ctrl_.peek();
  if (peek == Ctrl::Peek::closed)
    remote_lost("the other end closed the control channel (while waiting for " + what + ")");
  const uint64_t now = Clock::mono_ns();
  if (remote_heard_.since_last(ctrl_, peek)) heard_ns_ = now;
  if (ctrl_.silence_ms() && now - heard_ns_ > uint64_t(ctrl_.silence_ms()) * 1000000)
    remote_lost("the other end stopped answering (no heartbeat for " + std::to_string(ctrl_.silence_ms() / 1000) +
                " s; frozen?) (while waiting for " + what + ")");
}

Ctrl::Peek Ctrl::peek() const {
  // A heartbeat: its header and, authenticated, its tag.
  const size_t beat = kFrameHeaderBytes + (auth_ ? kTagBytes : 0);
  // Bounded, so a remote end flooding heartbeats cannot keep the caller here.
  for (int beats = 0; beats < 64; ++beats) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) return Peek::nothing;
    unsigned char buf[kFrameHeaderBytes + kTagBytes];
    ssize_t k = ::recv(fd_, buf, beat, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return Peek::closed;
    const uint32_t len = uint32_t(buf[0]) | uint32_t(buf[1]) << 8 | uint32_t(buf[2]) << 16 | uint32_t(buf[3]) << 24;
    if (k >= static_cast<ssize_t>(kFrameHeaderBytes) &&
        (buf[4] != static_cast<unsigned char>(CtrlType::heartbeat) || len != beat - kFrameHeaderBytes))
      return Peek::message;  // recv() checks it
    // A heartbeat still on its way: not a message yet.
    if (k < static_cast<ssize_t>(beat)) return Peek::nothing;
    // One whose tag fails is left for recv(), which says so.
    if (auth_ && !auth_->open(buf[4], {}, {reinterpret_cast<char*>(buf) + kFrameHeaderBytes, kTagBytes}).empty())
      return Peek::message;
    if (::recv(fd_, buf, beat, MSG_DONTWAIT) != static_cast<ssize_t>(beat)) return Peek::closed;
    ++frames_in_;
  }
  return Peek::nothing;
}

std::string Ctrl::local_addr() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  return addr_string(ss);
}

std::string Ctrl::remote_addr() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  return addr_string(ss);
}

Listener::Listener(const std::string& bind_addr, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(bind_addr.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    usage_error("cannot resolve bind address '" + bind_addr + "': " + gai_strerror(rc));
  fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) sys_error("socket");
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd_, res->ai_addr, res->ai_addrlen) < 0) {
    freeaddrinfo(res);
    sys_error("cannot bind control port " + bind_addr + ":" + std::to_string(port));
  }
  freeaddrinfo(res);
  // A long queue: under a flood of connections a short one is full, the
  // kernel drops a real client's SYN and it waits for its retry; the server
  // takes connections out of the queue faster than any flood fills it.
  if (::listen(fd_, SOMAXCONN) < 0) sys_error("listen");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(ss).sin_port
                                        : reinterpret_cast<sockaddr_in6&>(ss).sin6_port);
}

bool Listener::loopback_only() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  return is_loopback(reinterpret_cast<const sockaddr*>(&ss));
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

Ctrl Listener::accept(uint32_t timeout_ms) {
  for (;;) {
    if (stop_requested()) return Ctrl();
    pollfd pfd{fd_, POLLIN, 0};
    int r = ::poll(&pfd, 1, 100);
    if (r < 0 && errno != EINTR) sys_error("poll on listening socket");
    if (r <= 0) continue;
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      sys_error("accept");
    }
    return Ctrl(fd, timeout_ms);
  }
}

}  // namespace fm
