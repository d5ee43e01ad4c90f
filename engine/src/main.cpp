// fabmeter-engine: runs one role of one experiment. The Python CLI drives it;
// it also works alone, perftest-style (`serve` on one host, `run` on another).
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/limits.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/session.hpp"
#include "fabmeter/signals.hpp"
#include "session/forward.hpp"
#include "session/registry.hpp"

namespace {

constexpr const char* kUsage = R"(usage:
  fabmeter-engine run EXPERIMENT --server HOST[:PORT] [--cpu N[+N...]] [--server-cpu N[+N...]]
                      [--out DIR] [--token-file F] [--start-at NS] [--via HOST[:PORT]]
                      [--via-hop HOST[:PORT] [--hop-transport T]] [--dry-run] [OPTIONS]
  fabmeter-engine run EXPERIMENT --series [--cpu N[+N...]] [--server-cpu N[+N...]] [--token-file F] [--via HOST[:PORT]]
                      [OPTIONS]
  fabmeter-engine serve [--bind ADDR] [--port N] [--cpu N[+N...]] [--once] [--token-file F] [--data-dir DIR]
                        [--max-memory BYTES] [--max-duration SEC] [--max-sessions N] [--handshake-timeout-ms MS]
                        [--relay-to HOST,...] [--hop-to HOST,...] [--log-format text|json]
  fabmeter-engine tool --server HOST[:PORT] --request JSON [--token-file F]
  fabmeter-engine forward --to HOST[:PORT] [--to-transport T] [--bind ADDR] [--port N] [--cpu N]
                          [--poll busy|event] [--once] [--token-file F]
  fabmeter-engine limits [--cpus A,B] [-n N] [--sizes S,S,...] [--timer-wakeups N] [--wakeup-round-trips N]
                         [--schedule-rate HZ] [--schedule-steps N] [--connects N]
                         [--hiccups] [--hiccup-cpus A,B,...] [--hiccup-fifo PRIO]
                         [--hiccup-seconds S] [--hiccup-threshold-us US]
  fabmeter-engine options      # the option table as JSON (used by the fabmeter CLI)
  fabmeter-engine transports   # each transport: available, or unavailable and why

Transports: shm, tcp and udp are built in; every other transport is a plugin,
libfabmeter-<name>.so, loaded from the plugin directory when first used: only
from $FABMETER_PLUGIN_DIR (an absolute path) if set, else from plugins/ beside
this binary (a build tree) or ../lib/fabmeter/ from it (an installed tree);
never from the current directory or a path a client names. A plugin that
cannot be loaded (its library missing, another ABI, a corrupt file) leaves
that transport unavailable with the reason; a run naming it exits 2 with it.

EXPERIMENT: one of the experiments `options` lists.

run prints JSON lines on stdout: "start", one "point" per measured point (a
size; stream: a rate x values pair; load: an offered rate), "transport", "end".
--start-at NS: the first point's measured part starts at CLOCK_MONOTONIC NS
(ns since boot; at once if past), however soon the connection was made; its
point line then says when (started_mono_ns, start_late_ns). fabmeter mesh
starts the pairs of a round so. --via HOST[:PORT]: the `serve` there runs
this client (against --server) and sends its output back, the same lines as
if run there (that serve must list the --server host in its --relay-to), and
with --out the raw samples; --cpu then names CPUs of that host. --series: one run after another in
this process (started and its clock calibrated once), each against the
server a line of standard input names, "HOST[:PORT] START_NS" (START_NS as
--start-at; 0: none), each printing its lines as a run would and an "end"
line with the run's exit code ("code"); with --via, every run through one
session with that serve; exit 0 at the end of the input. --via-hop HOST[:PORT]:
the session goes to --server through the forwarding hop there (a `forward`,
or a serve that lists the --server host in its --hop-to), the hop onward on
--hop-transport T (default: the run's; a `forward` takes only its own
--to-transport). --cpu N+M+...: this end's thread on N; with --flows
each flow's thread on the next CPU of the list, round robin. --server-cpu N+M+...: asks the
server's session to run on those CPUs (it refuses, exit 2, any its serve may not give). --dry-run: check the options against the transport
(sizes, modes) as a run would, then exit 0 or 2 with the reason, connecting
to nothing. Exit codes: 0 ok, 2 bad input, 3 the other end lost or failed,
130 interrupted (finished points and the partial one are still printed).

tool asks the serve there to start a peer tool's server side (fabmeter peers
--server): JSON names the tool and its parameters, e.g.
{"tool":"sockperf","proto":"udp"} or {"tool":"ib_send_lat","size":64,"conn":"RC"};
the server builds the command from a fixed table (docs/security.md) and
refuses anything else (exit 2). It prints a "ready" line (the port and the
server's command), keeps the tool running until this process's standard
input closes (or SIGINT/SIGTERM), then prints an "end" line (how the tool
ended, its CPU time) and exits 0 (3: it never listened).

forward is a hop between a client and the serve at --to (default port
{hop_port}): a client runs lat against it (run --server S --via-hop HOP); the hop opens the same session with the server over --to-transport
(default: the client's transport), forwards each message between the
client's transport and that one on one thread (--cpu N; --poll busy spins on
both, event sleeps in the wait of the end a message is expected from) and
relays both sessions' control frames. So the client's figures are those of
client -> hop -> server and back; fabmeter's --via-hop runs the direct path
beside it and reports the difference. It serves one session at a time (each
prints a "hop" line); --once exits after one with its exit code. A relayed
run, a peer tool, --flows, an experiment with more than one message in
flight or the other end's clock, a udp client toward a reliable transport,
--poll event on shm with a busy client, and a busy hop whose host has fewer
CPUs than busy loops (its own, and the client's and server's there) are
refused (exit 2). With a token (as
serve's) the client proves it to the hop and the hop to the server.

serve runs each session in a process of its own (at most --max-sessions, 1 ..
{max_sessions_max}, default {max_sessions}; more are refused with "busy"). A connection takes a session
slot only once the client has authenticated (without a token: sent a valid
hello); until then at most 64 silent connections and 16 handshakes wait apart,
the oldest dropped first. --handshake-timeout-ms MS ({handshake_timeout_ms_min} .. {handshake_timeout_ms_max}, default
{handshake_timeout_ms}): how long a connection has for its first word, then for its hello, then
for its proof; one that stalls longer is dropped. --once exits after one
session, with its exit code; a connection that never became one is none.
SIGINT, SIGTERM and SIGHUP end serve cleanly (exit 130); at start it removes
what killed servers left in $TMPDIR (docs/security.md).
Nothing a client sends names a path on the server: a stream's file sink is
written in one fresh 0700 subdirectory per session under --data-dir (default:
a private temporary directory, removed at exit if empty) and sent back; ipc://
sockets are made in a private directory. A plan is refused before anything is
allocated if it needs more than --max-memory (default: a quarter of MemTotal;
K/M/G/T suffixes) or states a run longer than --max-duration (default {max_duration} s;
0: no limit), which a watchdog also enforces.
--token-file F (or $FABMETER_TOKEN; the file wins): the shared secret, at
least 16 bytes, in a file other users cannot read. A server with a token
admits only clients that prove they know it (HMAC-SHA-256 challenge-response;
the secret never crosses the wire), and proves it to them in turn.
--relay-to HOST,...: the servers (hosts as clients name them, any port) this one
may run a client against when an authenticated client asks (run --via,
fabmeter mesh --launch serve); it proves its own token to them. Without
--relay-to, or without a token, it runs no client for anyone.
--hop-to HOST,...: the servers (hosts as clients name them, any port) to which
this one forwards an authenticated client's session as a hop (run --via-hop;
the hop as `forward`'s, a session within the limits above, waiting as the
client's --poll says); it proves its own token to them. Without --hop-to, or
without a token, it forwards for no one.
--log-format text|json: each session's line on stderr when it ends (client
address, experiment, transport, outcome, duration): text (default) or one JSON
object. The "listening" line on stdout is JSON either way.
)";

