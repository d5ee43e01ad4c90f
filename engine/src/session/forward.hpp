// `fabmeter-engine forward`: a forwarding hop (the thesis' gateway hop, its
// "super-node"). A client runs its session against the hop as against a
// serve; the hop opens a session of the same parameters with the server
// (--to), but on its own transport (--to-transport), connects the client's
// transport and that one, and forwards each message between them
// (experiment/forward.hpp) while it relays every control frame of both
// sessions unchanged. So the client measures client -> hop -> server ->
// hop -> client; the hop's added latency is that minus the direct path's
// (fabmeter's --via-hop runs both).
//
// Only experiments with one message in flight and no clock of the other end
// pass (a round trip has nothing in flight when its end is relayed); the
// others, a relayed run (--via) and a peer tool are refused with one line.
// The hop authenticates both sessions with its token (the client proves it
// to the hop, the hop to the server) and its sessions run one at a time.
#pragma once
#include <cstdint>
#include <string>

#include "fabmeter/params.hpp"

namespace fm {

// Its own default port, beside a serve's (kDefaultPort) on a gateway host.
constexpr uint16_t kDefaultHopPort = 18516;

struct ForwardOptions {
  std::string bind = "127.0.0.1";
  uint16_t port = kDefaultHopPort;
  std::string to;            // the server: HOST[:PORT]
  std::string to_transport;  // the transport toward it ("": the client's)
  int cpu = -1;              // the forwarding thread's CPU
  Poll poll = Poll::busy;    // how the forwarding thread waits for a message
  bool once = false;         // exit after one session, with its code
  std::string token;
};

int run_forward(const ForwardOptions& o);

}  // namespace fm
