// setup: what a connection costs before its first message, as netperf's
// TCP_CRR measures connect/request/response (here: the connect alone), and
// what registering memory costs. Percentiles over repetitions, warm-up ones
// excluded.
//   connect: each repetition the client constructs a new transport of the
//     run's kind and calls its connect() (the server the same, in step), and
//     destroys it; timed on the client from construction to connect()
//     returned. Every connect() ends with a control-channel exchange, so
//     the time includes both ends' work; a control-channel round trip is
//     timed each repetition beside it (control_rtt_ns), and the point says
//     what the connect covers (the transport's connect_covers) and, where
//     the transport tells them, its steps (connect_phases).
//   mr: the client registers a region of register_bytes with the connected
//     transport's device and deregisters it, each timed; once on base pages
//     and once on huge pages (fabmeter/pages.hpp), each region touched
//     before the first registration. The server waits.
#pragma once
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "fabmeter/pages.hpp"
#include "fabmeter/stats.hpp"

namespace fm {

// The transports' rings are built for messages of this size in every setup
// point (the sizes of the run's options are those mr registers).
constexpr uint64_t kSetupMsgBytes = 32;
// The largest region setup registers: the top of its registration sweep.
constexpr uint64_t kMaxRegisterBytes = 1ull << 30;

template <Transport T>
const char* connect_covers(const T& t) {
  if constexpr (requires { t.connect_covers(); }) return t.connect_covers();
  return "the transport's connect()";
}

// Samples of one named figure per repetition, in the order first seen.
struct NamedSamples {
  std::vector<std::pair<std::string, std::vector<double>>> figures;
  std::vector<double>& operator[](const std::string& name) {
    for (auto& [n, v] : figures)
      if (n == name) return v;
    return figures.emplace_back(name, std::vector<double>{}).second;
  }
};

template <Transport T, Poll P>
Status setup_connect_client(T& own, const Fresh<T>& fresh, Ctx& c, const Point& pt, PointOut& out) {
  const Clock& clk = c.clk;
  std::vector<double> connect_ns, teardown_ns, ctrl_ns;
  for (auto* v : {&connect_ns, &teardown_ns, &ctrl_ns}) v->reserve(pt.iterations);
  NamedSamples phases;
  std::string covers;
  Status st = Status::ok;
  const uint64_t total = pt.warmup + pt.iterations;
  for (uint64_t i = 0; i < total; ++i) {
    const bool stop = stop_requested();
    c.ctrl.exchange(stop ? "stop" : "go", "setup repetition");
    if (stop) {
      st = Status::interrupted;
      break;
    }
    const uint64_t b0 = clk.ticks();
    c.ctrl.barrier("setup control round trip");
    const uint64_t t0 = clk.ticks();
    std::unique_ptr<T> t = fresh();
    t->connect(c.ctrl, pt.size);
    const uint64_t t1 = clk.ticks();
    if (i == 0) covers = connect_covers(*t);
    if (i < pt.warmup) continue;
    if constexpr (requires { t->connect_phases(); })
      for (const ConnectPhase& ph : t->connect_phases()) phases[ph.name].push_back(static_cast<double>(ph.ns));
    t.reset();
    const uint64_t t2 = clk.ticks();
    ctrl_ns.push_back(clk.to_ns(static_cast<double>(t0 - b0)));
    connect_ns.push_back(clk.to_ns(static_cast<double>(t1 - t0)));
    teardown_ns.push_back(clk.to_ns(static_cast<double>(t2 - t1)));
  }
  out.fields.add("what", "connect").add("iterations", static_cast<uint64_t>(connect_ns.size()))
      .add("covers", covers.empty() ? connect_covers(own) : covers)
      .add("latency_kind", "connect (client: construction to connect() returned)")
      .add("registration", c.caps.registration ? c.caps.registration : "not applicable");
  add_samples_kind(out, keep_raw(c.p));
  add_latency(out, c.p, "connect_ns", std::move(connect_ns));
  add_latency(out, c.p, "teardown_ns", std::move(teardown_ns));
  add_latency(out, c.p, "control_rtt_ns", std::move(ctrl_ns));
  if (!phases.figures.empty()) {
    JsonObj steps;
    for (auto& [name, v] : phases.figures) steps.add(name, to_json(summarize(v.data(), v.size())));
    out.fields.add("phases_ns", steps);
  }
  return st;
}

template <Transport T, Poll P>
Status setup_connect_server(const Fresh<T>& fresh, Ctx& c, const Point& pt) {
  for (uint64_t i = 0; i < pt.warmup + pt.iterations; ++i) {
    const std::string go = c.ctrl.exchange("", "setup repetition");
    if (go == "stop") return Status::interrupted;
    if (go != "go") runtime_error("setup: unexpected control frame from the client (version mismatch?)");
    c.ctrl.barrier("setup control round trip");
    std::unique_ptr<T> t = fresh();
    t->connect(c.ctrl, pt.size);
  }
  return Status::ok;
}

// One page kind of an mr point: register and deregister the region, warm-up
// repetitions first; false, with `refused` saying why, if the device refused.
template <Transport T>
bool time_registration(T& t, const Clock& clk, const Region& r, const Point& pt, const char* call,
                       std::vector<double>& reg, std::vector<double>& dereg, std::string& refused) {
  for (uint64_t i = 0; i < pt.warmup + pt.iterations && !stop_requested(); ++i) {
    const uint64_t t0 = clk.ticks();
    void* h = t.register_memory(r.data(), pt.register_bytes);
    const uint64_t t1 = clk.ticks();
    if (!h) {
      const int err = errno;
      refused = std::string(call) + ": " + std::strerror(err) +
                (err == ENOMEM || err == EPERM ? " (the locked-memory limit, `ulimit -l`?)" : "");
      return false;
    }
    const int err = t.deregister_memory(h);
    const uint64_t t2 = clk.ticks();
    if (err) {
      refused = std::string(call) + ": deregistration: " + std::strerror(err);
      return false;
    }
    if (i < pt.warmup) continue;
    reg.push_back(clk.to_ns(static_cast<double>(t1 - t0)));
    dereg.push_back(clk.to_ns(static_cast<double>(t2 - t1)));
  }
  return true;
}

template <Transport T, Poll P>
Status setup_mr_client(T& t, Ctx& c, const Point& pt, PointOut& out) {
  out.fields.add("what", "mr").add("registered_bytes", pt.register_bytes).add("registration", c.caps.registration)
      .add("covers", "the registration call alone on a region touched before (its pages present): pinning and the "
                     "device's translation entries, then its deregistration; the provider decides what each does");
  add_samples_kind(out, keep_raw(c.p));
  uint64_t counted = 0;
  if constexpr (requires(void* p) { t.register_memory(p, size_t{}); }) {
    for (const bool huge : {false, true}) {
      const std::string prefix = huge ? "huge_" : "";
      Region r(pt.register_bytes, huge);
      std::vector<double> reg, dereg;
      reg.reserve(pt.iterations);
      dereg.reserve(pt.iterations);
      std::string refused;
      if (!r.kind()) {
        out.fields.add_raw("huge_pages", "null").add_raw("huge_register_ns", "null").add("huge_pages_reason", r.why());
        continue;
      }
      if (huge) out.fields.add("huge_pages", r.kind()).add("huge_backed_bytes", r.huge_bytes());
      if (!time_registration(t, c.clk, r, pt, c.caps.registration, reg, dereg, refused)) {
        out.fields.add_raw(prefix + "register_ns", "null").add(prefix + "refused", refused);
        continue;
      }
      counted = std::max<uint64_t>(counted, reg.size());
      add_latency(out, c.p, prefix + "register_ns", std::move(reg));
      add_latency(out, c.p, prefix + "deregister_ns", std::move(dereg));
    }
  } else {
    runtime_error(c.p.transport + ": caps name a registration the transport has no register_memory for");
  }
  out.fields.add("iterations", counted);
  if (stop_requested()) return Status::interrupted;
  c.ctrl.send(CtrlType::end_point, "0");
  return Status::ok;
}

struct SetupExperiment : ExperimentDefaults {
  static constexpr const char* name = "setup";
  static constexpr bool kFreshConnections = true;
  static void validate(const Params& p) {
    if (p.what == "connect" && (p.sweep || p.size != CommonOptions{}.size))
      usage_error("setup: -s, -a and --max-size give the sizes --what mr registers, not with --what connect");
    if (p.size > kMaxRegisterBytes || (p.sweep && p.max_size > kMaxRegisterBytes))
      usage_error("setup: registration sizes are limited to 1 GiB (-s, --max-size)");
    if (p.sweep && p.max_size < 4096) usage_error("setup: the -a sweep starts at 4 KiB: give --max-size of at least 4K");
  }
  static constexpr uint64_t kIterations = 200;  // connections or registrations of up to 1 GiB, not messages
  static constexpr uint64_t kWarmup = 10;
  static bool registers(const Params& p) { return p.what != "connect"; }
  static std::vector<Point> plan(const Params& p, const Caps& caps) {
    std::vector<Point> points;
    if (p.what != "mr")
      points.push_back({.size = kSetupMsgBytes, .iterations = counted_iterations<SetupExperiment>(p, kSetupMsgBytes),
                        .warmup = counted_warmup<SetupExperiment>(p, kSetupMsgBytes)});
    if (!registers(p) || !caps.registration) return points;
    std::vector<uint64_t> sizes{p.size};
    if (p.sweep) {
      sizes.clear();
      for (uint64_t s = 4096; s <= p.max_size; s *= 2) sizes.push_back(s);
    }
    for (uint64_t s : sizes)
      points.push_back({.size = kSetupMsgBytes, .iterations = counted_iterations<SetupExperiment>(p, static_cast<double>(s)),
                        .warmup = counted_warmup<SetupExperiment>(p, static_cast<double>(s)),
                        .register_bytes = s});
    return points;
  }
  static void check_caps(const Params& p, const Caps& caps) {
    if (p.what == "mr" && !caps.registration)
      usage_error(p.transport + ": setup --what mr: not applicable, the transport registers no memory "
                                "(verbs and ofi do)");
  }
  static PointCost cost(const Params& p, const Caps&, const Point& pt) {
    // A connect takes at least a control-channel round trip; a registration, a page's worth of a system call.
    const double n = static_cast<double>(pt.iterations + pt.warmup);
    const double each_ns = pt.register_bytes ? 1e3 : 2 * kMinRoundTripNs;
    const double arrays = pt.register_bytes ? 4 : 3;
    return {0, n * each_ns * 1e-9, keep_raw(p) ? 8 * arrays * static_cast<double>(pt.iterations) : 0};
  }
  template <Transport T, Poll P>
  static Status client(T& t, const Fresh<T>& fresh, Ctx& c, const Point& pt, PointOut& out) {
    if (pt.register_bytes) return setup_mr_client<T, P>(t, c, pt, out);
    return setup_connect_client<T, P>(t, fresh, c, pt, out);
  }
  template <Transport T, Poll P>
  static Status server(T& t, const Fresh<T>& fresh, Ctx& c, const Point& pt, PointOut&) {
    if (!pt.register_bytes) return setup_connect_server<T, P>(fresh, c, pt);
    const Status st = sleep_until_ctrl(t, c);
    if (st != Status::ctrl_pending) return st;
    c.ctrl.recv(CtrlType::end_point, "end of setup point");
    return Status::ok;
  }
};

}  // namespace fm
