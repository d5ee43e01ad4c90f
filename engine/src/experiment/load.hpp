// load: open-loop request/response, the question of the Homa and RAMCloud
// studies: what happens to the tail when the path is loaded?
//
// Each client thread sends on an absolute schedule fixed in advance
// (arrivals.hpp: --arrivals at its share of --rate), never waiting for a
// reply to decide when to send, and measures each reply from the request's
// *intended* send time, so a slow server cannot hide its queueing
// (coordinated omission); apart, from the actual send (service latency) and
// how late the send was (lag: the generator's own accuracy). A request due
// while --max-outstanding are in flight is shed: counted, never sent late.
// The server answers each request with a reply of the size the request asks
// for, after an optional busy-wait (--service-ns), and counts how many
// requests each poll of a connection returned (completions per poll, as in
// the RAMCloud notes) and how many each of its threads answered. Its threads
// serve connections of their own, or (--server-rx shared) every one of them
// through readers of their own, as Homa's receiver threads share one port.
//
// Latencies go into log-linear histograms (histogram.hpp: 3 significant
// digits), one set per thread, merged at the end; --samples raw also keeps
// every latency. Before its measured requests each point measures the
// unloaded latency of each size bucket (one request in flight): the
// reference of the slowdown figures (Homa's metric: latency / unloaded p50
// of that size).
//
// --of-capacity F: the first point runs closed loop (a request whenever one of
// --max-outstanding slots is free) and its achieved rate is the capacity;
// the next points offer F x that (above 1: more than the path carries).
//
// --clients N: closed loop, one point per N: N clients, each with
// --outstanding requests in flight, a slot reused as soon as its reply is
// in (after --think-us); the clients are dealt among the threads. Latency
// is still from the intended send, which in closed loop is the moment a
// slot came free: a slow reply delays the next request instead of queueing
// behind it, so closed loop never shows the open loop's queueing
// (coordinated omission).
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "experiment/load/client.hpp"
#include "experiment/load/common.hpp"
#include "experiment/load/responder.hpp"
#include "experiment/load/server_stats.hpp"
#include "fabmeter/workload.hpp"

namespace fm {

struct LoadExperiment : ExperimentDefaults {
  static constexpr const char* name = "load";
  static constexpr bool kManyConnections = true;
  // Bounds keep a client's numbers from making either end allocate or run without limit.
  static void validate(const Params& p) {
    validate_rates(p);
    const LoadOptions& l = p.load;
    if (l.of_capacity.size() > 64) usage_error("--of-capacity takes at most 64 values");
    for (double f : l.of_capacity)
      if (!(f > 0 && f <= 10)) usage_error("--of-capacity must be a multiple of the capacity: above 0 and at most 10");
    if (!l.clients.empty()) {
      if (!l.of_capacity.empty() || p.named("rate"))
        usage_error("give one of --rate, --of-capacity and --clients");
      if (l.clients.size() > 64) usage_error("--clients takes at most 64 values");
      for (uint64_t n : l.clients) {
        if (n < 1 || n > 4096) usage_error("--clients must be between 1 and 4096");
        if (n < l.threads) usage_error("--clients must be at least --threads (each thread drives clients of its own)");
        if (n * l.outstanding > LoadOptions::kMaxOutstanding)
          usage_error("--clients x --outstanding must be at most " + std::to_string(LoadOptions::kMaxOutstanding));
      }
    }
    if (l.outstanding < 1 || l.outstanding > LoadOptions::kMaxOutstanding)
      usage_error("--outstanding must be between 1 and " + std::to_string(LoadOptions::kMaxOutstanding));
    if (!(l.think_us >= 0 && l.think_us <= 1e6)) usage_error("--think-us must be between 0 and 1000000 (one second)");
    if (l.clients.empty() && (p.named("outstanding") || p.named("think-us")))
      usage_error("--outstanding and --think-us apply to closed loop only: give --clients");
    if (!l.workload.empty() && p.named("req-size")) usage_error("give either --req-size or --workload, not both");
    if (l.req_size < 8) usage_error("--req-size must be at least 8 bytes (its sequence number and response size ride in it)");
    if (l.resp_size != 0 && l.resp_size < 8) usage_error("--resp-size must be at least 8 bytes");
    if (l.req_size > (1ull << 30) || l.resp_size > (1ull << 30)) usage_error("--req-size and --resp-size are limited to 1 GiB");
    if (l.max_outstanding < 1 || l.max_outstanding > LoadOptions::kMaxOutstanding)
      usage_error("--max-outstanding must be between 1 and " + std::to_string(LoadOptions::kMaxOutstanding));
    if (l.conns < 1 || l.conns > 64) usage_error("--conns must be between 1 and 64");
    const bool shared = l.server_rx == "shared";
    if (l.threads < 1 || l.server_threads < 1 || l.threads > l.conns || (!shared && l.server_threads > l.conns))
      usage_error("--threads and --server-threads must be between 1 and --conns (each thread serves connections of its "
                  "own; --server-rx shared lets every server thread read every connection)");
    if (l.server_threads > LoadOptions::kMaxServerThreads)
      usage_error("--server-threads must be at most " + std::to_string(LoadOptions::kMaxServerThreads));
    if (p.poll == Poll::event && (l.threads != l.conns || (shared ? l.conns != 1 : l.server_threads != l.conns)))
      usage_error(shared ? "event mode sleeps on one connection per thread: with --server-rx shared give --conns 1 and --threads 1"
                         : "event mode sleeps on one connection per thread: give --conns, --threads and --server-threads the same value");
    if (l.service_ns > 1e9) usage_error("--service-ns must be at most 1e9 (one second)");
    if (p.count > (1ull << 32)) usage_error("--count is limited to 4294967296 requests per point");
    if (p.duration > 86400) usage_error("--duration is limited to 86400 s per point");
  }
  static uint64_t report_bytes(const Params&, const Point&) { return LoadServerStats::kMaxEncoded; }
  static uint32_t connections(const Params& p) { return p.load.conns; }

