#include "fabmeter/session.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "experiment/bw.hpp"
#include "experiment/check.hpp"
#include "experiment/common.hpp"
#include "experiment/lat.hpp"
#include "experiment/oneway.hpp"
#include "experiment/stream.hpp"
#include "fabmeter/cpu.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/stats.hpp"
#include "transport/shm.hpp"
#include "transport/tcp.hpp"
#include "transport/udp.hpp"
#ifdef FM_HAVE_ZMQ
#include "transport/zmq.hpp"
#endif
#ifdef FM_HAVE_NNG
#include "transport/nng.hpp"
#endif
#ifdef FM_HAVE_NANOMSG
#include "transport/nanomsg.hpp"
#endif
#ifdef FM_HAVE_OFI
#include "transport/ofi.hpp"
#endif
#ifdef FM_HAVE_VERBS
#include "transport/verbs.hpp"
#endif

namespace fm {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::ctrl_message: return "ok";
    case Status::timeout: return "timeout";
    case Status::peer_lost: return "peer_lost";
    case Status::interrupted: return "interrupted";
    case Status::failed: return "failed";
  }
  return "failed";
}

namespace {


int exit_code(Status s) {
  if (s == Status::ok) return 0;
  if (s == Status::interrupted) return 130;
  return 3;
}

template <class T>
Caps caps_of(const Params& p) { return T::caps(p); }

// The measured points of a run: message sizes, or the stream's rate x values grid.
struct PointSpec {
  uint64_t size, rate, values;
};

std::vector<PointSpec> plan_points(const Params& p, const Caps& caps) {
  std::vector<PointSpec> plan;
  if (p.experiment == "stream") {
    for (uint64_t r : p.rate)
      for (uint64_t v : p.values) plan.push_back({stream_size(v), r, v});
  } else if (p.experiment == "check") {
    plan.push_back({check_sizes(p, caps.max_msg_size).back(), 0, 0});
  } else {
    for (uint64_t s : sizes_for(p, caps.max_msg_size)) plan.push_back({s, 0, 0});
  }
  return plan;
}

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// The largest control frame the client may receive in the session: the
// per-point stamp reports (header + 8 bytes per message of the biggest point).
// The server receives only small blobs (addresses, counts) and keeps
// kMaxFrameDefault.
uint64_t session_max_frame(const Params& p, const std::vector<PointSpec>& plan) {
  uint64_t most = kMaxFrameDefault;
  constexpr uint64_t header = std::max({sizeof(OnewayReport), sizeof(SinkReport), sizeof(CheckReport)});
  for (const PointSpec& pt : plan) {
    uint64_t total = 0;
    if (p.experiment == "oneway")
      total = sat_add(warmup_for(p, pt.size), sat_mul(p.bursts, p.burst_size));
    else if (p.experiment == "stream")
      total = sat_add(stream_warmup(p, pt.rate), stream_steps(p, pt.rate));
    most = std::max(most, sat_add(header, sat_mul(total, sizeof(uint64_t))));
  }
  return most;
}

// Clock offset by round-trip probes over the control channel: the probe with
// the smallest round trip bounds the error by half of it.
ClockSync probe_clock(Ctx& c) {
  constexpr int kProbes = 64;
  ClockSync s;
  s.probed = true;
  if (c.role == Role::server) {
    for (int i = 0; i < kProbes; ++i) {
      c.ctrl.recv(CtrlType::exchange, "clock probe");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f", c.clk.ticks_to_mono_ns(c.clk.ticks()));
      c.ctrl.send(CtrlType::exchange, buf);
    }
    return s;
  }
  double best_rtt = 1e300;
  for (int i = 0; i < kProbes; ++i) {
    double a = c.clk.ticks_to_mono_ns(c.clk.ticks());
    double srv = std::stod(c.ctrl.exchange("", "clock probe"));
    double b = c.clk.ticks_to_mono_ns(c.clk.ticks());
    if (b - a < best_rtt) {
      best_rtt = b - a;
      s.offset_ns = srv - (a + b) / 2;
      s.error_bound_ns = (b - a) / 2;
    }
  }
  return s;
}

void write_arrays(const std::string& out_dir, const std::string& stem, PointOut& out) {
  if (out_dir.empty() || out.arrays.empty()) return;
  JsonObj files;
  for (auto& [name, values] : out.arrays) {
    std::string file = stem + "." + name + ".npy";
    write_npy_f64(out_dir + "/" + file, values.data(), values.size());
    files.add(name, file);
  }
  out.fields.add("samples", files);
}

template <class T>
Status run_points(const Params& p, Ctx& c, const std::string& out_dir, JsonObj* transport_info) {
  std::vector<PointSpec> plan = plan_points(p, c.caps);
  uint64_t max_msg = 0;
  for (const auto& pt : plan) max_msg = std::max(max_msg, pt.size);
  T t(p, c.role);
  t.connect(c.ctrl, max_msg);
  if (transport_info) t.describe(*transport_info);
  ClockSync sync;
  if ((p.experiment == "oneway" || p.experiment == "stream") && !c.same_host) sync = probe_clock(c);

  for (const PointSpec& pt : plan) {
    c.ctrl.barrier("start of point");
    const uint64_t size = pt.size;
    const uint64_t iters = iters_for(p, size);
    const uint64_t warmup = p.experiment == "stream" ? stream_warmup(p, pt.rate)
                            : p.experiment == "check" ? 0
                                                      : warmup_for(p, size);
    PointOut out;
    Status st;
    const bool client = c.role == Role::client;
    if (p.experiment == "lat")
      st = client ? lat_client(t, c, size, iters, warmup, out) : lat_server(t, c, size, out);
    else if (p.experiment == "oneway")
      st = client ? oneway_client(t, c, size, warmup, sync, out) : oneway_server(t, c, size, warmup);
    else if (p.experiment == "check")
      st = client ? check_client(t, c, out) : check_server(t, c);
    else if (p.experiment == "stream")
      st = client ? stream_client(t, c, pt.rate, pt.values, sync, out) : stream_server(t, c, pt.rate, pt.values);
    else
      st = bw_run(t, c, size, iters, warmup, out);

    if (client) {
      JsonObj line;
      line.add("type", "point").add("experiment", p.experiment).add("transport", p.transport)
          .add("poll", poll_name(p.poll)).add("size", size).add("warmup", warmup);
      std::string stem = p.experiment + "-" + p.transport + "-" + poll_name(p.poll) + "-" + std::to_string(size) + "B";
      if (p.experiment == "stream") stem += "-" + std::to_string(pt.rate) + "Hz";
      write_arrays(out_dir, stem, out);
      std::string body = out.fields.str();
      line.add("partial", out.partial || st != Status::ok);
      // Splice the experiment's own fields after the common ones.
      std::string s = line.str();
      if (body.size() > 2) s = s.substr(0, s.size() - 1) + ", " + body.substr(1);
      std::fwrite((s + "\n").data(), 1, s.size() + 1, stdout);
      std::fflush(stdout);
    }
    if (st != Status::ok) return st;
  }
  return Status::ok;
}

using PointsFn = Status (*)(const Params&, Ctx&, const std::string&, JsonObj*);
using CapsFn = Caps (*)(const Params&);

// The transport table: one entry per transport, each instantiating the
// experiment templates for its own class.
struct TransportEntry {
  const char* name;
  CapsFn caps;
  PointsFn points;
};
// Optional transports are compiled in when CMake finds their library.
constexpr TransportEntry kTransports[] = {
    {"shm", caps_of<ShmTransport>, run_points<ShmTransport>},
    {"tcp", caps_of<TcpTransport>, run_points<TcpTransport>},
    {"udp", caps_of<UdpTransport>, run_points<UdpTransport>},
#ifdef FM_HAVE_ZMQ
    {"zmq", caps_of<ZmqTransport>, run_points<ZmqTransport>},
#endif
#ifdef FM_HAVE_NNG
    {"nng", caps_of<NngTransport>, run_points<NngTransport>},
#endif
#ifdef FM_HAVE_NANOMSG
    {"nanomsg", caps_of<NanomsgTransport>, run_points<NanomsgTransport>},
#endif
#ifdef FM_HAVE_OFI
    {"ofi", caps_of<OfiTransport>, run_points<OfiTransport>},
#endif
#ifdef FM_HAVE_VERBS
    {"verbs", caps_of<VerbsTransport>, run_points<VerbsTransport>},
#endif
};

const TransportEntry& entry_for(const std::string& name) {
  for (const auto& e : kTransports)
    if (name == e.name) return e;
  usage_error("unknown transport '" + name + "' (built in: " + available_transports() + ")");
}

// Checks that need the transport's capabilities; both ends run them.
void check_against_caps(const Params& p, const Caps& caps, bool same_host) {
  if (p.experiment == "stream") {
    for (uint64_t v : p.values)
      if (stream_size(v) > caps.max_msg_size)
        usage_error(p.transport + ": a sample of " + std::to_string(v) + " values (" + std::to_string(stream_size(v)) +
                    " B) exceeds the transport's maximum message of " + std::to_string(caps.max_msg_size) + " B");
  } else if (!p.sweep && p.size > caps.max_msg_size)
    usage_error(p.transport + ": message size " + std::to_string(p.size) + " B exceeds the transport's maximum of " +
                std::to_string(caps.max_msg_size) + " B");
  if (caps.same_host_only && !same_host)
    usage_error(p.transport + ": both ends must run on the same host (they share memory)");
  if (!caps.reliable && p.experiment == "oneway" && p.size < 4)
    usage_error("oneway over " + p.transport + " needs --size >= 4 to carry a sequence number (the transport may lose or reorder)");
}

void write_status_line(Status st, const std::string& msg) {
  JsonObj end;
  end.add("type", "end").add("status", st == Status::ok ? "ok" : st == Status::interrupted ? "interrupted" : "failed");
  if (!msg.empty()) end.add("message", msg);
  emit_line(end);
}

}  // namespace

