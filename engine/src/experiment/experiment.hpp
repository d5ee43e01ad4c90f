// The experiment contract. Each experiment is a struct in its own header
// (table.hpp's `Experiments` lists them) with
//
//   static constexpr const char* name;
//   static std::vector<Point> plan(const Params&, const Caps&);   // its points, in order
//   static PointCost cost(const Params&, const Caps&, const Point&);  // its share of a point's server cost
//   template <Transport T, Poll P> static Status client(T&, Ctx&, const Point&, PointOut&);
//   template <Transport T, Poll P> static Status server(T&, Ctx&, const Point&, PointOut&);
//
// (with kManyConnections, client and server take Conns<T> instead of T&;
// with kFreshConnections, they take a Fresh<T> after the T&)
//
// and the hooks of ExperimentDefaults below, hidden where it differs. The
// list of experiments is in table.hpp; the session (client.cpp, server_session.cpp) knows none
// of them by name.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "experiment/common.hpp"

namespace fm {

// What one point needs on the server beyond the transport's own buffers
// (stamp arrays, sinks), the least time it can take, and the sample storage
// the client allocates and locks before it starts (kMaxSampleBytes).
struct PointCost {
  double memory_bytes = 0;
  double seconds = 0;
  double sample_bytes = 0;
};

// The most sample storage one point may take on the client: a plan over it
// is refused with the plan (exit 2), never met by a failed allocation.
inline constexpr double kMaxSampleBytes = static_cast<double>(2ull << 30);
// The most sample arrays (files under --out) one point keeps: oneway's five
// (latency, post, send, latency from send, completion) are the most.
inline constexpr size_t kMaxSampleArrays = 8;

// A point's connections, for experiments with kManyConnections.
template <class T>
using Conns = std::span<T* const>;

// A new transport like the point's own, constructed and not yet connected,
// for experiments with kFreshConnections (setup times their connect).
template <class T>
using Fresh = std::function<std::unique_ptr<T>()>;

// How an experiment's --flows are merged (ExperimentDefaults::kFlows).
enum class Flows { none, round_trips, throughput };

// Floors no transport beats here, so a plan's run time is never overestimated.
constexpr double kMinRoundTripNs = 50, kMinMessageNs = 5;

struct ExperimentDefaults {
  // One-way stamps taken by the other end: across hosts the session probes the
  // other end's clock first, and the experiment calls probe_clock after each
  // point's report, in both roles (ClockSync).
  static constexpr bool kRemoteClock = false;
  // Every figure is two stamps read by one process: pinned, it may read a
  // TSC that is not invariant (Clock's tsc_cpu) and skip the system call a
  // VM's clock_gettime can cost.
  static constexpr bool kOneCpuTicks = false;
  // The most messages a point has in flight each way (Use::in_flight); 0: no bound.
  static constexpr uint32_t kInFlight = 0;
  // Every message of a point has the point's size, and the loop says so
  // (fix_message_size): a transport may carry no length (Use::fixed_sizes).
  static bool fixed_sizes(const Params&) { return false; }
  // The largest control frame the client receives for this point (the
  // server's stamp report); 0: only small frames (kMaxFrameDefault).
  static uint64_t report_bytes(const Params&, const Point&) { return 0; }
  // Refuses (usage_error) a plan the transport cannot carry.
  static void check_caps(const Params& p, const Caps& caps) {
    if (!p.sweep && p.size > caps.max_msg_size)
      usage_error(p.transport + ": message size " + std::to_string(p.size) + " B exceeds the transport's maximum of " +
                  std::to_string(caps.max_msg_size) + " B" +
                  (caps.max_msg_note.empty() ? "" : " (" + caps.max_msg_note + ")"));
  }
  // The most sends the transport may keep posted and not completed
  // (transport.hpp's Use); 0: as many as its send queue allows.
  static uint32_t send_window(const Params&) { return 0; }
  // Whether the server writes a file for this run (into the session's own
  // data directory; the client's path is replaced by one there).
  static bool writes_file(const Params&) { return false; }
  // Transports (connections) a point's loops get. With kManyConnections the
  // loops take them all (Conns<T>); otherwise one (T&).
  static constexpr bool kManyConnections = false;
  static uint32_t connections(const Params&) { return 1; }
  // --flows: connections(p) of them, each driven by a thread of its own
  // through the one-connection loops (flows.hpp), merged on the client as
  // round trips or as throughput.
  static constexpr Flows kFlows = Flows::none;
  // The loops also get a Fresh<T>, to make transports of their own.
  static constexpr bool kFreshConnections = false;
  // The client's chance to fill in, before the hello, what only it can know
  // (load: the largest message of a workload file the server never reads).
  static void resolve(Params&, const Caps&) {}
  // Refuses (usage_error) what this experiment cannot run, on its own
  // options, before the transport is known (params.hpp's validate does the
  // common ones).
  static void validate(const Params&) {}
  // Counted points (counted_iterations, counted_warmup): the messages measured
  // and warmed up with where -n and --warmup are not given.
  static constexpr uint64_t kIterations = 10000;
  static constexpr uint64_t kWarmup = CommonOptions::kDefaultWarmup;
  static constexpr bool kFewerWarmupAboveFullSize = true;
  // Runs over one-sided operations (--op write/read), which the server's CPU never sees.
  static constexpr bool kOneSided = false;
  // The client numbers its messages only on an unreliable transport, where the
  // server reads the number: a forwarding hop cannot join a reliable client
  // to an unreliable server (session/forward.cpp).
  static constexpr bool kNumbersOnlyUnreliable = false;
};

inline uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t product;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}
inline uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// A stamp report's size: its header and one stamp per message (saturated:
// the counts are the client's).
template <class Header>
uint64_t stamp_report_bytes(uint64_t messages) {
  return sat_add(sizeof(Header), sat_mul(messages, sizeof(uint64_t)));
}