// serve's defaults and bounds (ServerOptions and its constants, session.hpp), by name: kUsage's {name}s, and
// `options`'s "serve", which fabmeter serve's help and the docs are held to (tests/test_serve_defaults.py).
std::vector<std::pair<std::string, uint64_t>> serve_limits() {
  const fm::ServerOptions d;
  return {{"max_sessions", d.max_sessions},
          {"max_sessions_max", fm::kMaxSessions},
          {"handshake_timeout_ms", d.handshake_timeout_ms},
          {"handshake_timeout_ms_min", fm::kMinHandshakeTimeoutMs},
          {"handshake_timeout_ms_max", fm::kMaxHandshakeTimeoutMs},
          {"max_duration", static_cast<uint64_t>(d.max_duration)}};
}

std::string usage() {
  std::string text = kUsage;
  for (const auto& [name, value] : serve_limits()) {
    const std::string key = "{" + name + "}", word = std::to_string(value);
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + word.size()))
      text.replace(at, key.size(), word);
  }
  text.replace(text.find("{hop_port}"), 10, std::to_string(fm::kDefaultHopPort));
  return text;
}

int parse_int(const std::string& opt, const std::string& v) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || x < 0 || x > 1'000'000'000) fm::usage_error(opt + ": expected a non-negative integer, got '" + v + "'");
  return static_cast<int>(x);
}

