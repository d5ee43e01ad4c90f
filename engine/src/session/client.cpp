// The client's side of a session: the opening, the run of its points (or
// of a run relayed through another host's serve, or of a peer tool's
// server side there), and what it prints.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiment/common.hpp"
#include "session/registry.hpp"
#include "session/forward.hpp"
#include "session/relay.hpp"
#include "experiment/run_points.hpp"
#include "session/session_common.hpp"
#include "experiment/table.hpp"
#include "session/tool_server.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/session.hpp"
#include "fabmeter/stats.hpp"
#include "fabmeter/trace.hpp"

namespace fm {

namespace {

// The largest control frame the client may receive in the session: the
// experiment's per-point reports (one-way stamps). The server receives only
// small blobs (addresses, counts) and keeps kMaxFrameDefault.
uint64_t session_max_frame(const Params& p, const ExperimentEntry& e, const std::vector<Point>& plan) {
  uint64_t most = kMaxFrameDefault;
  for (const Point& pt : plan) most = std::max(most, e.report_bytes(p, pt));
  return most;
}

// `code` >= 0 (a series' run): the exit code the run would have had alone.
void write_status_line(Status st, const std::string& msg, int code = -1) {
  JsonObj end;
  end.add("type", "end").add("status", st == Status::ok ? "ok" : st == Status::interrupted ? "interrupted" : "failed");
  if (!msg.empty()) end.add("message", msg);
  if (code >= 0) end.add("code", static_cast<uint64_t>(code));
  emit_line(end);
}

// The server's --cpu from its welcome's environment (untrusted: -1 unless a CPU number).
int server_cpu_of(const std::string& env) {
  const nlohmann::json j = nlohmann::json::parse(env, nullptr, false);
  if (!j.is_object() || !j.contains("cpu") || !j["cpu"].is_number_integer()) return -1;
  const int64_t cpu = j["cpu"].get<int64_t>();
  return cpu >= 0 && cpu < CPU_SETSIZE ? static_cast<int>(cpu) : -1;
}

}  // namespace

Welcome open_session(Ctrl& ctrl, const Params& p, const ClientOptions& o, const std::string& me,
                     const std::string& relay, const std::string& tool) {
  trace_phase("client", "hello");
  const SessionCpus cpus{relay.empty() ? std::vector<int>{} : o.cpus, tool.empty() ? o.server_cpus : std::vector<int>{}};
  const std::string hop = o.via_hop.empty() ? "" : encode_hop_request({o.server, o.hop_transport});
  const std::string hello = encode_hello(me, random_bytes(kNonceBytes), relay, tool, cpus, hop, encode_params(p));
  ctrl.send(CtrlType::hello, hello);
  // A fault test tells by this mark whether the server has been sent anything to start a session for.
  trace_phase("client", "hello-sent");
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
    runtime_error("authentication failed: the server at " + (!relay.empty() ? o.via : o.via_hop.empty() ? o.server : o.via_hop) +
                  " asks for no token, so it cannot prove it is the server (give it the token, or run without one)");
  }
  Welcome welcome = decode_welcome(ctrl.recv(CtrlType::welcome, "server's welcome"));
  if (server_nonce.empty() ? !welcome.mac.empty()
                           : !proof_matches(server_proof(o.token, hello, server_nonce, welcome.body), welcome.mac))
    runtime_error("authentication failed: the server did not prove it knows the token");
  if (!server_nonce.empty()) ctrl.authenticate(session_key(o.token, hello, server_nonce, welcome.body), false);
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

namespace {

// What every run of a client needs, prepared once: the options checked
// against the transport, the clock calibrated (a series pays this once).
struct Prepared {
  Params p;
  Caps caps;
  const TransportEntry* entry;
};

Prepared prepare(const Params& requested) {
  validate_run(requested);
  set_reported_percentiles(requested.percentiles);
  const TransportEntry& entry = entry_for(requested.transport);
  Caps caps = entry.caps(requested);
  Params p = requested;
  experiment_for(p.experiment).resolve(p, caps);
  check_against_caps(p, caps, true);
  return {p, caps, &entry};
}

// The SYNs a just-connected TCP socket sent beyond the first (the kernel
// resends a lost SYN, or one whose SYN-ACK was lost, after 1 s or more): 0 if unknown.
uint32_t syn_retransmits(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 ? ti.tcpi_total_retrans : 0;
}

// One session against `server` from this process, its lines printed; the
// exit code it would have as a run of its own. `series`: the end line says
// the code too, and the error line goes out before it (a relay ends the run
// at its end line).
int one_run(const Prepared& prep, const Clock& clk, const ClientOptions& o, const std::string& server_addr,
            int64_t start_at_ns, bool series) {
  const Params& p = prep.p;
  const TransportEntry& entry = *prep.entry;
  StartSteps steps;
  steps.begun = monotonic_ns();
  Ctrl ctrl = Ctrl::connect(o.via_hop.empty() ? server_addr : o.via_hop, kDefaultPort, p.timeout_ms);
  steps.control_connected = monotonic_ns();
  steps.control_syn_retransmits = syn_retransmits(ctrl.fd());
  const std::string me = host_id();
  ClientOptions run_o = o;
  run_o.server = server_addr;
  const Welcome welcome = open_session(ctrl, p, run_o, me, "");
  steps.welcomed = monotonic_ns();
  const std::string& server_host = welcome.host;
  const std::string& server_env = welcome.env;
  bool same_host = server_host == me;
  if (prep.caps.same_host_only && !same_host)
    usage_error(p.transport + ": the server runs on another host; shared memory needs both ends on one host");
  const ExperimentEntry& experiment = experiment_for(p.experiment);
  const std::vector<Point> plan = experiment.plan(p, prep.caps);
  ctrl.set_max_frame(session_max_frame(p, experiment, plan));

  Heartbeat beat(ctrl);
  Ctx ctx{p, clk, ctrl, Role::client, prep.caps, same_host, {}, {}};
  ctx.spin_ticks = clk.ns_to_ticks(p.spin_us * 1e3);
  ctx.start_at_ns = start_at_ns;
  ctx.start_steps = steps;
  ctx.cpus = o.cpus;
  ctx.own_cpu = o.cpu;
  ctx.server_cpu = server_cpu_of(server_env);
  JsonObj transport_info;
  Status st;
  std::string msg;
  JsonObj start;
  start.add("type", "start").add("version", kEngineVersion).add("points", static_cast<uint64_t>(plan.size()))
      .add("env", engine_env(clk, o.cpu, fabric_where(p, ctrl, o.cpu)))
      .add_raw("server_env", server_env).add("same_host", same_host)
      .add("control_channel", ctrl.authenticated() ? "authenticated" : "unauthenticated")
      .add_raw("params", params_json(p));
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
  const bool error_line = st != Status::ok && st != Status::interrupted;
  if (error_line && series) std::fprintf(stderr, "fabmeter-engine: error: %s\n", msg.empty() ? status_name(st) : msg.c_str());
  write_status_line(st, msg, series ? exit_code(st) : -1);
  if (error_line && !series)
    std::fprintf(stderr, "fabmeter-engine: error: %s\n", msg.empty() ? status_name(st) : msg.c_str());
  return exit_code(st);
}

// A series' next run from standard input: "HOST[:PORT] START_NS" (0: no
// --start-at). False at the end of the input.
bool next_series_line(std::string& server, int64_t& start_at_ns) {
  char buf[kMaxSeriesLine + 2];
  if (!std::fgets(buf, sizeof buf, stdin)) return false;
  std::string line(buf);
  if (line.empty() || line.back() != '\n') usage_error("--series: a line longer than " + std::to_string(kMaxSeriesLine) + " bytes");
  line.pop_back();
  const size_t space = line.find(' ');
  if (space == std::string::npos || space == 0)
    usage_error("--series: expected 'HOST[:PORT] START_NS' per line, got '" + line + "'");
  server = line.substr(0, space);
  start_at_ns = parse_start_at(line.substr(space + 1), "--series: the start", true);
  return true;
}

}  // namespace

int64_t parse_start_at(const std::string& v, const std::string& what, bool zero_is_none) {
  constexpr int64_t kMaxStartLeadNs = 600'000'000'000;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (zero_is_none && v == "0") return 0;
  if (v.empty() || *end || errno || x <= 0 || !std::isdigit(static_cast<unsigned char>(v[0])))
    usage_error(what + ": expected CLOCK_MONOTONIC nanoseconds, got '" + v + "'");
  if (x > monotonic_ns() + kMaxStartLeadNs) usage_error(what + ": " + v + " is more than 600 s ahead of CLOCK_MONOTONIC");
  return x;
}

namespace {

// A run here: pinned to --cpu and its clock calibrated (a series pays this once).
void start_here(const Params& p, const ClientOptions& o, std::optional<Clock>& clk) {
  pin_to_cpu(o.cpu);
  clk.emplace(p.clock == "tsc", o.cpu >= 0 && experiment_for(p.experiment).one_cpu_ticks);
  udp_clock_probes_wanted();  // a malformed test hook: exit 2 now, not at the first probe
}

// A session with the relay (--via), its hello asking for a run against
// `server`; beats from here on (the relay kills the run when we fall silent
// or close).
void open_relay(std::optional<Ctrl>& relay, std::optional<Heartbeat>& beat, const Params& p, const ClientOptions& o,
                const std::string& server) {
  relay.emplace(Ctrl::connect(o.via, kDefaultPort, p.timeout_ms));
  open_session(*relay, p, o, host_id(), server);
  beat.emplace(*relay);
}

}  // namespace

int run_client(const Params& requested, const ClientOptions& o) {
  const Prepared prep = prepare(requested);
  const Params& p = prep.p;
  if (o.dry_run) {
    // The run time the plan states, as a server checks it, beside a default
    // serve's --max-duration (suite --dry-run prints both), and the params the
    // run would state (its start line's): the suite compares them with run.json's.
    std::printf("%s\n", JsonObj()
                             .add("planned_s", server_cost(p, prep.caps).min_seconds)
                             .add("serve_max_duration_s", ServerOptions{}.max_duration)
                             .add_raw("params", params_json(p))
                             .str().c_str());
    return 0;
  }
  if (!o.via.empty()) {  // the run happens on the relay host: nothing of it is here
    std::optional<Ctrl> relay;
    std::optional<Heartbeat> beat;
    open_relay(relay, beat, p, o, o.server);
    return run_relayed(*relay, o, false, 1);
  }
  if (!o.out_dir.empty() && mkdir(o.out_dir.c_str(), 0755) != 0 && errno != EEXIST)
    sys_error("cannot create " + o.out_dir);
  std::optional<Clock> clk;
  start_here(p, o, clk);
  return one_run(prep, *clk, o, o.server, o.start_at_ns, false);
}

int run_series(const Params& requested, const ClientOptions& o) {
  const Prepared prep = prepare(requested);
  const Params& p = prep.p;
  if (!o.out_dir.empty()) usage_error("--series: each run would write its samples in the same --out; run them one by one");
  std::optional<Clock> clk;
  if (o.via.empty()) start_here(p, o, clk);
  // Relayed: one session with the relay for every run, opened at the first
  // (its hello names that run's server) and again after one that failed.
  std::optional<Ctrl> relay;
  std::optional<Heartbeat> beat;
  uint32_t relay_runs = 0;
  const auto end_relay = [&] {
    try {
      relay->send(CtrlType::exchange, "done");
      beat.reset();
      relay->say_bye();
    } catch (const Error&) {
    }  // every run has its end line: nothing is lost with the relay gone now
    beat.reset();
    relay.reset();
  };
  std::string server;
  int64_t start_at_ns = 0;
  while (!stop_requested() && next_series_line(server, start_at_ns)) {
    try {
      if (o.via.empty()) {
        one_run(prep, *clk, o, server, start_at_ns, true);
      } else {
        ClientOptions run_o = o;
        run_o.server = server;
        run_o.start_at_ns = start_at_ns;
        if (relay && relay_runs >= kMaxRelayRuns) end_relay();  // the server's limit: a session anew
        if (!relay) {
          relay_runs = 0;
          open_relay(relay, beat, p, run_o, server);
        } else {
          relay->send(CtrlType::exchange, std::string(kRelayNextWord) + server);
        }
        relay->set_timeout_ms(p.timeout_ms);
        run_relayed(*relay, run_o, true, ++relay_runs);
      }
    } catch (const Error& e) {
      // This run failed; the series goes on (a relay session is opened anew).
      beat.reset();
      relay.reset();
      std::fprintf(stderr, "fabmeter-engine: error: %s\n", e.what());
      write_status_line(Status::failed, e.what(), static_cast<int>(e.kind));
    }
  }
  if (stop_requested()) return 130;  // closing the relay session ends its run there
  if (relay) end_relay();
  return 0;
}

}  // namespace fm
