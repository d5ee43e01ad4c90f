// One client/server session: handshake, transport set-up, the measured
// points, and the end. main.cpp only parses the command line and calls these.
#pragma once
#include <string>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/transport.hpp"

namespace fm {

// Reported by `options` and in every run's start line.
constexpr const char* kEngineVersion = "0.1.0";

struct ClientOptions {
  std::string server;   // HOST[:PORT]
  std::string out_dir;  // raw samples go here when set
  int cpu = -1;
  std::vector<int> cpus;  // --cpu N+M+...: every CPU named (cpu is the first), --flows deals them out
  // --server-cpu N+M+...: the CPUs the server's session is asked to run on
  // (checked there, against what its serve may give); none: its serve's own.
  std::vector<int> server_cpus;
  std::string token;    // shared secret (load_token); empty: none
  // CLOCK_MONOTONIC ns (0: none): the first point's measured part starts no
  // earlier, whenever the connection was made (mesh starts a round's pairs so).
  int64_t start_at_ns = 0;
  // HOST[:PORT] of a `fabmeter serve` that runs this client there, against
  // `server`, and relays its output (relay.hpp); "": run it here.
  std::string via;
  // HOST[:PORT] of a forwarding hop (`fabmeter-engine forward`, or a serve
  // that starts one) that this client's session goes through to `server`
  // (session/forward.hpp); "": straight to `server`. `hop_transport`: the
  // transport from the hop to the server ("": this run's).
  std::string via_hop, hop_transport;
  // Check the options against the transport's capabilities and return,
  // connecting nothing and allocating nothing of the run's size.
  bool dry_run = false;
};

// The most sessions a server may run at once (--max-sessions): each is a
// process, and each slot a word that a client's admission looks through.
constexpr uint32_t kMaxSessions = 1024;
// serve --handshake-timeout-ms: its bounds and default.
constexpr uint32_t kMinHandshakeTimeoutMs = 100, kMaxHandshakeTimeoutMs = 60000, kDefaultHandshakeTimeoutMs = 2000;;

struct ServerOptions {
  std::string bind = "127.0.0.1";
  uint16_t port = kDefaultPort;
  int cpu = -1;
  std::vector<int> cpus;  // --cpu N+M+...: every CPU named (cpu is the first), --flows deals them out
  bool once = false;
  // Server-side outputs (a stream's file sink) go to one fresh 0700
  // subdirectory per session under here; "" = a private temp dir made at start.
  std::string data_dir;
  uint64_t max_memory = 0;     // bytes one session's plan may need here; 0 = a quarter of MemTotal
  double max_duration = 3600;  // seconds per session (stated up front, then a watchdog); 0 = no limit
  uint32_t max_sessions = 4;   // sessions at once (one process each, kMaxSessions at most); more are answered "busy"
  // How long a connection has for its first word, then its hello, then its
  // proof: each of these waits ends a connection that stalls in its handshake.
  uint32_t handshake_timeout_ms = kDefaultHandshakeTimeoutMs;
  // Set by run_server, not options: its private 0711 directory where each
  // session makes its ipc sockets (short paths: sun_path holds 108 bytes).
  std::string ipc_root;
  std::string token;    // shared secret (load_token); empty: clients are not authenticated
  // Hosts (as clients name them) this server may run a client against for
  // an authenticated client (`run --via`, mesh --launch serve); none: never.
  std::vector<std::string> relay_to;
  // The servers (hosts as clients name them) this serve may forward a
  // client's session to, as a hop (run --via-hop); none: never.
  std::vector<std::string> hop_to;
  std::string log_format = "text";  // each session's line on stderr: text or json (session_log.hpp)
};

// Refuses (usage_error with the reason for the client) a plan that needs more
// of this server than its operator allows: memory, duration, client-named
// resources (ipc paths, privileged or foreign tcp ports). Nothing is allocated.
void check_server_limits(const Params& p, const Caps& caps, const ServerOptions& o);
// What a plan needs on the server, estimated before anything is allocated.
struct ServerCost {
  double memory_bytes;  // the largest point's stamp arrays, buffers, rings and queues
  double min_seconds;   // a lower bound on the run time the plan states
};
ServerCost server_cost(const Params& p, const Caps& caps);

// Return the process exit code: 0 ok, 3 runtime failure, 130 interrupted.
int run_client(const Params& p, const ClientOptions& o);
// `run --series`: the runs of one experiment and its parameters, one after
// another in this process, each against the server a line of standard input
// names ("HOST[:PORT] START_NS", START_NS 0: no --start-at), each printing its
// lines as a run of its own and an end line with its exit code ("code"); with
// `via`, all through one session with that relay. 0 at the end of the input.
int run_series(const Params& p, const ClientOptions& o);
// The longest line run_series reads.
constexpr size_t kMaxSeriesLine = 512;
// --start-at NS (`what` names it in the error): CLOCK_MONOTONIC ns, no more
// than 600 s ahead (a mistyped instant would hold the session for days);
// `zero_is_none`: 0 means none.
int64_t parse_start_at(const std::string& v, const std::string& what, bool zero_is_none);
int run_server(const ServerOptions& o);
// `fabmeter-engine tool`: asks the server to start a peer tool's server side
// (`request`, a JSON object: session/tool_server.hpp) and holds it until
// standard input closes.
int run_tool(const std::string& request, const ClientOptions& o);

// Capabilities of a transport by name, for validation before connecting.
Caps transport_caps(const Params& p);
// The transports built into this binary, comma-separated.
std::string available_transports();

}  // namespace fm
