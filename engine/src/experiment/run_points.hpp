// A session's points on one transport (run_points) and the transport
// table's entries. Each transport's entries are compiled in a unit of their
// own, generated from run_points_for.cpp.in by CMakeLists.txt's
// fm_transport: instantiating every experiment for every transport in one
// unit made that unit the build's longest step by far.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "experiment/common.hpp"
#include "experiment/table.hpp"
#include "fabmeter/clock.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/trace.hpp"

namespace fm {

// A registry line (generated fabmeter/transports.def): the class and the
// option groups it reads.
template <class T, const char* Groups>
struct TransportDef {
  using Type = T;
  static constexpr std::string_view kGroups = Groups;
};

// The groups of p that D's transport reads, in OptionGroups order: the
// arguments of its caps() and, before a Use, of its constructor (const, from
// a const p; server_claim's from a mutable p).
template <class D, class P, class... G>
auto groups_for(P& p, std::tuple<G...>*) {
  return std::tuple_cat([&]() {
    if constexpr (in_list(D::kGroups, G::kGroup)) return std::tuple<decltype(group_of<G>(p))>(group_of<G>(p));
    else return std::tuple<>();
  }()...);
}
template <class D, class P>
auto groups_for(P& p) { return groups_for<D>(p, static_cast<OptionGroups*>(nullptr)); }

template <class D>
Caps op_caps_of(const Params& p) {
  return std::apply([](const auto&... g) { return D::Type::caps(g...); }, groups_for<D>(p));
}
// Each op's caps of a point's ops, an op's knobs refused as its transport
// refuses them for --op, the message naming --ops.
template <class D>
std::vector<Caps> each_op_caps(const Params& p) {
  std::vector<Caps> each;
  for (uint32_t i = 0; i < p.rdma.ops.size(); ++i) {
    try {
      each.push_back(op_caps_of<D>(for_connection(p, i)));
    } catch (const Error& e) {
      if (e.kind == ErrorKind::usage) usage_error(op_option(p.rdma) + ": " + e.what());
      throw;
    }
  }
  return each;
}
Caps merge_op_caps(const Params& p, const std::vector<Caps>& each);
// The point's caps: its op's, or with --ops what every op allows.
template <class D>
Caps caps_of(const Params& p) {
  return p.rdma.ops.empty() ? op_caps_of<D>(p) : merge_op_caps(p, each_op_caps<D>(p));
}

// The session's hooks of D's transport (transport.hpp), each a no-op where
// the class has none; one it has must take exactly its groups.
template <class D>
void server_claim_of(Params& p, const ServerPlaces& at) {
  using T = typename D::Type;
  if constexpr (requires { &T::server_claim; })
    std::apply([&](auto&... g) {
      static_assert(requires { T::server_claim(g..., at); }, "server_claim(G&..., const ServerPlaces&)");
      T::server_claim(g..., at);
    }, groups_for<D>(p));
}
template <class D>
double queued_bytes_of(const Params& p, uint64_t size) {
  using T = typename D::Type;
  if constexpr (requires { &T::queued_bytes; })
    return std::apply([&](const auto&... g) {
      static_assert(requires { { T::queued_bytes(g..., size) } -> std::same_as<double>; },
                    "double queued_bytes(const G&..., uint64_t size)");
      return T::queued_bytes(g..., size);
    }, groups_for<D>(p));
  else
    return 0;
}
template <class D>
FabricPort fabric_port_of(const Params& p) {
  using T = typename D::Type;
  if constexpr (requires { &T::fabric_port; })
    return std::apply([](const auto&... g) {
      static_assert(requires { { T::fabric_port(g...) } -> std::same_as<FabricPort>; },
                    "FabricPort fabric_port(const G&...)");
      return T::fabric_port(g...);
    }, groups_for<D>(p));
  else
    return {};
}

// The steps of run_points that are the same for every transport (run_points.cpp).
const ExperimentEntry& experiment_for(const std::string& name);
// params.hpp's validate, then the experiment's own checks: both ends, before the transport.
void validate_run(const Params& p);
void write_arrays(const std::string& out_dir, const std::string& stem, PointOut& out);
Status end_mid_point(Ctx& ctx);
bool reason_follows(const Ctrl& ctrl);
Use use_of(const Params& p, const ExperimentEntry& experiment, Role role);
// After a point: ends its CPU window; a server that finished the point
// sends its side (cpu_cost), a client that did reads and checks it.
// Returns the server's side as JSON for the client ("null" if none came).
std::string exchange_cpu_cost(Ctx& ctx, Status st);

template <class D>
Status run_points(const Params& p, Ctx& ctx, const std::string& out_dir, JsonObj* transport_info) {
  using T = typename D::Type;
  static_assert(Transport<T>);
  const ExperimentEntry& experiment = experiment_for(p.experiment);
  const std::vector<Point> plan = experiment.plan(p, ctx.caps);
  uint64_t max_msg = 0;
  for (const Point& pt : plan) max_msg = std::max(max_msg, pt.largest());
  const char* role = ctx.role == Role::client ? "client" : "server";
  trace_phase(role, "connect");
  // One transport per connection (load's --conns), connected in turn; a
  // deque, as transports are neither copied nor moved.
  std::deque<T> transports;
  std::vector<T*> conns;
  const uint32_t n_conns = experiment.connections(p);
  // --ops: connection i runs op i mod their count, with that op's caps.
  if (!p.rdma.ops.empty()) ctx.op_caps = each_op_caps<D>(p);
  for (uint32_t i = 0; i < n_conns; ++i) {
    const Params pc = for_connection(p, i);
    T& t = std::apply([&](const auto&... args) -> T& { return transports.emplace_back(args...); },
                      std::tuple_cat(groups_for<D>(pc), std::tuple<Use>(use_of(pc, experiment, ctx.role))));
    t.connect(ctx.ctrl, max_msg);
    conns.push_back(&t);
  }
  ctx.start_steps.transport_connected = monotonic_ns();
  if (transport_info) {
    conns[0]->describe(*transport_info);
    if (n_conns > 1) transport_info->add("connections", static_cast<uint64_t>(n_conns));
  }
  // The first burst of clock probes; the experiment probes again after each point.
  ctx.sync.probed = experiment.remote_clock && !ctx.same_host;
  if (ctx.sync.probed) {
    open_clock_probes(ctx);
    probe_clock(ctx);
  }
  ctx.start_steps.probed = monotonic_ns();
  // Picked once: the loop is compiled for this transport and poll mode.
  const PointLoop<T> loop = point_loop<T>(experiment, ctx.role, p.poll);
  const Fresh<T> fresh = [&] {
    return std::apply([](const auto&... args) { return std::make_unique<T>(args...); },
                      std::tuple_cat(groups_for<D>(p), std::tuple<Use>(use_of(p, experiment, ctx.role))));
  };

  // --start-at: when the first point was ready (connected, first probes done, both ends at its barrier) and
  // when it went on after waiting; its first message follows at once.
  int64_t ready_ns = 0, started_ns = 0;
  for (const Point& pt : plan) {
    ctx.ctrl.barrier("start of point");
    if (ctx.start_at_ns && &pt == &plan.front()) {
      ready_ns = monotonic_ns();
      started_ns = wait_until_monotonic(ctx.start_at_ns, ctx.p.poll == Poll::busy);
    }
    ctx.step0_ns = &pt == &plan.front() ? ctx.start_at_ns : 0;
    trace_phase(role, "point");
    PointOut out;
    ctx.sleeps = 0;
    ctx.cpu.open_point();
    // Lost at a control frame before any check noticed (a send that meets the
    // reset, a lossy point that ran out its time and then waits on a frozen
    // server's cpu cost): what was measured stays, partial, as after the guard's.
    Status st = Status::ok;
    const auto lost = [&](const RemoteLost& e) {
      ctx.failure = e.what();
      st = Status::peer_lost;
    };
    try {
      st = loop(Conns<T>(conns), fresh, ctx, pt, out);
    } catch (const RemoteLost& e) {
      lost(e);
    }
    trace_phase(role, "results");
    std::string server_cpu = "null";
    try {
      server_cpu = exchange_cpu_cost(ctx, st);
    } catch (const RemoteLost& e) {
      lost(e);
    }

    if (ctx.role == Role::client) {
      JsonObj line;
      line.add("type", "point").add("experiment", p.experiment).add("transport", p.transport)
          .add("poll", poll_name(p.poll)).add("size", pt.size).add("warmup", pt.warmup);
      if (p.poll == Poll::event) line.add("sleeps", ctx.sleeps);
      if (started_ns && &pt == &plan.front())
        line.add("ready_mono_ns", ready_ns).add("started_mono_ns", started_ns)
            .add("start_late_ns", started_ns - ctx.start_at_ns).add("start_steps_mono_ns", ctx.start_steps.json());
      std::string stem = p.experiment + "-" + p.transport + "-" + poll_name(p.poll) + "-" + std::to_string(pt.size) + "B";
      if (pt.rate) stem += "-" + std::to_string(pt.rate) + "Hz";
      if (pt.of_capacity > 0) stem += "-capacity" + std::to_string(static_cast<int>(std::lround(pt.of_capacity * 1000))) + "permille";
      if (pt.capacity) stem += "-capacity";
      if (pt.register_bytes) stem += "-reg" + std::to_string(pt.register_bytes) + "B";
      write_arrays(out_dir, stem, out);
      out.fields.add("cpu", JsonObj().add("client", ctx.cpu.side()).add_raw("server", server_cpu));
      std::string body = out.fields.str();
      line.add("partial", out.partial || st != Status::ok);
      // Splice the experiment's own fields after the common ones.
      std::string text = line.str();
      if (body.size() > 2) text = text.substr(0, text.size() - 1) + ", " + body.substr(1);
      text += "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    if (st == Status::ctrl_pending ||
        (ctx.role == Role::client && (st == Status::peer_lost || st == Status::failed) && reason_follows(ctx.ctrl)))
      st = end_mid_point(ctx);
    if (st != Status::ok) return st;
  }
  return Status::ok;
}

// Each transport built in: its caps and its points, each defined in its own
// unit (a plugin's are in the plugin: session/plugin.hpp).
#define FM_TRANSPORT(name, cls, groups) \
  Caps name##_caps(const Params& p);    \
  Status name##_points(const Params& p, Ctx& ctx, const std::string& out_dir, JsonObj* transport_info);
#define FM_TRANSPORT_PLUGIN(name, groups, libs)
#define FM_TRANSPORT_ABSENT(name, groups, why)
#include "fabmeter/transports.def"
#undef FM_TRANSPORT
#undef FM_TRANSPORT_PLUGIN
#undef FM_TRANSPORT_ABSENT

}  // namespace fm
