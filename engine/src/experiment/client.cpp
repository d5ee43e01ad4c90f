// The client's side of a session: the opening, the run of its points (or
// of a run relayed through another host's serve, or of a peer tool's
// server side there), and what it prints.
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiment/common.hpp"
#include "experiment/registry.hpp"
#include "experiment/relay.hpp"
#include "experiment/run_points.hpp"
#include "experiment/session_common.hpp"
#include "experiment/table.hpp"
#include "experiment/tool_server.hpp"
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

void write_status_line(Status st, const std::string& msg) {
  JsonObj end;
  end.add("type", "end").add("status", st == Status::ok ? "ok" : st == Status::interrupted ? "interrupted" : "failed");
  if (!msg.empty()) end.add("message", msg);
  emit_line(end);
}

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

// The server's --cpu from its welcome's environment (untrusted: -1 unless a CPU number).
int peer_cpu_of(const std::string& env) {
  const nlohmann::json j = nlohmann::json::parse(env, nullptr, false);
  if (!j.is_object() || !j.contains("cpu") || !j["cpu"].is_number_integer()) return -1;
  const int64_t cpu = j["cpu"].get<int64_t>();
  return cpu >= 0 && cpu < CPU_SETSIZE ? static_cast<int>(cpu) : -1;
}

}  // namespace

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

}  // namespace fm
