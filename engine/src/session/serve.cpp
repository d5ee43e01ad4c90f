// The serve daemon: it listens, keeps connections that have not spoken yet
// (Silent), forks a session process per connection that has (Children,
// server_session.hpp), reaps them, and never reads from a client itself.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "session/admission.hpp"
#include "session/auth_failures.hpp"
#include "experiment/common.hpp"
#include "session/server_dirs.hpp"
#include "session/server_session.hpp"
#include "session/session_common.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/session.hpp"
#include "fabmeter/signals.hpp"

namespace fm {

namespace {

// Connections that have said nothing yet wait in the accepting process (no
// process of their own), at most this many; when all are, the oldest is
// dropped for a new one once it has had kSilentGraceMs to speak (a client
// sends its hello right after connecting), and the new one waits in the
// kernel's queue until then.
constexpr size_t kMaxSilent = 64;
constexpr uint64_t kSilentGraceMs = 100;
// Session processes still in their handshake (apart from --max-sessions):
// the oldest is dropped for a new one (Admission).
constexpr size_t kMaxHandshakes = 16;
constexpr double kKillGraceS = 5;           // then the parent kills a session that did not end
constexpr double kStopWaitS = 3;            // on Ctrl-C/SIGTERM: how long sessions get to end cleanly

int child_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 3;
}

// The server's session children and their places (Admission): at most
// --max-sessions sessions and kMaxHandshakes connections in their handshake.
class Children {
 public:
  Children(const ServerOptions& o, size_t max_sessions) : o_(o), admission_(max_sessions, kMaxHandshakes) {}
  Admission& admission() { return admission_; }
  bool empty() const { return kids_.empty(); }

  // A record for a new connection; with the handshake budget spent, the
  // oldest connection still in its handshake is dropped first. None: every
  // place is taken.
  std::optional<size_t> place() {
    if (std::count_if(kids_.begin(), kids_.end(), [&](const Child& k) { return handshaking(k); }) >=
        static_cast<std::ptrdiff_t>(kMaxHandshakes))
      drop_oldest_handshake();
    return admission_.open();
  }
  void started(pid_t pid, size_t rec, std::string source) { kids_.push_back({pid, Clock::mono_ns(), rec, std::move(source)}); }
  AuthFailures& auth_failures() { return failures_; }

  // Collects ended children without waiting; returns the last ended
  // session's code (-1: none ended; connections that never became a
  // session do not count).
  int reap() {
    int last = -1, status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) last = std::max(last, ended(pid, status));
    return last;
  }

  // Kills the children older than `limit_ns` (the watchdog did not end them).
  void kill_older_than(uint64_t limit_ns) const {
    for (const Child& k : kids_)
      if (Clock::mono_ns() - k.started_ns > limit_ns) kill(k.pid, SIGKILL);
  }

  // Ctrl-C/SIGTERM/SIGHUP: sessions end as interrupted (their transports
  // remove their segments); one that does not within kStopWaitS is killed.
  void stop() {
    for (const Child& k : kids_) kill(k.pid, SIGTERM);
    const uint64_t deadline = Clock::mono_ns() + static_cast<uint64_t>(kStopWaitS * 1e9);
    while (!kids_.empty() && Clock::mono_ns() < deadline) {
      reap();
      if (!kids_.empty()) usleep(20000);
    }
    for (const Child& k : kids_) kill(k.pid, SIGKILL);
    while (!kids_.empty()) wait_for(kids_.front().pid);
  }

 private:
  struct Child {
    pid_t pid;
    uint64_t started_ns;
    size_t rec;
    std::string source;  // the client's address
  };

  bool handshaking(const Child& k) const { return admission_.stage(k.rec) == Admission::Stage::handshaking; }

  // kids_ is in the order the connections came.
  void drop_oldest_handshake() {
    for (const Child& k : kids_)
      if (admission_.drop(k.rec)) {
        kill(k.pid, SIGKILL);
        wait_for(k.pid);
        return;
      }
  }

  void wait_for(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ended(pid, status);
  }

