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
//
// A serve starts the same hop for a client whose hello asks for one (its hop
// line, a HopRequest: `run --server S --via-hop HOP`), as a session of its
// own (admission, --max-sessions, --max-duration), only toward servers its
// operator lists (serve --hop-to) and only with a token, which it proves to
// the server; that hop waits as the client's --poll says.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/transport.hpp"

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
  bool poll_as_client = false;  // a serve's hop: it waits as its client's --poll says, not as `poll`
  bool once = false;         // exit after one session, with its code
  std::string token;
};

// The hello's hop line: the server the client measures (as it names it,
// HOST[:PORT]) and the transport from the hop to it ("": the client's). A
// standalone hop forwards to its own --to and refuses another hop_transport
// than its --to-transport.
struct HopRequest {
  std::string to, hop_transport;
};
std::string encode_hop_request(const HopRequest& r);
// Refuses (usage_error) anything but a JSON object of those keys, strings.
HopRequest decode_hop_request(std::string_view line);

// The client's opening as the hop read it, after the client's proof: what
// the hop's welcome proves.
struct HopOpening {
  const std::string& hello;
  const Hello& h;
  const std::string& nonce;  // the hop's challenge ("" without a token)
};

// What the host running the hop adds: where the client's transport makes its
// sockets, and its own limits on the plan (a serve's --max-memory and
// --max-duration); usage_error refuses.
struct HopHost {
  std::function<std::string()> own_dir;
  std::function<void(const Params&, const Caps&)> check_limits;
};

// One client's session through the hop after its proof: the checks, the
// server's session, the welcome and the forwarding. Returns its exit code.
int forward_session(Ctrl& cc, const HopOpening& c, const ForwardOptions& o, const HopHost& host);

int run_forward(const ForwardOptions& o);

}  // namespace fm
