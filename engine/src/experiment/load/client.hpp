// load: the client's point: its sender threads started together, their
// counts and records merged, the server's counts fetched, the point's
// fields.
#pragma once
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "experiment/load/common.hpp"
#include "experiment/load/sender.hpp"
#include "experiment/load/server_stats.hpp"
#include "experiment/load/sizes.hpp"

namespace fm {

constexpr uint64_t kMaxRawSamples = 1ull << 22;  // per thread, --samples raw (128 MiB of arrays)
constexpr double kStartLeadNs = 2e6;             // threads start their schedules together, this far ahead

// The slowdown buckets as a JSON array (JsonObj makes objects only).
inline std::string slowdown_json(const LoadSizes& sizes, const LoadRecord& rec, const std::vector<Histogram>& unloaded) {
  std::string items;
  for (size_t b = 0; b < sizes.buckets().size(); ++b) {
    const Histogram& h = rec.by_bucket[b];
    const double base = unloaded[b].count() ? static_cast<double>(unloaded[b].value_at_percentile(50)) : 0;
    const double p50 = static_cast<double>(h.value_at_percentile(50)), p99 = static_cast<double>(h.value_at_percentile(99));
    JsonObj o;
    o.add("size_lo", sizes.bucket_lo(static_cast<int>(b))).add("size_hi", sizes.buckets()[b].hi).add("count", h.count())
        .add("p50", h.count() && base > 0 ? p50 / base : 0.0).add("p99", h.count() && base > 0 ? p99 / base : 0.0)
        .add("latency_p50_ns", h.count() ? p50 : 0.0).add("latency_p99_ns", h.count() ? p99 : 0.0)
        .add("unloaded_p50_ns", base).add("unloaded_count", unloaded[b].count());
    // The bucket's histograms, so that runs can be added up exactly (mesh).
    add_hist(o, "latency_hist", h);
    add_hist(o, "unloaded_hist", unloaded[b]);
    items += (items.empty() ? "" : ", ") + o.str();
  }
  return "[" + items + "]";
}

// The point's client threads: each with its share of the requests, the
// connections and (--clients) the clients.
template <Transport T, Poll P>
std::vector<std::unique_ptr<LoadSender<T, P>>> make_senders(Conns<T> conns, Ctx& c, const Point& pt, const LoadSizes& sizes,
                                                           bool closed, double rate, uint64_t measured) {
  const Params& p = c.p;
  const LoadOptions& l = p.load;
  const Clock& clk = c.clk;
  const uint32_t threads = l.threads;
  std::vector<std::unique_ptr<LoadSender<T, P>>> senders;
  const double thread_rate = rate / threads;
  for (uint32_t k = 0; k < threads; ++k) {
    const uint64_t warmup = share_of(pt.warmup, threads, k);
    const uint64_t mine = measured == UINT64_MAX ? UINT64_MAX : warmup + share_of(measured, threads, k);
    LoadSchedule s{closed, thread_rate, mine, warmup, 0, 0, UINT64_MAX};
    // --clients: this thread's clients, each with its --outstanding slots.
    const uint64_t slots = pt.clients ? share_of(pt.clients, threads, k) * l.outstanding : l.max_outstanding;
    if (pt.clients) s.think = clk.ns_to_ticks(l.think_us * 1e3);
    // Fixed arrivals interleave: thread k starts k/rate after the first.
    const double start_ns = closed ? 0 : static_cast<double>(k) * 1e9 / rate;
    senders.push_back(std::make_unique<LoadSender<T, P>>(c, deal(conns, threads, k), sizes, s, l.seed * 1000003 + k,
                                                         start_ns, std::max<uint64_t>(1, slots),
                                                         keep_raw(p, true) ? kMaxRawSamples : 0));
  }
  return senders;
}

// --samples raw: the requests every thread kept, as the point's arrays.
template <class Sender>
void add_raw_samples(PointOut& out, const std::vector<std::unique_ptr<Sender>>& senders, const Clock& clk,
                     uint64_t completed) {
  uint64_t kept = 0;
  for (const auto& sender : senders) kept += sender->record().raw_n;
  std::vector<double> lat, svc, lag, size;
  for (const auto& sender : senders) {
    const LoadRecord& r = sender->record();
    for (uint64_t i = 0; i < r.raw_n; ++i) {
      lat.push_back(static_cast<double>(r.raw_latency[i]));
      svc.push_back(static_cast<double>(r.raw_service[i]));
      lag.push_back(clk.to_ns(static_cast<double>(r.raw_lag[i])));
      size.push_back(static_cast<double>(r.raw_size[i]));
    }
  }
  if (kept < completed)
    out.fields.add("note", "raw samples kept for the first " + std::to_string(kMaxRawSamples) +
                               " requests per thread; the histograms hold all " + std::to_string(completed));
  out.arrays.emplace_back("latency_ns", std::move(lat));
  out.arrays.emplace_back("service_latency_ns", std::move(svc));
  out.arrays.emplace_back("lag_ns", std::move(lag));
  out.arrays.emplace_back("size_bytes", std::move(size));
}

template <Transport T, Poll P>
Status load_client(Conns<T> conns, Ctx& c, const Point& pt, PointOut& out) {
  const Params& p = c.p;
  const LoadOptions& l = p.load;
  const Clock& clk = c.clk;
  const LoadSizes sizes(p);
  Guard g(c);
  const uint32_t threads = l.threads;

  // This point's offered rate: --rate's, a fraction of the capacity, or none (closed loop).
  double rate = static_cast<double>(pt.rate);
  if (pt.of_capacity > 0) {
    if (!(c.capacity_rps > 0)) runtime_error("load: the capacity point completed no request, so --of-capacity has nothing to scale");
    rate = pt.of_capacity * c.capacity_rps;
  }
  const bool closed = pt.capacity || pt.clients;
  const double seconds = p.duration > 0 ? p.duration : 1.0;
  // Measured requests; the warm-up ones come first, on top.
  const uint64_t measured = p.count ? p.count : closed ? UINT64_MAX : std::max<uint64_t>(1, std::llround(seconds * rate));

  const auto senders = make_senders<T, P>(conns, c, pt, sizes, closed, rate, measured);
  const std::vector<Histogram> unloaded = senders[0]->probe_unloaded(g);

  // Every thread's schedule starts at one instant, a little ahead.
  const uint64_t t0 = clk.ticks() + clk.ns_to_ticks(kStartLeadNs);
  std::atomic<bool> stop{false};
  std::vector<LoadThreadEnd> ends(threads);
  std::vector<std::thread> workers;
  const uint64_t window = closed && !p.count ? clk.ns_to_ticks(seconds * 1e9) : 0;
  c.cpu.begin(kWithWarmup);  // each thread's warm-up ends on its own: the window holds them
  for (uint32_t k = 0; k < threads; ++k) senders[k]->start(t0, window);
  for (uint32_t k = 1; k < threads; ++k)
    workers.emplace_back([&, k] {
      ends[k].status = senders[k]->run(nullptr, stop, &ends[k].failure);
      if (ends[k].status != Status::ok) stop = true;
    });
  ends[0].status = senders[0]->run(&g, stop, &ends[0].failure);
  if (ends[0].status != Status::ok) stop = true;
  for (std::thread& w : workers) w.join();
  const Status st0 = first_cause(ends, c);
  uint64_t requests = 0;
  for (const auto& sender : senders) requests += sender->tally().sent + sender->tally().warmup_sent;
  c.cpu.end(requests, "request");


  LoadTally tally;
  LoadRecord& rec = senders[0]->record();
  for (uint32_t k = 0; k < threads; ++k) {
    tally.add(senders[k]->tally());
    if (k) rec.merge(senders[k]->record());
  }

  Status st = st0;
  LoadServerStats server;
  if (st == Status::ok) {
    c.ctrl.send(CtrlType::end_point, std::to_string(tally.sent + tally.warmup_sent));
    try {
      server = LoadServerStats::decode(c.ctrl.recv(CtrlType::exchange, "load server counts"));
    } catch (const Error& e) {
      if (e.kind == ErrorKind::usage) throw;
      c.failure = e.what();
      st = Status::peer_lost;
    }
  }
  out.partial = st != Status::ok;

  const double span_s = tally.last_reply > tally.first_intended
                            ? clk.to_ns(static_cast<double>(tally.last_reply - tally.first_intended)) / 1e9 : 0;
  const double achieved = span_s > 0 ? static_cast<double>(tally.completed) / span_s : 0;
  if (closed) c.capacity_rps = achieved;
  Histogram unloaded_all;
  for (const Histogram& h : unloaded) unloaded_all.merge(h);

  out.fields.add("iterations", tally.completed).add("latency_kind", "rtt from the intended send time")
      .add("phase", pt.clients ? "closed loop" : closed ? "capacity" : "open loop")
      .add("arrivals", closed ? "closed loop" : l.arrivals.c_str())
      .add("offered_rps", closed ? achieved : rate).add_raw("of_capacity", pt.of_capacity > 0 ? std::to_string(pt.of_capacity) : "null")
      .add("achieved_rps", achieved)
      .add("achieved_gbps", span_s > 0 ? static_cast<double>(tally.bytes) * 8 / span_s / 1e9 : 0.0)
      .add("latency_ns", to_json(summarize(rec.latency)))
      .add("service_latency_ns", to_json(summarize(rec.service)))
      .add("lag_ns", to_json(summarize(rec.lag)))
      .add("unloaded_ns", to_json(summarize(unloaded_all)))
      .add("requests", tally.sent + tally.shed).add("sent", tally.sent).add("completed", tally.completed)
      .add("shed", tally.shed).add("lost", tally.lost)
      .add("probes_lost", senders[0]->probes_lost())
      .add("warmup_sent", tally.warmup_sent).add("warmup_shed", tally.warmup_shed).add("warmup_lost", tally.warmup_lost)
      .add("stale_replies", tally.stale).add("clamped", tally.clamped)
      .add("outstanding_max", tally.outstanding_max).add("max_outstanding", l.max_outstanding)
      .add("span_s", span_s)
      .add_raw("slowdown", slowdown_json(sizes, rec, unloaded))
      .add("server", server.json())
      .add("mean_req_bytes", sizes.mean_request())
      .add("conns", static_cast<uint64_t>(l.conns)).add("threads", static_cast<uint64_t>(l.threads))
      .add("server_threads", static_cast<uint64_t>(l.server_threads)).add("server_rx", l.server_rx)
      .add("service_ns", l.service_ns)
      .add("histogram", histogram_info(rec.latency.config()))
      .add("samples_kind", keep_raw(p, true) ? "raw" : "hist");
  if (pt.clients) out.fields.add("clients", pt.clients).add("outstanding", l.outstanding).add("think_us", l.think_us);
  add_hist(out.fields, "latency_hist", rec.latency);
  if (keep_raw(p, true)) add_raw_samples(out, senders, clk, tally.completed);
  return st;
}

}  // namespace fm