  // Forgets child `pid` and cleans after it; its code if it was a session, else -1.
  int ended(pid_t pid, int status) {
    const auto k = std::find_if(kids_.begin(), kids_.end(), [&](const Child& c) { return c.pid == pid; });
    if (k == kids_.end()) return -1;
    const Admission::Stage stage = admission_.stage(k->rec);
    if (stage == Admission::Stage::auth_failed) failures_.failed(k->source, Clock::mono_ns());
    if (stage == Admission::Stage::admitted) failures_.proved(k->source);
    const bool session = admission_.release(k->rec, pid);
    kids_.erase(k);
    clean_after(o_, pid);
    return session ? child_code(status) : -1;
  }

  const ServerOptions& o_;
  Admission admission_;
  std::vector<Child> kids_;
  AuthFailures failures_;
};

// Connections that have not said a word yet wait here, in the accepting
// process, without a process of their own; one gets a process once it has
// sent something (or closed). At most kMaxSilent wait (see there), each at
// most serve --handshake-timeout-ms.
class Silent {
 public:
  // Whether a new connection may be taken now (add).
  bool has_room() const { return waiting_.size() < kMaxSilent || oldest_ns() >= kSilentGraceMs * 1000000; }

  void add(Ctrl ctrl) {
    if (waiting_.size() >= kMaxSilent) drop_oldest("dropped for a newer connection (" + std::to_string(kMaxSilent) +
                                                   " connections were waiting for their first word)");
    waiting_.push_back({std::move(ctrl), Clock::mono_ns()});
  }

  explicit Silent(uint32_t timeout_ms) : timeout_ms_(timeout_ms) {}

  // Drops those silent for the handshake timeout; returns how long until the
  // next is due, or, while there is no room, until there is.
  timespec expire() {
    const uint64_t limit = uint64_t{timeout_ms_} * 1000000;
    while (!waiting_.empty() && oldest_ns() >= limit)
      drop_oldest("said nothing within " + seconds(timeout_ms_ / 1e3));
    if (waiting_.empty()) return {1, 0};
    const uint64_t left = (has_room() ? limit : kSilentGraceMs * 1000000) - oldest_ns();
    return {static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
  }

  // The pollfds to watch, after those already in `fds`.
  void watch(std::vector<pollfd>& fds) const {
    for (const Waiting& w : waiting_) fds.push_back({w.ctrl.fd(), POLLIN, 0});
  }

  // Takes out the connections whose pollfd (from `first` in `fds`, as watch() put them) says they spoke.
  std::vector<Ctrl> spoken(const std::vector<pollfd>& fds, size_t first) {
    std::vector<Ctrl> out;
    std::deque<Waiting> still;
    for (size_t i = 0; i < waiting_.size(); ++i)
      if (fds[first + i].revents != 0)
        out.push_back(std::move(waiting_[i].ctrl));
      else
        still.push_back(std::move(waiting_[i]));
    waiting_ = std::move(still);
    return out;
  }

  // In a session process: the other connections' sockets are not its own.
  void close_inherited() const {
    for (const Waiting& w : waiting_) ::close(w.ctrl.fd());
  }

 private:
  struct Waiting {
    Ctrl ctrl;
    uint64_t since_ns;
  };
  uint64_t oldest_ns() const { return Clock::mono_ns() - waiting_.front().since_ns; }
  // One line a second at most: under a flood, lines to a stderr nobody reads
  // would fill its pipe and block the accepting process.
  void drop_oldest(const std::string& why) {
    ++dropped_;
    if (Clock::mono_ns() - logged_ns_ >= 1000000000) {
      std::fprintf(stderr, "fabmeter-engine: %s %s%s\n", waiting_.front().ctrl.remote_addr().c_str(), why.c_str(),
                   dropped_ > 1 ? (" (" + std::to_string(dropped_) + " dropped since the last line)").c_str() : "");
      logged_ns_ = Clock::mono_ns();
      dropped_ = 0;
    }
    waiting_.pop_front();
  }
  uint32_t timeout_ms_;
  std::deque<Waiting> waiting_;
  uint64_t logged_ns_ = 0, dropped_ = 0;
};

uint64_t mem_total_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") return kib << 10;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

}  // namespace

