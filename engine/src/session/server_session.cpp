#include "session/server_session.hpp"

#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <functional>
#include <cstdio>

#include "session/forward.hpp"
#include "session/registry.hpp"
#include "session/relay.hpp"
#include "session/server_dirs.hpp"
#include "session/session_common.hpp"
#include "session/session_log.hpp"
#include "experiment/table.hpp"
#include "session/tool_server.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/stats.hpp"
#include "fabmeter/trace.hpp"

namespace fm {

namespace {

// The whole hello of a liveness probe (python/fabmeter/watch/loop.py's PROBE_HELLO): no session, one log line.
constexpr std::string_view kProbeHello = "probe";

volatile std::sig_atomic_t g_overtime = 0;
void on_watchdog(int) {
  g_overtime = 1;
  g_stop_signal = 1;  // every loop ends as on Ctrl-C; the session then says why
}

// This end's locked-memory limit, which its registration of a verbs or ofi run's rings meets: RLIMIT_MEMLOCK
// (null: unlimited) and CAP_IPC_LOCK, which lifts it. The client's `fabmeter doctor` judges it against the
// run's plan (python/fabmeter/doctor/limits.py); nothing here is read from a file the client names.
JsonObj memlock() {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);  // cannot fail: a valid resource, a struct of ours
  JsonObj o;
  if (lim.rlim_cur != RLIM_INFINITY)
    o.add("limit_bytes", static_cast<uint64_t>(lim.rlim_cur));
  else
    o.add_raw("limit_bytes", "null");
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3]{};
  const bool ipc_lock = syscall(SYS_capget, &header, caps) == 0 &&
                        (caps[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32) & 1u);
  return o.add("cap_ipc_lock", ipc_lock);
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MiB", std::ceil(bytes / (1 << 20)));
  return buf;
}

// One session's own names on the server: a 0700 data subdirectory (a file
// sink writes there) and a 0711 directory for its transport's sockets (the
// transport's server_claim). The client's --sink file:PATH and what the
// transport claims (--endpoint ipc://...) are replaced by these before
// anything opens them. Both are removed at the end of the session.
class SessionFiles {
 public:
  explicit SessionFiles(const ServerOptions& o) : o_(o) {}
  ~SessionFiles() {
    if (!data_.empty()) remove_own_dir(data_);
    if (!ipc_.empty()) remove_own_dir(ipc_);
  }
  SessionFiles(const SessionFiles&) = delete;

  void claim(Params& p, const Ctrl& ctrl) {
    if (experiment_for(p.experiment).writes_file(p)) p.stream.sink = "file:" + make(data_, session_data_dir(o_, getpid()), 0700) + "/sink.csv";
    entry_for(p.transport).server_claim(p, {ctrl.local_addr(), ipc_dir()});
  }
  std::function<std::string()> ipc_dir() {
    return [this] { return make(ipc_, session_ipc_dir(o_, getpid()), 0711); };
  }

 private:
  static const std::string& make(std::string& slot, const std::string& dir, mode_t mode) {
    if (::mkdir(dir.c_str(), mode) != 0) sys_error("cannot create the session's directory " + dir);
    ::chmod(dir.c_str(), mode);  // not narrowed by the umask: clients of other users reach ipc sockets
    slot = dir;
    return slot;
  }
  const ServerOptions& o_;
  std::string data_, ipc_;
};

// A session that outlives --max-duration ends as on Ctrl-C, then says why.
void arm_watchdog(double after_s) {
  struct sigaction sa {};
  sa.sa_handler = on_watchdog;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  itimerval it{};
  it.it_value.tv_sec = static_cast<time_t>(after_s);
  it.it_value.tv_usec = static_cast<suseconds_t>((after_s - std::floor(after_s)) * 1e6);
  setitimer(ITIMER_REAL, &it, nullptr);
}

// Tells the client why its session ended on this side (a fail frame; the
// client prints it and exits 3). A client that is gone, or frozen with its
// receive buffer full, is told nothing: the session never waits on it here.
void tell_failure(Ctrl& ctrl, const std::string& why) noexcept {
  pollfd out{ctrl.fd(), POLLOUT, 0};
  if (::poll(&out, 1, 0) != 1 || !(out.revents & POLLOUT) || (out.revents & (POLLERR | POLLHUP))) return;
  try {
    ctrl.send(CtrlType::fail, "the server's session ended: " + why);
  } catch (...) {
  }
}

