// `fabmeter-engine forward`: a forwarding hop (the thesis' gateway hop, its
// "super-node"). A client runs its session against the hop as against a
// serve; the hop opens a session of the same parameters with the server
// (--to), but on its own transport (--to-transport), connects the client's
// transport and that one, and forwards each message between them
// (experiment/forward.hpp) while it relays every control frame of both
// sessions unchanged. So lat's client measures client -> hop -> server ->
// hop -> client, oneway and stream client -> hop -> server once; the hop's
// added latency is that minus the direct path's (fabmeter's --via-hop runs
// both).
//
// lat passes (one message in flight: nothing is in flight when its point's
// end is relayed), and oneway and stream (their receiver waits for what is
// still in the hop), those two only with the client, the hop and the server
// on one host (session/forward.cpp's check_clocks); the other experiments, a
// relayed run (--via) and a peer tool are refused with one line.
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