// --cpu N or N+M+... (`opt`): the end's thread on the first, --flows'
// threads dealt over all of them in turn; `here`: each one this process may
// run on (another host's CPUs are checked there).
std::vector<int> cpu_option(const std::string& opt, const std::string& v, bool here) {
  const std::optional<std::vector<int>> cpus = fm::parse_cpu_list(v);
  if (!cpus)
    fm::usage_error(opt + ": expected N or N+M+... (CPU numbers, at most " + std::to_string(fm::kMaxCpuList) +
                    "), got '" + v + "'");
  const std::vector<int>& usable = fm::usable_cpus();
  for (int c : *cpus)
    if (here && !usable.empty() && std::find(usable.begin(), usable.end(), c) == usable.end())
      fm::usage_error(opt + ": CPU " + std::to_string(c) + " is not one this process may run on");
  return *cpus;
}

// ITEM,ITEM,...: none empty; `item` names one in the refusal (HOST, CPU).
std::vector<std::string> split_list(const std::string& opt, const std::string& v, const std::string& item) {
  std::vector<std::string> items;
  for (size_t from = 0;;) {
    const size_t comma = v.find(',', from);
    items.push_back(v.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (items.back().empty()) fm::usage_error(opt + ": expected " + item + "," + item + ",..., got '" + v + "'");
    if (comma == std::string::npos) return items;
    from = comma + 1;
  }
}

// BYTES with an optional K/M/G/T suffix (powers of two); at least 1.
uint64_t parse_bytes(const std::string& opt, const std::string& v) {
  const uint64_t x = fm::parse_size(opt, v);
  if (x == 0) fm::usage_error(opt + ": expected at least 1 byte, got '" + v + "'");
  return x;
}

// A finite number >= 0; `expected` names it in the refusal.
double parse_number(const std::string& opt, const std::string& v, const std::string& expected) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x) || x < 0) fm::usage_error(opt + ": expected " + expected + ", got '" + v + "'");
  return x;
}

double parse_seconds(const std::string& opt, const std::string& v) {
  return parse_number(opt, v, "seconds (0: no limit)");
}

// Pulls "--name value" for names this subcommand owns out of args.
bool take(std::vector<std::string>& args, const char* name, std::string* value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      if (!value) {
        args.erase(args.begin() + i);
        return true;
      }
      if (i + 1 >= args.size()) fm::usage_error(std::string(name) + " needs a value");
      *value = args[i + 1];
      args.erase(args.begin() + i, args.begin() + i + 2);
      return true;
    }
    std::string prefix = std::string(name) + "=";
    if (value && args[i].rfind(prefix, 0) == 0) {
      *value = args[i].substr(prefix.size());
      args.erase(args.begin() + i);
      return true;
    }
  }
  return false;
}

// --token-file F: the shared secret (load_token says where else it may come from).
std::string token_option(std::vector<std::string>& args) {
  std::string file;
  take(args, "--token-file", &file);
  return fm::load_token(file);
}

