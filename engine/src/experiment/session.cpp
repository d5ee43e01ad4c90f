#include "fabmeter/session.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "experiment/admission.hpp"
#include "experiment/common.hpp"
#include "experiment/registry.hpp"
#include "experiment/relay.hpp"
#include "experiment/run_points.hpp"
#include "experiment/table.hpp"
#include "experiment/tool_server.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/peer_parse.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/stats.hpp"
#include "fabmeter/trace.hpp"
#include "transport/msg/messaging.hpp"

namespace fm {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::ctrl_pending: return "ctrl_pending";
    case Status::timeout: return "timeout";
    case Status::peer_lost: return "peer_lost";
    case Status::interrupted: return "interrupted";
    case Status::failed: return "failed";
  }
  return "failed";
}

namespace {

int exit_code(Status s) {
  if (s == Status::ok) return 0;
  if (s == Status::interrupted) return 130;
  return 3;
}

// The largest control frame the client may receive in the session: the
// experiment's per-point reports (one-way stamps). The server receives only
// small blobs (addresses, counts) and keeps kMaxFrameDefault.
uint64_t session_max_frame(const Params& p, const ExperimentEntry& e, const std::vector<Point>& plan) {
  uint64_t most = kMaxFrameDefault;
  for (const Point& pt : plan) most = std::max(most, e.report_bytes(p, pt));
  return most;
}

// Checks that need the transport's capabilities; both ends run them.
void check_against_caps(const Params& p, const Caps& caps, bool same_host) {
  if (caps.one_sided && !experiment_for(p.experiment).one_sided)
    usage_error("--op " + p.rdma.op + " is one-sided (the server's CPU never sees it): it runs lat and bw, not " +
                p.experiment);
  if (caps.busy_only && p.poll == Poll::event) usage_error(std::string("--poll event: ") + caps.busy_only);
  if (caps.fixed_msg_size)
    for (uint64_t size : sizes_for(p, UINT64_MAX))
      if (size != caps.fixed_msg_size)
        usage_error("--op " + p.rdma.op + " moves exactly " + std::to_string(caps.fixed_msg_size) + " B: give -s " +
                    std::to_string(caps.fixed_msg_size) + " (not " + std::to_string(size) + ")");
  experiment_for(p.experiment).check_caps(p, caps);
  if (const uint32_t n = experiment_for(p.experiment).connections(p); n > 1 && caps.one_connection)
    usage_error(p.transport + ": " + std::to_string(n) + " connections asked (--flows, --conns): " + caps.one_connection);
  if (caps.same_host_only && !same_host)
    usage_error(p.transport + ": both ends must run on the same host (they share memory)");
}

// Where this end's fabric is: the control connection's local address, the
// RDMA device the options name, and what the transport's library can add.
FabricWhere fabric_where(const Params& p, const Ctrl& ctrl, int cpu) {
  return {ctrl.local_addr(), p.transport, p.verbs.device, p.verbs.port, p.verbs.gid_index, cpu,
          entry_for(p.transport).port_facts};
}

void write_status_line(Status st, const std::string& msg) {
  JsonObj end;
  end.add("type", "end").add("status", st == Status::ok ? "ok" : st == Status::interrupted ? "interrupted" : "failed");
  if (!msg.empty()) end.add("message", msg);
  emit_line(end);
}

}  // namespace

// The client's side of the opening (handshake.hpp): hello, proof, welcome.
// `relay`: the server is asked to run the client against that server (relay.hpp);
// `tool`: to start a peer tool's server side (tool_server.hpp).
Welcome open_session(Ctrl& ctrl, const Params& p, const ClientOptions& o, const std::string& me,
                     const std::string& relay, const std::string& tool = "") {
  trace_phase("client", "hello");
  const std::string hello = encode_hello(me, random_bytes(kNonceBytes), relay, tool, encode_params(p));
  ctrl.send(CtrlType::hello, hello);
  // A server answers a hello at once and beats from its proof on (serve_one):
  // one frozen in the handshake is noticed like one frozen later.
  ctrl.expect_heartbeats(kSilenceMs);
  const std::string server_nonce = decode_challenge(ctrl.recv(CtrlType::challenge, "server's answer to hello"));
  if (!server_nonce.empty()) {
    if (o.token.empty())
      runtime_error("authentication failed: the server requires a token (--token-file F or FABMETER_TOKEN)");
    ctrl.send(CtrlType::auth, client_proof(o.token, hello, server_nonce));
  } else if (!o.token.empty()) {
    // Else anyone in the middle could strip the challenge and speak for the server.
    runtime_error("authentication failed: the server at " + (relay.empty() ? o.server : o.via) +
                  " asks for no token, so it cannot prove it is the server (give it the token, or run without one)");
  }
  Welcome welcome = decode_welcome(ctrl.recv(CtrlType::welcome, "server's welcome"));
  if (server_nonce.empty() ? !welcome.mac.empty()
                           : !proof_matches(server_proof(o.token, hello, server_nonce, welcome.body), welcome.mac))
    runtime_error("authentication failed: the server did not prove it knows the token");
  return welcome;
}