Caps transport_caps(const Params& p) { return entry_for(p.transport).caps(p); }

std::string available_transports() {
  std::string s;
  for (const auto& e : kTransports) s += (s.empty() ? "" : ",") + std::string(e.name);
  return s;
}

int run_client(const Params& p, const ClientOptions& o) {
  validate(p);
  const TransportEntry& entry = entry_for(p.transport);
  Caps caps = entry.caps(p);
  check_against_caps(p, caps, true);
  if (!o.out_dir.empty() && mkdir(o.out_dir.c_str(), 0755) != 0 && errno != EEXIST)
    sys_error("cannot create " + o.out_dir);
  pin_to_cpu(o.cpu);
  Clock clk(p.clock == "tsc");
  Ctrl ctrl = Ctrl::connect(o.server, kDefaultPort, p.timeout_ms);

  std::string me = host_id();
  const std::string hello = encode_hello(me, random_bytes(kNonceBytes), encode_params(p));
  ctrl.send(CtrlType::hello, hello);
  const std::string server_nonce = decode_challenge(ctrl.recv(CtrlType::challenge, "server's answer to hello"));
  if (!server_nonce.empty()) {
    if (o.token.empty())
      runtime_error("authentication failed: the server requires a token (--token-file F or FABMETER_TOKEN)");
    ctrl.send(CtrlType::auth, client_proof(o.token, hello, server_nonce));
  } else if (!o.token.empty()) {
    std::fprintf(stderr, "fabmeter-engine: warning: the server at %s asks for no token: it is not authenticated\n",
                 o.server.c_str());
  }
  const Welcome w = decode_welcome(ctrl.recv(CtrlType::welcome, "server's welcome"));
  if (server_nonce.empty() ? !w.mac.empty()
                           : !proof_matches(server_proof(o.token, hello, server_nonce, w.body), w.mac))
    runtime_error("authentication failed: the server did not prove it knows the token");
  const std::string& server_host = w.host;
  const std::string& server_env = w.env;
  bool same_host = server_host == me;
  if (caps.same_host_only && !same_host)
    usage_error(p.transport + ": the server runs on another host; shared memory needs both ends on one host");
  ctrl.set_max_frame(session_max_frame(p, plan_points(p, caps)));

  Ctx c{p, clk, ctrl, Role::client, caps, same_host, {}};
  JsonObj params, transport_info;
  params.add("experiment", p.experiment);
  for (const auto& opt : option_table()) params.add(key_of(opt.name), opt.get(p));
  Status st;
  std::string msg;
  JsonObj start;
  start.add("type", "start").add("version", kEngineVersion).add("points", static_cast<uint64_t>(plan_points(p, caps).size()))
      .add("env", engine_env(clk, o.cpu))
      .add_raw("server_env", server_env).add("same_host", same_host).add("params", params);
  emit_line(start);
  try {
    st = entry.points(p, c, o.out_dir, &transport_info);
    msg = c.failure;
    if (st == Status::ok) ctrl.send(CtrlType::bye);
  } catch (const Error& e) {
    if (e.kind == ErrorKind::usage) throw;
    st = Status::failed;
    msg = e.what();
  }
  if (st == Status::interrupted && msg.empty()) msg = "interrupted";
  JsonObj tinfo;
  tinfo.add("type", "transport").add("transport", p.transport).add("granted", transport_info);
  emit_line(tinfo);
  write_status_line(st, msg);
  if (st != Status::ok && st != Status::interrupted)
    std::fprintf(stderr, "fabmeter-engine: error: %s\n", msg.empty() ? status_name(st) : msg.c_str());
  return exit_code(st);
}

