#include "session/forward.hpp"

#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "experiment/forward.hpp"
#include "session/registry.hpp"
#include "session/session_common.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/remote_parse.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/session.hpp"
#include "fabmeter/signals.hpp"

namespace fm {

namespace {

// The largest frame the server's session may send the client through the
// hop (a point's report); the client's own limit still applies at its end.
constexpr uint64_t kMaxHopFrame = 8u << 20;
constexpr int kRelayPollMs = 50;

// The session's ipc sockets (a transport's server_claim) in a private
// directory, removed with the session.
class OwnDir {
 public:
  ~OwnDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& make() {
    if (path_.empty()) {
      std::string tmpl = std::filesystem::temp_directory_path().string() + "/fabmeter-hop-XXXXXX";
      if (!::mkdtemp(tmpl.data())) sys_error("cannot create the hop's session directory");
      path_ = tmpl;
    }
    return path_;
  }

 private:
  std::string path_;
};

// Messages one way, client to server: the experiments with a clock of the
// other end (oneway, stream), whose receiver counts the messages against the
// sender's count and waits for stragglers, so a message still in the hop
// when a point's end is relayed arrives or is counted lost.
bool one_way(const Params& p) { return experiment_for(p.experiment).remote_clock; }

// The hop's own checks of a client's session: what it can forward. One
// message in flight (lat: a round trip), or messages one way.
void check_forwardable(const Hello& h, const Params& p) {
  if (!h.relay.empty() || !h.tool.empty())
    usage_error("the hop forwards measured sessions only: no relayed run (--via) and no peer tool through it");
  if (experiment_for(p.experiment).in_flight != 1 && !one_way(p))
    usage_error("the hop forwards only experiments with one message in flight (lat) or messages one way (oneway, "
                "stream), not " + p.experiment);
  if (p.flows > 1) usage_error("the hop forwards one connection: --flows 1");
}

// The pair the hop can join. A client on an unreliable transport numbers
// its messages, which a server on a reliable one neither echoes (lat: every
// reply would read as late) nor reads (oneway: it counts arrivals, so one
// lost after the hop fails the point). A server on an unreliable transport
// reads the number that its client on a reliable one never wrote, where the
// experiment numbers only unreliable messages (oneway).
void check_pair(const Params& in, const Caps& caps_in, const Params& out, const Caps& caps_out) {
  if (!caps_in.reliable && caps_out.reliable)
    usage_error("the hop forwards " + in.transport + " (unreliable) only to an unreliable transport, not " +
                out.transport + ": a server on a reliable one neither echoes nor reads the sequence number that " +
                "the client numbers its messages by");
  if (caps_in.reliable && !caps_out.reliable && experiment_for(in.experiment).numbers_only_unreliable)
    usage_error("the hop forwards " + in.experiment + " from " + in.transport +
                " (reliable) only to a reliable transport, not " + out.transport +
                ": the server would read a sequence number that the client does not write");
}

// The clock of the other end (oneway, stream): each end decides from the
// host its control channel reaches, here the hop's, whether both read one
// TSC or the server's clock is fitted by probes. Only with all three on one
// host is that the direct run's answer (one TSC, no fit): across hosts the
// probes would go through the hop's relay (its UDP ones reach only the hop),
// not the direct run's fit, and where the hop shares one end's host the two
// ends would disagree on whether to probe at all.
void check_clocks(const Params& p, const std::string& client_host, const std::string& server_host) {
  if (!experiment_for(p.experiment).remote_clock || (client_host == host_id() && server_host == host_id())) return;
  usage_error("the hop forwards " + p.experiment + " only with the client, the hop and the server on one host: " +
              "its figure is a stamp of the server's minus one of the client's, read on one clock; across hosts" +
              " the server's clock would be fitted through the hop, not as the direct run fits it");
}

// The parameters of the hop's own end of session `p`: it waits as the hop's
// --poll says, but an end woken only by an event-mode other end
// (Caps::woken_by_remote) waits as its session does, so that it wakes a
// sleeping other end; the hop can sleep on it only where that end wakes it.
Params hop_side(Params p, const Caps& caps, Poll hop) {
  const Poll mode = caps.woken_by_remote ? p.poll : hop;
  if (caps.woken_by_remote && hop == Poll::event && p.poll == Poll::busy)
    usage_error("the hop's --poll event on " + p.transport + " needs the client's --poll event: " + caps.woken_by_remote);
  if (caps.busy_only && mode == Poll::event) usage_error("the hop's --poll event: " + std::string(caps.busy_only));
  p.poll = p.poll_recv = p.poll_send = mode;
  return p;
}

// More busy loops than CPUs on one host and each message waits for a
// scheduler slice (milliseconds) at the loop it is bound for: the run
// would measure the scheduler, a thousand times slower than the path.
// The hop's own, the client's and the server's where they run on this host
// (network namespaces share it), against the CPUs the hop may run on.
void check_spinners(Poll hop, const Params& p, bool client_here, bool server_here) {
  if (hop != Poll::busy) return;
  const bool busy = p.poll == Poll::busy;
  const size_t spinning = 1 + (client_here && busy) + (server_here && busy);
  const std::vector<int>& cpus = usable_cpus();
  if (cpus.empty() || spinning <= cpus.size()) return;
  std::string whose = "the hop's forwarding thread";
  if (client_here && busy) whose += server_here && busy ? ", the client's" : " and the client's";
  if (server_here && busy) whose += " and the server's";
  usage_error("busy polling would starve: " + whose + " busy loops are " + std::to_string(spinning) +
              " spinning threads on this host's " + std::to_string(cpus.size()) + " usable CPUs (CPUs " +
              cpu_list_text(cpus) + "), so each message would wait for a scheduler slice; give the hop or the "
              "client --poll event, or each busy loop a CPU of its own");
}

uint64_t largest_message(const Params& p, const Caps& caps) {
  uint64_t most = 0;
  for (const Point& pt : experiment_for(p.experiment).plan(p, caps)) most = std::max(most, pt.largest());
  return most;
}

// Relays control frames both ways until the client's bye (true) or a side
// ends, breaks or says fail/refuse (false, *why says it). The sessions
// decide the outcome, not the data path: the server closes its transport
// at the end of its points, before the client's bye.
bool relay_frames(Ctrl& client, Ctrl& server, std::string* why) {
  for (;;) {
    if (stop_requested()) {
      *why = "interrupted";
      return false;
    }
    pollfd fds[2] = {{client.fd(), POLLIN, 0}, {server.fd(), POLLIN, 0}};
    if (::poll(fds, 2, kRelayPollMs) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (!fds[i].revents) continue;
      Ctrl& from = i == 0 ? client : server;
      Ctrl& to = i == 0 ? server : client;
      const Ctrl::Peek peek = from.peek();
      if (peek == Ctrl::Peek::nothing) continue;
      if (peek == Ctrl::Peek::closed) {
        *why = i == 0 ? "the client closed its session" : "the server closed its session";
        return false;
      }
      CtrlType type{};
      const std::string frame = from.recv_any(&type, i == 0 ? "the client's frame" : "the server's frame");
      to.send(type, frame);
      if (type == CtrlType::bye && i == 0) return true;
      if (type == CtrlType::fail || type == CtrlType::refuse) {
        *why = (i == 0 ? "the client: " : "the server: ") + printable_line(frame);
        return false;
      }
    }
  }
}

// One client's session on the standalone hop: its opening, then the session.
int forward_one(Ctrl& cc, const ForwardOptions& o) {
  cc.set_timeout_ms(kDefaultHandshakeTimeoutMs);
  const std::string hello = cc.recv(CtrlType::hello, "client hello");
  Hello h;
  try {
    h = decode_hello(hello);
  } catch (const Error& e) {
    cc.send(CtrlType::refuse, e.what());
    return 2;
  }
  if (h.version != kProtocolVersion) {
    cc.send(CtrlType::refuse, "protocol version mismatch: the hop speaks " + std::to_string(kProtocolVersion) +
                                  ", the client " + std::to_string(h.version));
    return 2;
  }
  const std::string nonce = o.token.empty() ? std::string() : random_bytes(kNonceBytes);
  cc.send(CtrlType::challenge, nonce);
  if (!o.token.empty() && !proof_matches(client_proof(o.token, hello, nonce),
                                          decode_auth(cc.recv(CtrlType::auth, "client's proof")))) {
    cc.send(CtrlType::fail, "authentication failed (wrong token)");
    return 3;
  }
  try {
    const std::string asked = h.hop.empty() ? "" : decode_hop_request(h.hop).hop_transport;
    if (!asked.empty() && asked != o.to_transport)
      usage_error("this hop forwards on its operator's --to-transport (" +
                  (o.to_transport.empty() ? std::string("the client's transport") : o.to_transport) + "), not --hop-transport " + asked);
  } catch (const Error& e) {
    cc.send(CtrlType::refuse, e.what());
    return 2;
  }
  OwnDir dir;
  return forward_session(cc, {hello, h, nonce}, o, {[&] { return dir.make(); }, [](const Params&, const Caps&) {}});
}

}  // namespace

std::string encode_hop_request(const HopRequest& r) {
  nlohmann::json j{{"to", r.to}};
  if (!r.hop_transport.empty()) j["hop_transport"] = r.hop_transport;
  return j.dump();
}

HopRequest decode_hop_request(std::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  const auto text = [&](const char* key) -> std::string {
    if (!j.contains(key)) return "";
    if (!j[key].is_string()) usage_error(std::string("the hop request's ") + key + " is not a string");
    return j[key].get<std::string>();
  };
  if (!j.is_object()) usage_error("the hop request is not a JSON object");
  for (const auto& [key, value] : j.items())
    if (key != "to" && key != "hop_transport") usage_error("the hop request names an unknown key '" + remote_excerpt(key) + "'");
  HopRequest r{text("to"), text("hop_transport")};
  if (r.to.empty()) usage_error("the hop request names no server (to)");
  return r;
}

int forward_session(Ctrl& cc, const HopOpening& c, const ForwardOptions& o, const HopHost& host) {
  const Hello& h = c.h;
  Heartbeat client_beat(cc);
  Params p, po, pin, pout;  // the sessions' and the hop's own ends'
  const TransportEntry* in = nullptr;
  const TransportEntry* out = nullptr;
  Caps caps_in{}, caps_out{};
  Poll mode = o.poll;  // the hop's own
  try {
    p = decode_params(h.params);
    check_forwardable(h, p);
    validate_run(p);
    in = &entry_for(p.transport);
    caps_in = in->caps(p);
    check_against_caps(p, caps_in, h.host == host_id());
    host.check_limits(p, caps_in);
    po = p;
    if (!o.to_transport.empty()) po.transport = o.to_transport;
    out = &entry_for(po.transport);
    caps_out = out->caps(po);
    check_against_caps(po, caps_out, true);  // the server checks the host itself
    if (caps_in.one_sided || caps_out.one_sided) usage_error("the hop forwards messages: no one-sided --op");
    check_pair(p, caps_in, po, caps_out);
    if (o.poll_as_client) mode = p.poll;
    pin = hop_side(p, caps_in, mode);
    pout = hop_side(po, caps_out, mode);
    in->server_claim(p, {cc.local_addr(), host.own_dir});
  } catch (const Error& e) {
    cc.send(CtrlType::refuse, e.what());
    return 2;
  }
  // The server's session, opened as a client's with the hop's token.
  Ctrl cs;
  Welcome w;
  try {
    cs = Ctrl::connect(o.to, kDefaultPort, po.timeout_ms);
    ClientOptions co;
    co.server = o.to;
    co.token = o.token;
    w = open_session(cs, po, co, host_id(), "");
  } catch (const Error& e) {
    cc.send(e.kind == ErrorKind::usage ? CtrlType::refuse : CtrlType::fail, std::string("the hop's server: ") + e.what());
    return e.kind == ErrorKind::usage ? 2 : 3;
  }
  try {
    check_clocks(p, h.host, w.host);
    check_spinners(mode, p, h.host == host_id(), w.host == host_id());
  } catch (const Error& e) {
    cc.send(CtrlType::refuse, e.what());
    try {
      cs.send(CtrlType::fail, std::string("the hop refused its client: ") + e.what());
    } catch (const Error&) {  // the server's session ends with the hop's either way
    }
    return 2;
  }
  cs.set_max_frame(kMaxHopFrame);
  Heartbeat server_beat(cs);
  cc.set_timeout_ms(p.timeout_ms);
  // The client sees the server's environment, under this host's name (its transport ends here).
  const std::string body = host_id() + "\n" + w.env;
  if (o.token.empty())
    cc.send(CtrlType::welcome, encode_welcome("", body));
  else
    cc.send_then_authenticate(CtrlType::welcome, encode_welcome(server_proof(o.token, c.hello, c.nonce, body), body),
                              session_key(o.token, c.hello, c.nonce, body), true);
  std::string why;
  bool ok = false;
  JsonObj line;
  line.add("event", "hop").add("client", cc.remote_addr()).add("from_transport", p.transport)
      .add("to_transport", po.transport).add("to", o.to);
  try {
    const auto end_in = in->hop_end(pin, Role::server, cc, largest_message(p, caps_in));
    const auto end_out = out->hop_end(pout, Role::client, cs, largest_message(po, caps_out));
    std::atomic<bool> stop{false};
    std::string data_why;
    std::thread data([&] { data_why = forward_loop(*end_in, *end_out, !one_way(p), mode, o.cpu, stop); });
    ok = relay_frames(cc, cs, &why);
    stop = true;
    data.join();
    if (!ok && !data_why.empty()) why += " (forwarding: " + data_why + ")";
  } catch (const Error& e) {
    why = e.what();
  }
  if (!ok) {
    for (Ctrl* ctrl : {&cc, &cs}) try {
        ctrl->send(CtrlType::fail, "the hop: " + why);
      } catch (const Error&) {
      }
  }
  line.add("status", ok ? "ok" : "failed");
  if (!ok) line.add("message", why);
  emit_line(line);
  cs.close_draining(kCloseDrainMs);
  cc.close_draining(kCloseDrainMs);
  return ok ? 0 : 3;
}

int run_forward(const ForwardOptions& o) {
  if (o.to.empty()) usage_error("forward: --to HOST[:PORT] is required");
  if (!o.to_transport.empty()) entry_for(o.to_transport);  // an unknown transport: exit 2 now
  Listener listener(o.bind, o.port);
  if (o.token.empty() && !listener.loopback_only())
    std::fprintf(stderr, "fabmeter-engine: warning: forwarding on %s without a token: anyone who reaches port %u "
                 "can run sessions through this host (use --token-file F or FABMETER_TOKEN)\n",
                 o.bind.c_str(), unsigned(listener.port()));
  emit_line(JsonObj().add("event", "listening").add("bind", o.bind).add("port", static_cast<uint64_t>(listener.port()))
                .add("to", o.to).add("to_transport", o.to_transport).add("poll", o.poll == Poll::busy ? "busy" : "event"));
  for (;;) {
    Ctrl cc = listener.accept(kDefaultHandshakeTimeoutMs);
    if (cc.fd() < 0) return 130;
    int rc;
    try {
      rc = forward_one(cc, o);
    } catch (const Error& e) {
      std::fprintf(stderr, "fabmeter-engine: hop session ended: %s\n", e.what());
      rc = e.kind == ErrorKind::usage ? 2 : 3;
    }
    if (o.once) return rc;
  }
}

}  // namespace fm