// stream's and load's --rate (their sweep) and --count or --duration.
inline void validate_rates(const Params& p) {
  if (p.rate.empty() || p.rate.size() > 64) usage_error("--rate takes 1 to 64 values");
  for (uint64_t r : p.rate)
    if (r < 1 || r > 10'000'000) usage_error("--rate must be between 1 and 10000000 per second");
  if (p.count > 0 && p.duration > 0) usage_error("give either --count or --duration, not both");
}

// Above this size a counted point takes fewer messages, in proportion: about
// the bytes of a 64 KiB point rather than hours of 1 GiB transfers.
inline constexpr double kFullSizeBytes = 64 << 10;

template <class N>
N fewer_above_full_size(N n, double size, N least) {
  if (size <= kFullSizeBytes) return n;
  return std::max(least, static_cast<N>(static_cast<double>(n) * (kFullSizeBytes / size)));
}

// A counted point's measured messages (-n, else E's default) and warm-up
// (--warmup, else E's default), at message size `size`. N = double for
// estimates: a client's numbers may be anything up to 2^64 and must not wrap.
template <class E, class N = uint64_t>
N counted_iterations(const Params& p, double size) {
  const N n = static_cast<N>(p.iters ? p.iters : E::kIterations);
  return fewer_above_full_size(n, size, std::min<N>(n, 100));
}
template <class E, class N = uint64_t>
N counted_warmup(const Params& p, double size) {
  if (p.warmup >= 0) return static_cast<N>(p.warmup);
  const N w = static_cast<N>(E::kWarmup);
  return E::kFewerWarmupAboveFullSize ? fewer_above_full_size(w, size, std::min<N>(w, 10)) : w;
}

// The plan of the counted experiments (lat, bw): one point per message size,
// each with its iteration and warm-up counts.
template <class E>
std::vector<Point> sized_points(const Params& p, const Caps& caps) {
  std::vector<Point> plan;
  for (uint64_t size : sizes_for(p, caps.max_msg_size)) {
    const double s = static_cast<double>(size);
    plan.push_back({.size = size, .iterations = counted_iterations<E>(p, s), .warmup = counted_warmup<E>(p, s)});
  }
  return plan;
}

// The least time a counted point takes: its messages (or --duration) and its
// warm-up at `per_msg_ns` each.
template <class E>
double counted_seconds(const Params& p, double size, double per_msg_ns) {
  const double iters = counted_iterations<E, double>(p, size), warmup = counted_warmup<E, double>(p, size);
  return (p.duration > 0 ? p.duration : iters * per_msg_ns * 1e-9) + warmup * per_msg_ns * 1e-9;
}

}  // namespace fm