void print_options() {
  auto json_list = [](std::string csv) {
    std::string out;
    for (size_t start = 0; start <= csv.size();) {
      size_t c = csv.find(',', start);
      if (c == std::string::npos) c = csv.size();
      out += (out.empty() ? "" : ", ") + fm::json_quote(csv.substr(start, c - start));
      start = c + 1;
    }
    return "[" + out + "]";
  };
  std::string opts;
  fm::Params defaults;
  for (const auto& o : fm::option_table()) {
    fm::JsonObj j;
    // The transport's choices are every transport this engine knows of: one
    // unavailable here is refused by the run with its reason (exit 2).
    std::string known;
    for (const auto& t : fm::known_transports()) known += (known.empty() ? "" : ",") + t;
    const std::string values = o.type == fm::OptType::choice && !*o.values ? known : o.values;
    j.add("name", o.name).add("key", fm::key_of(o.name)).add("short", o.short_name ? std::string(1, o.short_name) : "")
        .add("metavar", o.metavar).add("group", o.group).add("type", fm::type_name(o.type)).add("unit", o.unit);
    if (o.type == fm::OptType::choice) j.add_raw("values", json_list(values));
    if (o.type == fm::OptType::list) j.add("item", o.values);
    j.add("auto", o.accepts_auto).add("scope", o.scope).add("transports", o.transports).add("help", o.help)
        .add_raw("default", fm::typed_value(o, defaults));
    opts += (opts.empty() ? "" : ", ") + j.str();
  }
  // transports: those that can run here (each plugin checked without loading it: registry.hpp);
  // transports_unavailable: the others, each with its reason.
  fm::JsonObj unavailable;
  for (const auto& [name, why] : fm::unusable_transports()) unavailable.add(name, why);
  // transport_devices: for those that need an RDMA device, the ones found here (none: nothing to run on).
  fm::JsonObj devices;
  for (const auto& name : fm::known_transports())
    if (const auto found = fm::transport_devices(name)) {
      std::string list;
      for (const auto& d : *found) list += (list.empty() ? "" : ", ") + fm::json_quote(d);
      devices.add_raw(name, "[" + list + "]");
    }
  std::string plugin_dir;
  try {
    plugin_dir = fm::plugin_dir();
  } catch (const fm::Error& e) {
    plugin_dir = e.what();
  }
  fm::JsonObj serve;
  for (const auto& [name, value] : serve_limits()) serve.add(name, value);
  fm::JsonObj out;
  out.add("version", fm::kEngineVersion).add_raw("experiments", json_list(fm::kExperiments))
      .add_raw("transports", json_list(fm::available_transports())).add("transports_unavailable", unavailable)
      .add("transport_devices", devices)
      .add("plugin_dir", plugin_dir).add("default_port", static_cast<uint64_t>(fm::kDefaultPort))
      .add("serve", serve).add_raw("options", "[" + opts + "]");
  fm::emit_line(out);
}