int run_tool(const std::string& request, const ClientOptions& o) {
  // Sent as one line, as the library writes it; the server checks what it asks for.
  const nlohmann::json j = nlohmann::json::parse(request, nullptr, false);
  if (j.is_discarded() || !j.is_object()) usage_error("--request: expected a JSON object, got '" + request + "'");
  const std::string line = j.dump();
  if (line.size() > kMaxToolLine) usage_error("--request: at most " + std::to_string(kMaxToolLine) + " bytes");
  Params p;  // sent as every hello carries them; a tool session runs none of them
  p.experiment = kExperimentTable.front().name;  // any: the session runs none
  Ctrl ctrl = Ctrl::connect(o.server, kDefaultPort, p.timeout_ms);
  open_session(ctrl, p, o, host_id(), "", line);
  return run_tool_client(ctrl);
}

// The server's --cpu from its welcome's environment (untrusted: -1 unless a CPU number).
static int peer_cpu_of(const std::string& env) {
  const nlohmann::json j = nlohmann::json::parse(env, nullptr, false);
  if (!j.is_object() || !j.contains("cpu") || !j["cpu"].is_number_integer()) return -1;
  const int64_t cpu = j["cpu"].get<int64_t>();
  return cpu >= 0 && cpu < CPU_SETSIZE ? static_cast<int>(cpu) : -1;
}

int run_client(const Params& requested, const ClientOptions& o) {
  validate_run(requested);
  set_reported_percentiles(requested.percentiles);
  const TransportEntry& entry = entry_for(requested.transport);
  Caps caps = entry.caps(requested);
  Params p = requested;
  experiment_for(p.experiment).resolve(p, caps);
  check_against_caps(p, caps, true);
  if (o.dry_run) return 0;
  if (!o.via.empty()) {  // the run happens on the relay host: nothing of it is here
    if (o.cpu >= 0) usage_error("--via: the relay host pins its run itself (its serve --cpu); run without --cpu");
    Ctrl ctrl = Ctrl::connect(o.via, kDefaultPort, p.timeout_ms);
    open_session(ctrl, p, o, host_id(), o.server);
    return run_relayed(ctrl, o);
  }
  if (!o.out_dir.empty() && mkdir(o.out_dir.c_str(), 0755) != 0 && errno != EEXIST)
    sys_error("cannot create " + o.out_dir);
  pin_to_cpu(o.cpu);
  Clock clk(p.clock == "tsc", o.cpu >= 0 && experiment_for(p.experiment).one_cpu_ticks);
  udp_clock_probes_wanted();  // a malformed test hook: exit 2 now, not at the first probe
  Ctrl ctrl = Ctrl::connect(o.server, kDefaultPort, p.timeout_ms);
  const std::string me = host_id();
  const Welcome welcome = open_session(ctrl, p, o, me, "");
  const std::string& server_host = welcome.host;
  const std::string& server_env = welcome.env;
  bool same_host = server_host == me;
  if (caps.same_host_only && !same_host)
    usage_error(p.transport + ": the server runs on another host; shared memory needs both ends on one host");
  const ExperimentEntry& experiment = experiment_for(p.experiment);
  const std::vector<Point> plan = experiment.plan(p, caps);
  ctrl.set_max_frame(session_max_frame(p, experiment, plan));

  Heartbeat beat(ctrl);
  Ctx ctx{p, clk, ctrl, Role::client, caps, same_host, {}, {}};
  ctx.spin_ticks = clk.ns_to_ticks(p.spin_us * 1e3);
  ctx.start_at_ns = o.start_at_ns;
  ctx.cpus = o.cpus;
  ctx.own_cpu = o.cpu;
  ctx.peer_cpu = peer_cpu_of(server_env);
  JsonObj transport_info;
  Status st;
  std::string msg;
  JsonObj start;
  start.add("type", "start").add("version", kEngineVersion).add("points", static_cast<uint64_t>(plan.size()))
      .add("env", engine_env(clk, o.cpu, fabric_where(p, ctrl, o.cpu)))
      .add_raw("server_env", server_env).add("same_host", same_host).add_raw("params", params_json(p));
  emit_line(start);
  try {
    st = entry.points(p, ctx, o.out_dir, &transport_info);
    msg = ctx.failure;
    if (st == Status::ok) ctrl.say_bye();
  } catch (const Error& e) {
    if (e.kind == ErrorKind::usage) throw;
    st = Status::failed;
    msg = e.what();
  }
  if (st == Status::interrupted && msg.empty()) msg = "interrupted";
  if (ctx.sync.probed) emit_line(JsonObj().add("type", "clock").add("clock", ctx.sync.json()));  // the whole run's fit
  JsonObj tinfo;
  tinfo.add("type", "transport").add("transport", p.transport).add("granted", transport_info);
  emit_line(tinfo);
  write_status_line(st, msg);
  if (st != Status::ok && st != Status::interrupted)
    std::fprintf(stderr, "fabmeter-engine: error: %s\n", msg.empty() ? status_name(st) : msg.c_str());
  return exit_code(st);
}

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
constexpr double kWatchdogGraceS = 2;       // set-up and result exchange beyond --max-duration
constexpr double kKillGraceS = 5;           // then the parent kills a session that did not end
constexpr double kStopWaitS = 3;            // on Ctrl-C/SIGTERM: how long sessions get to end cleanly
// shm, verbs and ofi cut their rings to about this many bytes per direction for big messages.
constexpr double kRingCap = 256.0 * (1 << 20);