// A client's session forwarded through this host to a server its operator
// lists (serve --hop-to), bounded as every session here. Returns its exit code.
int serve_hop(Ctrl& ctrl, const HopOpening& c, const ServerOptions& o, SessionLog& log) {
  log.experiment = "forward";
  ForwardOptions f;
  try {
    const HopRequest r = decode_hop_request(c.h.hop);
    check_onward(r.to, o.hop_to, o, "--hop-to", "forward");
    if (!r.hop_transport.empty()) entry_for(r.hop_transport);  // an unknown one: refused now
    const std::vector<int> cpus = session_cpus(c.h.cpus.server, o);
    f.to = r.to;
    f.to_transport = log.transport = r.hop_transport;
    f.cpu = cpus.empty() ? -1 : cpus.front();
    f.poll_as_client = true;
    f.token = o.token;
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    return 2;
  }
  if (o.max_duration > 0) arm_watchdog(o.max_duration + kWatchdogGraceS);
  SessionFiles files(o);
  return forward_session(ctrl, c, f, {files.ipc_dir(), [&](const Params& p, const Caps& caps) { check_server_limits(p, caps, o); }});
}

// One session on the server side, in record `rec` of `admission`. Returns the exit code it would have.
int serve_one(Ctrl& ctrl, const ServerOptions& o, const ServerClocks& clocks, Admission& admission, size_t rec,
              uint32_t challenge_delay_ms, SessionLog& log) {
  trace_phase("server", "hello");
  // Nothing is allocated or validated for a client before it is authenticated.
  ctrl.set_timeout_ms(o.handshake_timeout_ms);
  std::string hello;
  try {
    hello = ctrl.recv(CtrlType::hello, "client hello");
  } catch (const Error&) {
    // Connected and closed without a frame: a reachability check (fabmeter
    // mesh's before its pairs, a port scan), not a session that failed.
    if (ctrl.frames_in() != 0 || ctrl.peek() != Ctrl::Peek::closed) throw;
    std::fprintf(stderr, "fabmeter-engine: %s connected and closed without a hello\n", ctrl.remote_addr().c_str());
    return 0;
  }
  if (hello == kProbeHello) {  // fabmeter watch asks whether this serve is up: said as such, nothing else
    std::fprintf(stderr, "fabmeter-engine: %s: a liveness probe\n", ctrl.remote_addr().c_str());
    return 0;
  }
  Hello decoded;
  try {
    decoded = decode_hello(hello);
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    throw;
  }
  if (decoded.version != kProtocolVersion) {
    ctrl.send(CtrlType::refuse, "protocol version mismatch: server speaks " + std::to_string(kProtocolVersion) +
                                    ", client " + std::to_string(decoded.version));
    return 2;
  }
  const std::string server_nonce = o.token.empty() ? std::string() : random_bytes(kNonceBytes);
  for (uint64_t until = Clock::mono_ns() + uint64_t(challenge_delay_ms) * 1000000; Clock::mono_ns() < until;) {
    if (stop_requested()) return 130;
    usleep(20000);
  }
  ctrl.send(CtrlType::challenge, server_nonce);
  if (!o.token.empty()) {
    // A failure is said by the accepting process, as a summary per source (auth_failures.hpp).
    std::string proof;
    try {
      proof = decode_auth(ctrl.recv(CtrlType::auth, "client's proof"));
    } catch (const Error&) {
      admission.auth_failed(rec);
      return 3;
    }
    if (!proof_matches(client_proof(o.token, hello, server_nonce), proof)) {
      admission.auth_failed(rec);
      ctrl.send(CtrlType::fail, "authentication failed (wrong token)");
      return 3;
    }
  }
  // Only now may the client take a session slot: nobody holds one unproven.
  switch (admission.admit(rec, getpid())) {
    case Admission::Admit::session: break;
    case Admission::Admit::busy: ctrl.send(CtrlType::refuse, busy_reason(o)); return 2;
    case Admission::Admit::dropped: return 0;
  }
  if (!decoded.hop.empty()) return serve_hop(ctrl, {hello, decoded, server_nonce}, o, log);
  // From here on the client waits for the welcome while the transport is
  // probed (fi_getinfo, devices): beats tell it this end is alive.
  Heartbeat beat(ctrl);
  const std::string& client_host = decoded.host;
  Params p;
  const TransportEntry* entry = nullptr;
  Caps caps{};
  bool same_host = client_host == host_id();
  const bool relaying = !decoded.relay.empty();
  ToolRequest tool;
  std::string tool_binary;
  std::vector<int> cpus;  // this end's: the session's, or the relayed run's
  try {
    if (!decoded.tool.empty()) {  // nothing of the experiment runs: the parameters are the defaults
      tool = decode_tool_request(decoded.tool);
      tool_binary = check_tool(tool, o);
    }
    p = decode_params(decoded.params);
    log.experiment = tool_binary.empty() ? p.experiment : tool.tool;
    log.transport = tool_binary.empty() ? p.transport : tool.proto;
    validate_run(p);
    set_reported_percentiles(p.percentiles);
    entry = &entry_for(p.transport);
    caps = entry->caps(p);
    // A relay's run is a client here: as `run` checks it (the run checks the rest against its server).
    check_against_caps(p, caps, relaying || same_host);
    check_server_limits(p, caps, o);
    if (relaying) check_relay(decoded.relay, p, o);
    cpus = session_cpus(relaying ? decoded.cpus.client : decoded.cpus.server, o);
    // A relayed run checks its --cpu against what it may run on: all of them.
    if (relaying) allow_cpus(cpus);
    else pin_to_cpu(cpus.empty() ? -1 : cpus.front());
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    return 2;
  }
  if (!tool_binary.empty() && o.max_duration > 0) arm_watchdog(o.max_duration + kWatchdogGraceS);
  const int own_cpu = cpus.empty() ? -1 : cpus.front();
  // The welcome: with a token, every frame after it is authenticated.
  const auto welcome = [&](const Clock& clk) {
    const std::string body =
        host_id() + "\n" + engine_env(clk, own_cpu, fabric_where(p, ctrl, own_cpu)).add("memlock", memlock()).str();
    if (o.token.empty())
      ctrl.send(CtrlType::welcome, encode_welcome("", body));
    else
      ctrl.send_then_authenticate(CtrlType::welcome, encode_welcome(server_proof(o.token, hello, server_nonce, body), body),
                                  session_key(o.token, hello, server_nonce, body), true);
  };
  if (!tool_binary.empty()) {
    welcome(clocks.of(p));
    return serve_tool(ctrl, tool, tool_binary, o);
  }
  SessionFiles files(o);
  try {
    if (!relaying) files.claim(p, ctrl);
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    return e.kind == ErrorKind::usage ? 2 : 3;
  }
  if (o.max_duration > 0) arm_watchdog(o.max_duration + kWatchdogGraceS);
  ctrl.set_timeout_ms(p.timeout_ms);
  const Clock& clk = clocks.of(p);
  welcome(clk);
  // From here on the client waits on this end: whatever ends the session
  // goes to it with the reason, not as a bare close.
  try {
    if (relaying) return serve_relay(ctrl, p, decoded.relay, {cpus, decoded.cpus.server}, o);
    Ctx ctx{p, clk, ctrl, Role::server, caps, same_host, {}, {}};
    ctx.spin_ticks = clk.ns_to_ticks(p.spin_us * 1e3);
    ctx.cpus = cpus;
    ctx.own_cpu = own_cpu;
    Status st;
    try {
      st = entry->points(p, ctx, "", nullptr);
    } catch (const Error&) {
      if (!g_overtime) throw;
      st = Status::interrupted;
    }
    if (g_overtime) {
      const std::string why = "the server ended the session: it ran longer than the server's --max-duration of " +
                              seconds(o.max_duration) + " (+" + seconds(kWatchdogGraceS) + " for set-up)";
      try {
        ctrl.send(CtrlType::refuse, why);
      } catch (const Error&) {
      }
      std::fprintf(stderr, "fabmeter-engine: session ended: %s\n", why.c_str());
      return 3;
    }
    if (st == Status::ok) {
      ctrl.recv(CtrlType::bye, "end of session");
      return 0;
    }
    const std::string why = std::string(status_name(st)) + (ctx.failure.empty() ? "" : ": ") + ctx.failure;
    tell_failure(ctrl, why);
    std::fprintf(stderr, "fabmeter-engine: session ended: %s\n", why.c_str());
    return exit_code(st);
  } catch (const std::exception& e) {
    tell_failure(ctrl, e.what());
    throw;
  }
}

}  // namespace