namespace {

// A client has this long to send its hello, and then its proof.
constexpr uint32_t kHandshakeTimeoutMs = 2000;

// One session on the server side. Returns the exit code it would have.
int serve_one(Ctrl ctrl, const ServerOptions& o, const Clock& tsc, const Clock& mono) {
  // Nothing is allocated or validated for a client before it is authenticated.
  ctrl.set_timeout_ms(kHandshakeTimeoutMs);
  const std::string hello = ctrl.recv(CtrlType::hello, "client hello");
  Hello h;
  try {
    h = decode_hello(hello);
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    throw;
  }
  if (h.version != kProtocolVersion) {
    ctrl.send(CtrlType::refuse, "protocol version mismatch: server speaks " + std::to_string(kProtocolVersion) +
                                    ", client " + std::to_string(h.version));
    return 2;
  }
  const std::string server_nonce = o.token.empty() ? std::string() : random_bytes(kNonceBytes);
  ctrl.send(CtrlType::challenge, server_nonce);
  if (!o.token.empty()) {
    std::string proof;
    try {
      proof = decode_auth(ctrl.recv(CtrlType::auth, "client's proof"));
    } catch (const Error& e) {
      runtime_error("authentication failed: client " + ctrl.peer_addr() + ": " + e.what());
    }
    if (!proof_matches(client_proof(o.token, hello, server_nonce), proof)) {
      ctrl.send(CtrlType::fail, "authentication failed (wrong token)");
      runtime_error("authentication failed: client " + ctrl.peer_addr() + " sent a wrong proof");
    }
  }
  const std::string& client_host = h.host;
  Params p;
  const TransportEntry* entry = nullptr;
  Caps caps{};
  bool same_host = client_host == host_id();
  try {
    p = decode_params(h.params);
    validate(p);
    entry = &entry_for(p.transport);
    caps = entry->caps(p);
    check_against_caps(p, caps, same_host);
  } catch (const Error& e) {
    ctrl.send(CtrlType::refuse, e.what());
    return 2;
  }
  ctrl.set_timeout_ms(p.timeout_ms);
  // Both ends must read the same clock for one-way stamps: the client's choice.
  const Clock& clk = p.clock == "tsc" ? tsc : mono;
  const std::string body = host_id() + "\n" + engine_env(clk, o.cpu).str();
  ctrl.send(CtrlType::welcome,
            encode_welcome(o.token.empty() ? std::string() : server_proof(o.token, hello, server_nonce, body), body));
  Ctx c{p, clk, ctrl, Role::server, caps, same_host, {}};
  Status st = entry->points(p, c, "", nullptr);
  if (st == Status::ok) {
    ctrl.recv(CtrlType::bye, "end of session");
    return 0;
  }
  std::fprintf(stderr, "fabmeter-engine: session ended: %s%s%s\n", status_name(st), c.failure.empty() ? "" : ": ",
               c.failure.c_str());
  return exit_code(st);
}

}  // namespace

int run_server(const ServerOptions& o) {
  pin_to_cpu(o.cpu);
  // Calibrated once, before listening: a session's hello is answered at once.
  const Clock tsc(true), mono(false);
  Listener l(o.bind, o.port);
  if (o.token.empty() && !l.loopback_only())
    std::fprintf(stderr,
                 "fabmeter-engine: warning: serving on %s without a token: anyone who reaches port %u can run "
                 "sessions here (use --token-file F or FABMETER_TOKEN)\n",
                 o.bind.c_str(), unsigned(l.port()));
  JsonObj ev;
  ev.add("event", "listening").add("bind", o.bind).add("port", static_cast<uint64_t>(l.port()));
  emit_line(ev);
  for (;;) {
    Ctrl ctrl = l.accept(5000);
    if (ctrl.fd() < 0) return 130;
    int rc;
    try {
      rc = serve_one(std::move(ctrl), o, tsc, mono);
    } catch (const Error& e) {
      std::fprintf(stderr, "fabmeter-engine: session failed: %s\n", e.what());
      rc = static_cast<int>(e.kind);
    }
    if (g_stop_signal) return 130;
    if (o.once) return rc;
  }
}

}  // namespace fm
