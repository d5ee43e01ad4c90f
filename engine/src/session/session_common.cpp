#include "session/session_common.hpp"

#include <algorithm>
#include <cstdio>

#include "session/registry.hpp"
#include "experiment/run_points.hpp"

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

int exit_code(Status s) {
  if (s == Status::ok) return 0;
  if (s == Status::interrupted) return 130;
  return 3;
}

void check_against_caps(const Params& p, const Caps& caps, bool same_host) {
  if (caps.one_sided && !experiment_for(p.experiment).one_sided)
    usage_error(op_option(p.rdma) + " is one-sided (the server's CPU never sees it): it runs lat and bw, not " +
                p.experiment);
  if (caps.busy_only && p.poll == Poll::event) usage_error(std::string("--poll event: ") + caps.busy_only);
  if (caps.busy_only && p.poll_send == Poll::event) usage_error(std::string("--poll-send event: ") + caps.busy_only);
  if (caps.one_poll_mode && p.poll_recv != p.poll_send)
    usage_error(p.transport + ": --poll-recv " + poll_name(p.poll_recv) + " with --poll-send " + poll_name(p.poll_send) +
                ": " + caps.one_poll_mode);
  if (caps.fixed_msg_size)
    for (uint64_t size : sizes_for(p, UINT64_MAX))
      if (size != caps.fixed_msg_size)
        usage_error(op_option(p.rdma) + " moves exactly " + std::to_string(caps.fixed_msg_size) + " B: give -s " +
                    std::to_string(caps.fixed_msg_size) + " (not " + std::to_string(size) + ")");
  experiment_for(p.experiment).check_caps(p, caps);
  if (const uint32_t n = experiment_for(p.experiment).connections(p); n > 1 && caps.one_connection)
    usage_error(p.transport + ": " + std::to_string(n) + " connections asked (--flows, --conns): " + caps.one_connection);
  if (caps.same_host_only && !same_host)
    usage_error(p.transport + ": both ends must run on the same host (they share memory)");
}

FabricWhere fabric_where(const Params& p, const Ctrl& ctrl, int cpu) {
  const TransportEntry& transport = entry_for(p.transport);
  const FabricPort at = transport.fabric_port(p);
  return {ctrl.local_addr(), p.transport, at.device, at.port, at.gid_index, cpu, transport.port_facts, p.tcp.cc};
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g s", s);
  return buf;
}

void check_onward(const std::string& target, const std::vector<std::string>& allowed, const ServerOptions& o,
                  const std::string& option, const std::string& verb) {
  std::string host;
  uint16_t port;
  split_host_port(target, kDefaultPort, host, port);
  if (allowed.empty())
    usage_error("this server does not " + verb + " for others (it was started without " + option + "), so not to " +
                target);
  if (o.token.empty())
    usage_error("this server " + verb + "s only with a token of its own (serve --token-file), which it proves to " + target);
  if (std::find(allowed.begin(), allowed.end(), host) == allowed.end())
    usage_error("this server may not " + verb + " to " + host + " (not in its " + option + " list)");
}

}  // namespace fm