volatile std::sig_atomic_t g_overtime = 0;
void on_watchdog(int) {
  g_overtime = 1;
  g_stop_signal = 1;  // every loop ends as on Ctrl-C; the session then says why
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MiB", std::ceil(bytes / (1 << 20)));
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g s", s);
  return buf;
}

// Whether the transport reads an option group (its registry line says so).
bool reads(const std::string& transport, std::string_view group) {
  for (const TransportDecl& t : declared_transports())
    if (transport == t.name) return in_list(t.groups, group);
  return false;
}

// The names in the directory open at `fd`, without "." and "..".
std::vector<std::string> entries(int fd) {
  std::vector<std::string> names;
  const int own = ::dup(fd);  // fdopendir takes its descriptor
  DIR* listing = own >= 0 ? fdopendir(own) : nullptr;
  if (!listing) {
    if (own >= 0) ::close(own);
    return names;
  }
  rewinddir(listing);  // the offset is shared with `fd`
  while (dirent* entry = readdir(listing))
    if (std::string_view(entry->d_name) != "." && std::string_view(entry->d_name) != "..")
      names.emplace_back(entry->d_name);
  closedir(listing);
  return names;
}

void remove_tree(int at, const char* name, int depth);

// Removes what is in the directory open at `fd`: files, and subdirectories
// `depth` levels deep. A symbolic link is removed, never followed.
void empty_dir(int fd, int depth) {
  for (const std::string& name : entries(fd))
    if (unlinkat(fd, name.c_str(), 0) != 0 && errno == EISDIR && depth > 0) remove_tree(fd, name.c_str(), depth - 1);
}

// Removes directory `name` (relative to `at`) and what is in it, as empty_dir.
// Absent, or a symbolic link, is left alone.
void remove_tree(int at, const char* name, int depth) {
  const int fd = ::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  empty_dir(fd, depth);
  ::close(fd);
  unlinkat(at, name, AT_REMOVEDIR);
}

// Removes a directory the server made and the files it made in it (no
// subdirectories are ever made there). Absent is fine.
void remove_own_dir(const std::string& dir) { remove_tree(AT_FDCWD, dir.c_str(), 0); }

std::string session_data_dir(const ServerOptions& o, pid_t pid) { return o.data_dir + "/session-" + std::to_string(pid); }
std::string session_ipc_dir(const ServerOptions& o, pid_t pid) { return o.ipc_root + "/" + std::to_string(pid); }