std::vector<int> session_cpus(const std::vector<int>& asked, const ServerOptions& o) {
  if (asked.empty()) return o.cpus;
  const std::vector<int>& allowed = o.cpus.empty() ? usable_cpus() : o.cpus;
  for (int c : asked)
    if (std::find(allowed.begin(), allowed.end(), c) == allowed.end())
      usage_error("CPU " + std::to_string(c) + " is not one this serve gives its sessions (" +
                  (o.cpus.empty() ? "it may run on " : "its --cpu: ") + cpu_list_text(allowed) + ")");
  return asked;
}

std::string busy_reason(const ServerOptions& o) {
  return o.once ? std::string("busy: the server's one session (--once) is running")
                : "busy: " + std::to_string(o.max_sessions) + " sessions running (the server's --max-sessions)";
}

// A session child: dies with the server, serves one connection, exits.
[[noreturn]] void session_child(Ctrl ctrl, const ServerOptions& o, const ServerClocks& clocks, Admission& admission,
                                size_t rec, pid_t server, uint32_t challenge_delay_ms) {
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != server) _exit(130);  // the server died before the line above
  int rc;
  SessionLog log{ctrl.remote_addr(), Clock::mono_ns(), "", ""};
  try {
    rc = serve_one(ctrl, o, clocks, admission, rec, challenge_delay_ms, log);
  } catch (const Error& e) {
    std::fprintf(stderr, "fabmeter-engine: session failed: %s\n", e.what());
    rc = static_cast<int>(e.kind);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fabmeter-engine: session failed: %s\n", e.what());
    rc = 3;
  }
  if (g_stop_signal && !g_overtime && rc != 0) rc = 130;
  log.print(rc, o.log_format);
  ctrl.close_draining(kCloseDrainMs);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(rc);
}