// One line a transport: available (built in, or its plugin's path) or unavailable and why.
int print_transports() {
  const auto unusable = fm::unusable_transports();
  for (const auto& name : fm::known_transports()) {
    std::string line = name + ": ";
    auto it = std::find_if(unusable.begin(), unusable.end(), [&](const auto& u) { return u.first == name; });
    const auto devices = fm::transport_devices(name);
    if (it != unusable.end()) line += "unavailable: " + it->second;
    else if (devices && devices->empty()) line += "library present, no RDMA device (/sys/class/infiniband lists none)";
    else if (fm::is_plugin(name)) line += "available (plugin " + fm::plugin_dir() + "/libfabmeter-" + name + ".so)";
    else line += "available (built in)";
    if (it == unusable.end() && devices)
      for (size_t i = 0; i < devices->size(); ++i) line += (i ? ", " : "; devices: ") + (*devices)[i];
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

int main_(std::vector<std::string> args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(usage().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  fm::install_stop_handler();

  if (cmd == "options") {
    print_options();
    return 0;
  }
  if (cmd == "transports") return print_transports();
  if (cmd == "serve") {
    fm::ServerOptions o;
    std::string v;
    if (take(args, "--bind", &v)) o.bind = v;
    if (take(args, "--port", &v)) o.port = static_cast<uint16_t>(parse_int("--port", v));
    if (take(args, "--cpu", &v)) o.cpus = cpu_option("--cpu", v, true);
    o.cpu = o.cpus.empty() ? -1 : o.cpus.front();
    o.once = take(args, "--once", nullptr);
    take(args, "--data-dir", &o.data_dir);
    if (take(args, "--max-memory", &v)) o.max_memory = parse_bytes("--max-memory", v);
    if (take(args, "--max-duration", &v)) o.max_duration = parse_seconds("--max-duration", v);
    if (take(args, "--max-sessions", &v)) o.max_sessions = static_cast<uint32_t>(parse_int("--max-sessions", v));
    if (o.max_sessions == 0 || o.max_sessions > fm::kMaxSessions)
      fm::usage_error("--max-sessions must be 1 .. " + std::to_string(fm::kMaxSessions));
    if (take(args, "--handshake-timeout-ms", &v)) {
      const int ms = parse_int("--handshake-timeout-ms", v);
      if (ms < static_cast<int>(fm::kMinHandshakeTimeoutMs) || ms > static_cast<int>(fm::kMaxHandshakeTimeoutMs))
        fm::usage_error("--handshake-timeout-ms must be " + std::to_string(fm::kMinHandshakeTimeoutMs) + " .. " +
                        std::to_string(fm::kMaxHandshakeTimeoutMs));
      o.handshake_timeout_ms = static_cast<uint32_t>(ms);
    }
    if (take(args, "--relay-to", &v)) o.relay_to = split_list("--relay-to", v, "HOST");
    if (take(args, "--hop-to", &v)) o.hop_to = split_list("--hop-to", v, "HOST");
    if (take(args, "--log-format", &o.log_format) && o.log_format != "text" && o.log_format != "json")
      fm::usage_error("--log-format: expected text|json, got '" + o.log_format + "'");
    o.token = token_option(args);
    if (!args.empty()) fm::usage_error("serve: unexpected argument '" + args[0] + "'");
    return fm::run_server(o);
  }
  if (cmd == "run") {
    if (args.empty()) fm::usage_error(std::string("run: which experiment? (") + fm::kExperiments + ")");
    fm::Params p;
    p.experiment = args[0];
    args.erase(args.begin());
    fm::ClientOptions o;
    std::string v;
    const bool series = take(args, "--series", nullptr);  // each run's server from standard input
    if (!take(args, "--server", &o.server) && !series) fm::usage_error("run: --server HOST[:PORT] is required");
    if (series && !o.server.empty()) fm::usage_error("run: --series takes each run's server from standard input, not --server");
    take(args, "--out", &o.out_dir);
    if (take(args, "--start-at", &v)) o.start_at_ns = fm::parse_start_at(v, "--start-at", false);
    take(args, "--via", &o.via);
    take(args, "--via-hop", &o.via_hop);
    take(args, "--hop-transport", &o.hop_transport);
    if (!o.via_hop.empty() && !o.via.empty()) fm::usage_error("run: --via-hop goes straight from here, not with --via");
    if (!o.hop_transport.empty() && o.via_hop.empty()) fm::usage_error("run: --hop-transport goes with --via-hop");
    if (take(args, "--cpu", &v)) o.cpus = cpu_option("--cpu", v, o.via.empty());  // with --via: the relay host's
    o.cpu = o.cpus.empty() ? -1 : o.cpus.front();
    if (take(args, "--server-cpu", &v)) o.server_cpus = cpu_option("--server-cpu", v, false);
    o.dry_run = take(args, "--dry-run", nullptr);
    o.token = token_option(args);
    fm::parse_options(p, args);
    if (series && (o.start_at_ns || o.dry_run))
      fm::usage_error("run: --series takes each run's start from standard input (and runs, no --dry-run)");
    return series ? fm::run_series(p, o) : fm::run_client(p, o);
  }
  if (cmd == "tool") {
    fm::ClientOptions o;
    std::string request;
    if (!take(args, "--server", &o.server)) fm::usage_error("tool: --server HOST[:PORT] is required");
    if (!take(args, "--request", &request)) fm::usage_error("tool: --request JSON is required");
    o.token = token_option(args);
    if (!args.empty()) fm::usage_error("tool: unexpected argument '" + args[0] + "'");
    return fm::run_tool(request, o);
  }
  if (cmd == "forward") {
    fm::ForwardOptions o;
    std::string v;
    take(args, "--to", &o.to);
    take(args, "--to-transport", &o.to_transport);
    if (take(args, "--bind", &v)) o.bind = v;
    if (take(args, "--port", &v)) o.port = static_cast<uint16_t>(parse_int("--port", v));
    if (take(args, "--cpu", &v)) o.cpu = parse_int("--cpu", v);
    if (take(args, "--poll", &v)) {
      if (v != "busy" && v != "event") fm::usage_error("--poll: expected busy|event, got '" + v + "'");
      o.poll = v == "busy" ? fm::Poll::busy : fm::Poll::event;
    }
    o.once = take(args, "--once", nullptr);
    o.token = token_option(args);
    if (!args.empty()) fm::usage_error("forward: unexpected argument '" + args[0] + "'");
    return fm::run_forward(o);
  }
  if (cmd == "limits") {
    fm::LimitsOptions o;
    std::string v;
    if (take(args, "--cpus", &v)) {
      auto comma = v.find(',');
      if (comma == std::string::npos) fm::usage_error("--cpus: expected A,B");
      o.cpu_a = parse_int("--cpus", v.substr(0, comma));
      o.cpu_b = parse_int("--cpus", v.substr(comma + 1));
    }
    if (take(args, "-n", &v)) o.iterations = static_cast<uint64_t>(parse_int("-n", v));
    if (take(args, "--sizes", &v)) {
      fm::Params scratch;
      fm::parse_options(scratch, {"--values", v});  // the same list syntax as --values
      o.sizes = scratch.stream.values;
    }
    if (take(args, "--timer-wakeups", &v)) o.timer_wakeups = static_cast<uint64_t>(parse_int("--timer-wakeups", v));
    if (take(args, "--wakeup-round-trips", &v))
      o.wakeup_round_trips = static_cast<uint64_t>(parse_int("--wakeup-round-trips", v));
    if (take(args, "--schedule-rate", &v)) o.schedule_rate = static_cast<uint64_t>(parse_int("--schedule-rate", v));
    if (take(args, "--schedule-steps", &v)) o.schedule_steps = static_cast<uint64_t>(parse_int("--schedule-steps", v));
    if (take(args, "--connects", &v)) o.connects = static_cast<uint64_t>(parse_int("--connects", v));
    o.hiccups = take(args, "--hiccups", nullptr);
    if (take(args, "--hiccup-cpus", &v))
      for (const std::string& c : split_list("--hiccup-cpus", v, "CPU")) {
        o.hiccup.cpus.push_back(parse_int("--hiccup-cpus", c));
        const std::vector<int>& usable = fm::usable_cpus();
        if (std::find(usable.begin(), usable.end(), o.hiccup.cpus.back()) == usable.end())
          fm::usage_error("--hiccup-cpus: CPU " + c + " is not one this process may run on");
      }
    if (take(args, "--hiccup-fifo", &v)) o.hiccup.fifo = parse_int("--hiccup-fifo", v);
    if (take(args, "--hiccup-seconds", &v)) o.hiccup.seconds = parse_number("--hiccup-seconds", v, "seconds");
    if (take(args, "--hiccup-threshold-us", &v))
      o.hiccup.threshold_us = parse_number("--hiccup-threshold-us", v, "microseconds");
    if (!args.empty()) fm::usage_error("limits: unexpected argument '" + args[0] + "'");
    if (o.iterations == 0 || o.timer_wakeups == 0 || o.wakeup_round_trips == 0 || o.schedule_steps == 0 ||
        o.connects == 0)
      fm::usage_error("-n, --timer-wakeups, --wakeup-round-trips, --schedule-steps and --connects must be at least 1");
    if (o.schedule_rate == 0 || o.schedule_rate > 10'000'000)
      fm::usage_error("--schedule-rate: expected 1 .. 10000000 steps per second (stream's --rate range)");
    if (o.hiccup.fifo > 99) fm::usage_error("--hiccup-fifo: expected a SCHED_FIFO priority 1 .. 99 (0: none)");
    if (!(o.hiccup.seconds > 0 && o.hiccup.seconds <= 3600) || !(o.hiccup.threshold_us > 0))
      fm::usage_error("--hiccup-seconds: expected more than 0 and at most 3600; --hiccup-threshold-us: more than 0");
    fm::emit_line(fm::measure_limits(o));
    return 0;
  }
  fm::usage_error("unknown command '" + cmd + "' (run, serve, tool, forward, limits, options, transports)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return main_(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const fm::Error& e) {
    std::fprintf(stderr, "fabmeter-engine: error: %s\n", e.what());
    return static_cast<int>(e.kind);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fabmeter-engine: error: %s\n", e.what());
    return 3;
  }
}