// What a session child leaves if it is killed: its directories and shared
// memory segments ("/fabmeter-PID-N", made by its shm transport; only ours).
void clean_after(const ServerOptions& o, pid_t pid) {
  remove_own_dir(session_data_dir(o, pid));
  remove_own_dir(session_ipc_dir(o, pid));
  const std::string prefix = "fabmeter-" + std::to_string(pid) + "-";
  if (DIR* listing = opendir("/dev/shm")) {
    while (dirent* entry = readdir(listing)) {
      struct stat st {};
      if (std::string_view(entry->d_name).rfind(prefix, 0) == 0 &&
          fstatat(dirfd(listing), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == geteuid())
        shm_unlink(("/" + std::string(entry->d_name)).c_str());
    }
    closedir(listing);
  }
}

// One session's own names on the server: a 0700 data subdirectory (a file
// sink writes there) and a 0711 directory for its ipc socket. The client's
// --sink file:PATH and --endpoint ipc://... are replaced by these before
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
    p.messaging.endpoint = msg::server_endpoint(p.transport, p.messaging.endpoint, ctrl.local_addr(), [&] {
      return make(ipc_, session_ipc_dir(o_, getpid()), 0711) + "/" + p.transport + ".sock";
    });
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

// The server's clocks, calibrated once before it listens (a session's hello
// is answered at once); tsc_cpu only where the TSC is not invariant and the
// server is pinned (Clock).
struct ServerClocks {
  Clock tsc{true}, mono{false};
  std::optional<Clock> tsc_cpu;
  explicit ServerClocks(int cpu) {
    if (!tsc.reads_tsc() && cpu >= 0) tsc_cpu.emplace(true, true);
  }
  // Both ends must read the same clock for one-way stamps: the client's choice.
  const Clock& of(const Params& p) const {
    if (p.clock != "tsc") return mono;
    return tsc_cpu && experiment_for(p.experiment).one_cpu_ticks ? *tsc_cpu : tsc;
  }
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

// The refusal for a client that finds every session slot taken.
std::string busy_reason(const ServerOptions& o) {
  return o.once ? std::string("busy: the server's one session (--once) is running")
                : "busy: " + std::to_string(o.max_sessions) + " sessions running (the server's --max-sessions)";
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

// One session on the server side, in record `rec` of `admission`. Returns the exit code it would have.
int serve_one(Ctrl& ctrl, const ServerOptions& o, const ServerClocks& clocks, Admission& admission, size_t rec) {
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
    std::fprintf(stderr, "fabmeter-engine: %s connected and closed without a hello\n", ctrl.peer_addr().c_str());
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
  ctrl.send(CtrlType::challenge, server_nonce);
  if (!o.token.empty()) {
    std::string proof;
    try {
      proof = decode_auth(ctrl.recv(CtrlType::auth, "client's proof"));
    } catch (const Error& e) {
      runtime_error("authentication failed: client " + ctrl.peer_addr() + ": " + e.what());
    }
    if (!proof_matches(client_proof(o.token, hello, server_nonce), proof)) {
      ctrl.send(CtrlType::fail, "authentication failed (wrong token)");
      runtime_error("authentication failed: client " + ctrl.peer_addr() + " sent a wrong proof");
    }
  }
  // Only now may the client take a session slot: nobody holds one unproven.
  switch (admission.admit(rec, getpid())) {
    case Admission::Admit::session: break;
    case Admission::Admit::busy: ctrl.send(CtrlType::refuse, busy_reason(o)); return 2;
    case Admission::Admit::dropped: return 0;
  }
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
  try {
    if (!decoded.tool.empty()) {  // nothing of the experiment runs: the parameters are the defaults
      tool = decode_tool_request(decoded.tool);
      tool_binary = check_tool(tool, o);
    }
    p = decode_params(decoded.params);
    validate_run(p);
    set_reported_percentiles(p.percentiles);
    entry = &entry_for(p.transport);
    caps = entry->caps(p);
    // A relay's run is a client here: as `run` checks it (the run checks the rest against its server).
    check_against_caps(p, caps, relaying || same_host);
    check_server_limits(p, caps, o);
    if (relaying) check_relay(decoded.relay, p, o);
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    return 2;
  }
  if (!tool_binary.empty() && o.max_duration > 0) arm_watchdog(o.max_duration + kWatchdogGraceS);
  if (!tool_binary.empty()) {
    const std::string body = host_id() + "\n" + engine_env(clocks.of(p), o.cpu, fabric_where(p, ctrl, o.cpu)).str();
    ctrl.send(CtrlType::welcome,
              encode_welcome(o.token.empty() ? std::string() : server_proof(o.token, hello, server_nonce, body), body));
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
  const std::string body = host_id() + "\n" + engine_env(clk, o.cpu, fabric_where(p, ctrl, o.cpu)).str();
  ctrl.send(CtrlType::welcome,
            encode_welcome(o.token.empty() ? std::string() : server_proof(o.token, hello, server_nonce, body), body));
  // From here on the client waits on this end: whatever ends the session
  // goes to it with the reason, not as a bare close.
  try {
    if (relaying) return serve_relay(ctrl, p, decoded.relay, o);
    Ctx ctx{p, clk, ctrl, Role::server, caps, same_host, {}, {}};
    ctx.spin_ticks = clk.ns_to_ticks(p.spin_us * 1e3);
    ctx.cpus = o.cpus;
    ctx.own_cpu = o.cpu;
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

// A session child: dies with the server, serves one connection, exits.
[[noreturn]] void session_child(Ctrl ctrl, const ServerOptions& o, const ServerClocks& clocks, Admission& admission,
                                size_t rec, pid_t server) {
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != server) _exit(130);  // the server died before the line above
  int rc;
  try {
    rc = serve_one(ctrl, o, clocks, admission, rec);
  } catch (const Error& e) {
    std::fprintf(stderr, "fabmeter-engine: session failed: %s\n", e.what());
    rc = static_cast<int>(e.kind);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fabmeter-engine: session failed: %s\n", e.what());
    rc = 3;
  }
  if (g_stop_signal && !g_overtime && rc != 0) rc = 130;
  ctrl.close_draining(kCloseDrainMs);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(rc);
}

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
  void started(pid_t pid, size_t rec) { kids_.push_back({pid, Clock::mono_ns(), rec}); }

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
    const bool session = admission_.release(k->rec, pid);
    kids_.erase(k);
    clean_after(o_, pid);
    return session ? child_code(status) : -1;
  }

  const ServerOptions& o_;
  Admission admission_;
  std::vector<Child> kids_;
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
      std::fprintf(stderr, "fabmeter-engine: %s %s%s\n", waiting_.front().ctrl.peer_addr().c_str(), why.c_str(),
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

// A server's private directories in $TMPDIR carry its pid, so that a later
// server can tell whether their owner is gone: PREFIX PID-XXXXXX (mkdtemp).
constexpr std::string_view kDataPrefix = "fabmeter-data-", kIpcPrefix = "fabmeter-ipc-";
constexpr size_t kTempSuffix = 7;  // "-XXXXXX"

std::optional<pid_t> pid_of(std::string_view digits) {
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return std::nullopt;
  return pid;
}

// The server pid in the name of a server's private directory; none for any other name.
std::optional<pid_t> temp_dir_owner(std::string_view name) {
  for (std::string_view prefix : {kDataPrefix, kIpcPrefix}) {
    if (!name.starts_with(prefix) || name.size() <= prefix.size() + kTempSuffix) continue;
    const std::string_view suffix = name.substr(name.size() - kTempSuffix);
    if (suffix[0] != '-' || !std::all_of(suffix.begin() + 1, suffix.end(), [](unsigned char c) { return std::isalnum(c) != 0; }))
      return std::nullopt;
    return pid_of(name.substr(prefix.size(), name.size() - prefix.size() - kTempSuffix));
  }
  return std::nullopt;
}

// The session pid in the name of a session's directory: "session-PID" (data) or "PID" (ipc).
std::optional<pid_t> session_dir_pid(std::string_view name) {
  constexpr std::string_view prefix = "session-";
  return pid_of(name.starts_with(prefix) ? name.substr(prefix.size()) : name);
}

// The program name of a process that runs ("" for one that is gone or a
// zombie): "PID (COMM) STATE ..." in /proc/PID/stat.
std::string running_comm(const std::string& proc) {
  std::ifstream f("/proc/" + proc + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open || close + 2 >= stat.size()) return "";
  const char state = stat[close + 2];
  return state == 'Z' || state == 'X' ? "" : stat.substr(open + 1, close - open - 1);
}

// Whether `pid` is a live engine like this one (a server or its session). A
// pid since reused by another program is not; without /proc every pid is, so
// nothing is removed on a guess.
bool engine_alive(pid_t pid) { return running_comm(std::to_string(pid)) == running_comm("self"); }

// Removes what servers killed without cleaning up (SIGKILL) left in `base`:
// private directories of theirs (by name; real directories, of our user)
// whose server is no live engine any more, nor any session named in them.
void remove_stale_dirs(const std::string& base) {
  const int at = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return;
  for (const std::string& name : entries(at)) {
    const std::optional<pid_t> owner = temp_dir_owner(name);
    if (!owner || engine_alive(*owner)) continue;
    const int fd = ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    const std::vector<std::string> sessions = entries(fd);
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && std::none_of(sessions.begin(), sessions.end(), [](const std::string& s) {
          const std::optional<pid_t> pid = session_dir_pid(s);
          return pid && engine_alive(*pid);
        })) {
      empty_dir(fd, 1);
      unlinkat(at, name.c_str(), AT_REMOVEDIR);
    }
    ::close(fd);
  }
  ::close(at);
}

// The server's own places: --data-dir (made if missing), else a private
// temporary one, removed at exit if empty; and the ipc root, always private.
// Dead servers' private directories are removed first.
class ServerDirs {
 public:
  explicit ServerDirs(ServerOptions& o) {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp ? tmp : "/tmp";
    remove_stale_dirs(base);
    const std::string mine = std::to_string(getpid()) + "-XXXXXX";
    if (o.data_dir.empty()) {
      own_data_ = make_temp(base + "/" + std::string(kDataPrefix) + mine, 0700);
      o.data_dir = own_data_;
    } else {
      if (::mkdir(o.data_dir.c_str(), 0700) != 0 && errno != EEXIST) sys_error("--data-dir: cannot create " + o.data_dir);
      char* real = realpath(o.data_dir.c_str(), nullptr);
      if (!real) sys_error("--data-dir: " + o.data_dir);
      o.data_dir = real;
      std::free(real);
    }
    // Clients of other users must reach the ipc sockets inside: search, no listing.
    ipc_root_ = make_temp(base + "/" + std::string(kIpcPrefix) + mine, 0711);
    o.ipc_root = ipc_root_;
  }
  ~ServerDirs() {
    ::rmdir(ipc_root_.c_str());
    if (!own_data_.empty()) ::rmdir(own_data_.c_str());  // only if empty
  }
  ServerDirs(const ServerDirs&) = delete;

 private:
  static std::string make_temp(std::string pattern, mode_t mode) {
    if (!mkdtemp(pattern.data())) sys_error("cannot create a private directory " + pattern);
    ::chmod(pattern.c_str(), mode);
    return pattern;
  }
  std::string own_data_, ipc_root_;
};

}  // namespace

ServerCost server_cost(const Params& p, const Caps& caps) {
  // In double: a client's numbers may be anything up to 2^64, and an
  // estimate must not wrap around to something small.
  const ExperimentEntry& experiment = experiment_for(p.experiment);
  ServerCost cost{0, 0};
  for (const Point& pt : experiment.plan(p, caps)) {
    const double size = static_cast<double>(pt.largest());
    double bytes = 4 * size;  // payload buffers, a socket transport's receive buffer
    if (reads(p.transport, QueueOptions::kGroup))  // receive and send rings
      bytes += 2 * std::min(static_cast<double>(p.queue.rq_depth) * size, std::max(2 * size, kRingCap));
    if (reads(p.transport, MessagingOptions::kGroup)) bytes += 2 * msg::queue_depth(pt.largest()) * size;  // the library's queues
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
      session_child(std::move(ctrl), o, clocks, kids.admission(), *rec, me);
    }
    kids.started(pid, *rec);
  };
  // The accepting loop only accepts, forks and reaps: it never reads from a
  // client and never waits for a session.
  for (;;) {
    const int rc = kids.reap();
    if (o.once && rc >= 0) {
      kids.stop();  // connections still in their handshake
      return rc;
    }
    if (stop_requested()) {
      kids.stop();
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