ServerCost server_cost(const Params& p, const Caps& caps) {
  // In double: a client's numbers may be anything up to 2^64, and an
  // estimate must not wrap around to something small.
  const ExperimentEntry& experiment = experiment_for(p.experiment);
  const TransportEntry& transport = entry_for(p.transport);
  ServerCost cost{0, 0};
  for (const Point& pt : experiment.plan(p, caps)) {
    const double size = static_cast<double>(pt.largest());
    // Payload buffers, a socket transport's receive buffer, and the transport's rings or queues.
    double bytes = 4 * size + transport.queued_bytes(p, pt.largest());
    bytes *= experiment.connections(p);
    const PointCost own = experiment.cost(p, caps, pt);
    cost.memory_bytes = std::max(cost.memory_bytes, bytes + own.memory_bytes);
    cost.min_seconds += own.seconds;
  }
  return cost;
}

void check_server_limits(const Params& p, const Caps& caps, const ServerOptions& o) {
  const ServerCost cost = server_cost(p, caps);
  if (o.max_memory && cost.memory_bytes > static_cast<double>(o.max_memory))
    usage_error("this plan needs about " + mib(cost.memory_bytes) + " on the server, over its --max-memory of " +
                mib(static_cast<double>(o.max_memory)) + " (fewer iterations, --count or --bursts, smaller --size or --rq-depth)");
  if (o.max_duration > 0 && cost.min_seconds > o.max_duration)
    usage_error("this plan runs at least " + seconds(cost.min_seconds) + ", over the server's --max-duration of " +
                seconds(o.max_duration));
}

}  // namespace fm
