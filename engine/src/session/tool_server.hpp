// A peer tool's server side on the server's host: `fabmeter peers --server
// HOST` asks the `fabmeter serve` there to start, say, `sockperf server`, and
// runs the tool's client here against it.
//
// The client names what it wants in its (authenticated) hello: one JSON
// object, the tool line (handshake.hpp), e.g. {"tool":"ib_send_lat","size":64,
// "conn":"RC"}. The server builds the command itself from a fixed table: the
// tool is one of kTools, each key one that tool's shape takes, each number
// within its bounds, a device a name of an RDMA device of this host; the
// binary is looked up in fixed system directories, and the port is the
// server's pick. Nothing the client writes becomes a path, a binary or a
// free-form argument. Then, all `exchange` frames:
//   server -> client  {"ready":true,"port":P,"argv":[...]}  the tool listens
//                     ({"ready":false,"reason":...}: it did not)
//   client -> server  "stop"          (the client's tool is done)
//   server -> client  {"end":..,"why":..,"exit":..,"user_s":..,"system_s":..,"window_s":..,"output":..}
//   client -> server  bye
// The tool runs in a process group of its own and ends (SIGTERM, then
// SIGKILL to the group, every process reaped) when the client says stop,
// closes or falls silent, when its lifetime (lifetime_s, at most the
// server's --max-duration) passes, or when the server stops.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/session.hpp"

namespace fm {

constexpr size_t kMaxToolRequest = kMaxToolLine;
constexpr uint32_t kMaxToolLifetimeS = 3600;
constexpr uint32_t kDefaultToolLifetimeS = 120;

// A request as the server accepts it: every field checked.
struct ToolRequest {
  std::string tool;             // one of tool_names()
  std::string proto;            // sockperf: tcp | udp
  uint64_t size = 0;            // perftest -s (0: its default)
  uint64_t iters = 0;           // perftest -n (0: its default)
  uint32_t duration_s = 0;      // perftest -D (0: none, it counts iterations)
  std::string conn;             // perftest -c: RC | UC | UD ("" : its default)
  std::string device;           // perftest -d ("" : its default)
  uint32_t ib_port = 0;         // perftest -i (0: its default)
  int32_t gid_index = -1;       // perftest -x (-1: its default)
  uint32_t mtu = 0;             // perftest -m (0: its default)
  uint32_t inline_size = 0;     // perftest -I (0: its default); send and write tests
  bool bidir = false;           // perftest -b; bw tests
  std::string cm;               // perftest: rdma_cm connects with -R ("" or raw: its own socket)
  uint32_t lifetime_s = kDefaultToolLifetimeS;
};

// The tools a server may start: sockperf, qperf, iperf3 and perftest's.
const std::vector<std::string>& tool_names();

// Decodes and checks a client's tool line (nlohmann/json): an object of at
// most kMaxToolRequest bytes whose "tool" is one of tool_names() and whose
// other keys are those that tool takes, each within bounds. Anything else is
// a usage_error with the reason. Pure (the fuzz target feeds it); the device's
// presence is checked by the server (check_tool).
ToolRequest decode_tool_request(std::string_view json);

// The argv the server runs: `binary` (found by find_tool), then the tool's
// server-side options; `addr` the control connection's local address, `port`
// the server's pick.
std::vector<std::string> tool_argv(const ToolRequest& r, const std::string& binary, const std::string& addr,
                                   uint16_t port);

// Server, before the welcome: refuses (usage_error) what this server will
// not start: no token, a lifetime over --max-duration, a device that is not
// here, a tool not installed. Returns the binary's path.
std::string check_tool(const ToolRequest& r, const ServerOptions& o);

// Server, after the welcome: runs the tool and the exchange above. Returns
// the session's exit code.
int serve_tool(Ctrl& ctrl, const ToolRequest& r, const std::string& binary, const ServerOptions& o);

// Client, after the welcome (`fabmeter-engine tool`, client.cpp's
// run_tool): prints a "ready" line, waits until its standard input closes
// (or SIGINT/SIGTERM, or the server ends the tool), then prints an "end"
// line. Returns 0, or 3 when the tool never listened.
int run_tool_client(Ctrl& ctrl);

}  // namespace fm