  // A workload file is read here, on the client, and never by the server:
  // its largest size travels as --max-size, which sizes the server's
  // buffers. The workload runs whole: a transport that cannot carry its
  // largest request refuses it, with what clamping would take away. Only a
  // --max-size given on purpose clamps it (counted in `clamped`).
  static void resolve(Params& p, const Caps& caps) {
    if (p.load.workload.empty()) return;
    const Workload w = Workload::load(p.load.workload);
    const bool max_given = p.named("max-size");
    if (!max_given && w.max_size() > caps.max_msg_size) {
      const Workload::Share lost = w.share_above(caps.max_msg_size);
      char share[160];
      std::snprintf(share, sizeof share, "%.3g %% of its requests and %.3g %% of its bytes", 100 * lost.messages,
                    100 * lost.bytes);
      usage_error(p.transport + ": workload " + w.name() + " has requests up to " + std::to_string(w.max_size()) +
                  " B, above the transport's largest message, " + std::to_string(caps.max_msg_size) + " B" +
                  (caps.max_msg_note.empty() ? "" : " (" + caps.max_msg_note + ")") + ": clamped, " + share +
                  " would change, a different workload; run it over a transport that carries " +
                  std::to_string(w.max_size()) + " B, or clamp on purpose with --max-size");
    }
    const uint64_t top = max_given ? std::min({p.max_size, caps.max_msg_size, w.max_size()}) : w.max_size();
    p.max_size = std::max({top, p.load.resp_size, kLoadMinMessage});
  }

  static std::vector<Point> plan(const Params& p, const Caps&) {
    const uint64_t size = load_largest_message(p);
    const uint64_t warmup = counted_warmup<LoadExperiment>(p, 0);
    std::vector<Point> points;
    if (!p.load.clients.empty()) {
      for (uint64_t n : p.load.clients) points.push_back({.size = size, .warmup = warmup, .clients = n});
      return points;
    }
    if (!p.load.of_capacity.empty()) {
      points.push_back({.size = size, .warmup = warmup, .capacity = true});
      for (double f : p.load.of_capacity) points.push_back({.size = size, .warmup = warmup, .of_capacity = f});
      return points;
    }
    for (uint64_t r : p.rate) {
      const uint64_t auto_warmup = std::max<uint64_t>(1, default_step_warmup(r));
      points.push_back({.size = size, .rate = r, .warmup = p.warmup >= 0 ? warmup : auto_warmup});
    }
    return points;
  }

  static void check_caps(const Params& p, const Caps& caps) {
    if (p.load.server_rx == "shared" && !caps.shared_rx)
      usage_error(p.transport + ": --server-rx shared needs a socket several threads can read (udp, tcp); " +
                  p.transport + " serves each connection from one thread (--server-rx own)");
    const uint64_t largest = load_largest_message(p);
    if (largest > caps.max_msg_size)
      usage_error(p.transport + ": load's largest message, " + std::to_string(largest) +
                  " B, exceeds the transport's maximum of " + std::to_string(caps.max_msg_size) + " B" +
                  (caps.max_msg_note.empty() ? "" : " (" + caps.max_msg_note + ")"));
  }

  static PointCost cost(const Params& p, const Caps&, const Point& pt) {
    const double threads = p.load.server_threads;
    const double seconds = p.count ? static_cast<double>(p.count) * kMinRoundTripNs * 1e-9
                                   : (p.duration > 0 ? p.duration : 1.0);
    // A reply buffer per server thread; shared, a reader per thread and
    // connection, each with a receive buffer (udp's holds its largest datagram).
    const double readers = p.load.server_rx == "shared" ? threads * p.load.conns : 0;
    return {threads * static_cast<double>(pt.size) + readers * static_cast<double>(std::max<uint64_t>(pt.size + 4, 65508)),
            seconds};
  }

  template <Transport T, Poll P>
  static Status client(Conns<T> conns, Ctx& c, const Point& pt, PointOut& out) {
    return load_client<T, P>(conns, c, pt, out);
  }
  template <Transport T, Poll P>
  static Status server(Conns<T> conns, Ctx& c, const Point& pt, PointOut&) {
    return load_server<T, P>(conns, c, pt);
  }
};

}  // namespace fm