int run_server(const ServerOptions& opts) {
  ServerOptions o = opts;
  if (!o.max_memory) o.max_memory = mem_total_bytes() / 4;
  pin_to_cpu(o.cpu);
  const ServerClocks clocks(o.cpu);
  udp_clock_probes_wanted();  // a malformed test hook: exit 2 now, not in every session
  ServerDirs dirs(o);
  Listener listener(o.bind, o.port);
  if (o.token.empty() && !listener.loopback_only())
    std::fprintf(stderr,
                 "fabmeter-engine: warning: serving on %s without a token: anyone who reaches port %u can run "
                 "sessions here (use --token-file F or FABMETER_TOKEN)\n",
                 o.bind.c_str(), unsigned(listener.port()));
  JsonObj ev;
  ev.add("event", "listening").add("bind", o.bind).add("port", static_cast<uint64_t>(listener.port()))
      .add("data_dir", o.data_dir).add("max_memory", o.max_memory).add("max_duration", o.max_duration)
      .add("max_sessions", static_cast<uint64_t>(o.max_sessions))
      .add("handshake_timeout_ms", static_cast<uint64_t>(o.handshake_timeout_ms));
  emit_line(ev);
  const pid_t me = getpid();
  struct sigaction sa {};
  sa.sa_handler = [](int) {};  // only to interrupt poll() when a session ends
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, nullptr);
  // SIGCHLD only while waiting in ppoll below: a session that ends just
  // before the wait still ends it at once.
  sigset_t chld, wait_mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &wait_mask);
  // --once: one session, more are answered busy; a connection that never
  // became a session (fabmeter mesh's reachability check, a failed
  // handshake) is none.
  Children kids(o, o.once ? 1 : o.max_sessions);
  Silent silent(o.handshake_timeout_ms);
  // A connection that has spoken gets a process of its own, or the busy
  // answer when every place is taken.
  auto start = [&](Ctrl ctrl) {
    const std::optional<size_t> rec = kids.place();
    if (!rec) {
      // A fresh connection's send buffer is empty: this never blocks.
      try {
        ctrl.send(CtrlType::refuse, busy_reason(o));
      } catch (const Error&) {
      }
      ctrl.close_draining(0);  // no wait here: a hello already in is read, so the reason is not reset away
      return;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const std::string source = ctrl.remote_addr();
    const uint32_t delay_ms = kids.auth_failures().delay_ms(source);
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "fabmeter-engine: cannot start a session: %s\n", std::strerror(errno));
      kids.admission().close(*rec);
      return;
    }
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &wait_mask, nullptr);
      ::close(listener.fd());
      silent.close_inherited();
      session_child(std::move(ctrl), o, clocks, kids.admission(), *rec, me, delay_ms);
    }
    kids.started(pid, *rec, source);
  };
  // The accepting loop only accepts, forks and reaps: it never reads from a
  // client and never waits for a session.
  for (;;) {
    const int rc = kids.reap();
    kids.auth_failures().log(Clock::mono_ns(), false);
    if (o.once && rc >= 0) {
      kids.stop();  // connections still in their handshake
      kids.auth_failures().log(Clock::mono_ns(), true);
      return rc;
    }
    if (stop_requested()) {
      kids.stop();
      kids.auth_failures().log(Clock::mono_ns(), true);
      return 130;
    }
    if (o.max_duration > 0)
      kids.kill_older_than(static_cast<uint64_t>((o.max_duration + kWatchdogGraceS + kKillGraceS) * 1e9));
    // Woken early by a connection, a silent one's first word or deadline,
    // SIGCHLD (a session ended) or a stop signal; rarely otherwise, so a
    // busy-polling session on the same CPU is left alone.
    const timespec slice = silent.expire();
    std::vector<pollfd> fds{{silent.has_room() ? listener.fd() : -1, POLLIN, 0}};
    silent.watch(fds);
    if (::ppoll(fds.data(), fds.size(), &slice, &wait_mask) <= 0) continue;
    for (Ctrl& ctrl : silent.spoken(fds, 1)) start(std::move(ctrl));
    if (fds[0].revents & POLLIN) {
      Ctrl ctrl = listener.accept(o.handshake_timeout_ms);
      if (ctrl.fd() >= 0) silent.add(std::move(ctrl));
    }
  }
}

}  // namespace fm
