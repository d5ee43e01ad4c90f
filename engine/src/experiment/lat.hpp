// lat: ping-pong. The client times each round trip from just before posting
// the ping to just after seeing the pong; one-way is reported as RTT/2 and
// labelled so. Statistics cover every measured iteration, never a window.
#pragma once
#include <algorithm>
#include <optional>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/stats.hpp"
#include "fabmeter/trace.hpp"

namespace fm {

// Duration runs keep at most this many samples (256 MiB) and say so if they stop early.
constexpr uint64_t kMaxDurationSamples = 1ull << 25;

// One-way = RTT/2 of every figure of a round-trip summary.
inline Summary halved(const Summary& s) { return scaled(s, 0.5); }

inline bool seq_matches(const std::byte* data, uint64_t len, uint64_t seq) {
  uint32_t mask = len >= 4 ? 0xffffffffu : (1u << (8 * len)) - 1;
  return get_seq(data, len) == (static_cast<uint32_t>(seq) & mask);
}

// The round trips a lat point keeps raw: every measured one by count, at
// most kMaxDurationSamples by --duration, none with --samples hist.
inline uint64_t lat_raw_slots(const Params& p, uint64_t iters) {
  if (!keep_raw(p)) return 0;
  return p.duration > 0 ? std::min<uint64_t>(kMaxDurationSamples, static_cast<uint64_t>(p.duration * 1e7) + 1) : iters;
}

template <Transport T, Poll P>
Status lat_client(T& t, Ctx& c, uint64_t size, uint64_t iters, uint64_t warmup, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const bool by_duration = p.duration > 0;
  // --samples hist: a histogram of bounded size, so --duration has no cap.
  const bool raw = keep_raw(p);
  SampleBuf rtt(lat_raw_slots(p, iters));
  const uint64_t cap = raw ? rtt.capacity() : UINT64_MAX;
  std::optional<Histogram> hist;
  if (!raw) hist.emplace();
  PayloadBuf buf(size);
  fix_message_size(t, size);
  Guard g(c);
  const uint32_t len = static_cast<uint32_t>(size);
  const uint64_t reply_wait = clk.ns_to_ticks((c.caps.reliable ? p.timeout_ms : p.loss_timeout_ms) * 1e6);
  const uint64_t run_ticks = clk.ns_to_ticks(p.duration * 1e9);
  uint64_t measured = 0, lost = 0, warmup_lost = 0, sent = 0, t_stop = UINT64_MAX;
  bool capped = false;
  Status st = Status::ok;

  for (uint64_t i = 0;; ++i) {
    if (i == warmup) c.cpu.begin();
    if (i == warmup && by_duration) t_stop = clk.ticks() + run_ticks;
    if (i >= warmup) {
      if (by_duration ? clk.ticks() >= t_stop : i - warmup >= iters) break;
      if (measured == cap) { capped = true; break; }
    }
    if (stop_requested()) { st = Status::interrupted; break; }
    if (!c.caps.reliable) put_seq(buf.data(), size, static_cast<uint32_t>(i));
    if ((st = g.tick(t)) != Status::ok) break;
    // --gap-us between consecutive round trips (perftest's --latency_gap), in heartbeat-sized slices.
    for (double left = i ? p.gap_us : 0; st == Status::ok && left > 0; left -= 5e5) {
      pause_for<P>(clk, std::min(left, 5e5));
      st = g.tick<1>(t);
    }
    if (st != Status::ok) break;

    prepare_send(t, buf.data(), len, 0);
    // ---- hot path: one round trip ----
    const uint64_t t0 = clk.ticks();
    if ((st = send_one<P>(t, buf.data(), len, 0, i, g)) != Status::ok) break;
    ++sent;
    RecvMsg m{};
    const uint64_t deadline = t0 + reply_wait;
    while ((st = recv_next<P>(t, m, g, clk, deadline)) == Status::ok && !c.caps.reliable &&
           !seq_matches(m.data, m.len, i))
      t.release(m);  // a late reply to a ping already counted lost
    const uint64_t t1 = clk.ticks();
    // ---- end of hot path ----

    if (st == Status::timeout && !c.caps.reliable) {
      ++(i >= warmup ? lost : warmup_lost);
      st = Status::ok;
      continue;
    }
    if (st == Status::timeout) {
      c.failure = "no reply from the other end within " + std::to_string(p.timeout_ms) + " ms";
      st = Status::peer_lost;
    }
    if (st != Status::ok) break;
    t.release(m);
    if (i < warmup) continue;
    if (raw) [[likely]] {
      rtt[measured++] = t1 - t0;
    } else {
      hist->record(std::llround(clk.to_ns(static_cast<double>(t1 - t0))));
      ++measured;
    }
    // A test that ends the run from outside waits for this, not a guessed time: the point has a sample.
    if (measured == 1) trace_phase("client", "measured");
  }
  c.cpu.end(measured, "round_trip");
  if (st == Status::ok) c.ctrl.send(CtrlType::end_point, std::to_string(sent));

  out.fields.add("iterations", measured).add("lost", lost).add("warmup_lost", warmup_lost).add("latency_kind", "rtt/2");
  add_samples_kind(out, raw);
  if (!raw) {
    const Summary s = summarize(*hist);
    out.fields.add("latency_ns", to_json(halved(s))).add("rtt_ns", to_json(s));
    add_hist(out.fields, "rtt_hist", *hist);
    return st;
  }
  std::vector<double> rtt_ns(measured), half(measured);
  for (uint64_t k = 0; k < measured; ++k) {
    rtt_ns[k] = clk.to_ns(static_cast<double>(rtt[k]));
    half[k] = rtt_ns[k] / 2;
  }
  out.fields.add("latency_ns", to_json(summarize(half.data(), measured)))
      .add("rtt_ns", to_json(summarize(rtt_ns.data(), measured)))
      .add("samples_locked", rtt.locked());
  if (capped) out.fields.add("note", "stopped at the sample capacity of " + std::to_string(cap) + " round trips");
  out.arrays.emplace_back("rtt_ns", std::move(rtt_ns));
  return st;
}

template <Transport T, Poll P>
Status lat_server(T& t, Ctx& c, uint64_t size, uint64_t warmup) {
  if (c.caps.one_sided) {
    const Status st = sleep_until_ctrl(t, c);
    if (st != Status::ctrl_pending) return st;
    c.ctrl.recv(CtrlType::end_point, "end of lat point");
    return Status::ok;
  }
  PayloadBuf reply(size);
  fix_message_size(t, size);
  Guard g(c);
  const uint32_t len = static_cast<uint32_t>(size);
  uint64_t served = 0;  // replies sent: the measured window starts after the warm-up's
  if (!warmup) c.cpu.begin();
  for (;;) {
    RecvMsg m;
    if (c.caps.reliable) prepare_send(t, reply.data(), len, 0);  // else the reply carries the ping's sequence number
    Status st = recv_next<P>(t, m, g, c.clk);
    if (st == Status::ctrl_pending) {
      c.cpu.end(served - std::min(served, warmup), "round_trip");
      c.ctrl.recv(CtrlType::end_point, "end of lat point");
      return Status::ok;
    }
    if (st != Status::ok) return st;
    if (!c.caps.reliable) std::memcpy(reply.data(), m.data, std::min<uint64_t>({4, m.len, size}));
    t.release(m);
    if ((st = send_one<P>(t, reply.data(), len, 0, 0, g)) != Status::ok) {
      if (st == Status::ctrl_pending) continue;  // the client is done: read its end_point next
      return st;
    }
    if (++served == warmup) c.cpu.begin();
    if ((st = g.tick(t)) != Status::ok) return st;
  }
}

struct LatExperiment : ExperimentDefaults {
  static constexpr const char* name = "lat";
  static constexpr bool kOneCpuTicks = true;  // RTTs read on the client, nothing stamped by the server
  static constexpr uint32_t kInFlight = 1;    // one ping, then its pong
  static constexpr bool kOneSided = true;
  static void validate(const Params& p) {
    if (p.flows > 1 && p.samples == "hist")
      usage_error("lat --flows merges the flows' round trips from their raw samples: give --samples raw (or auto)");
  }
  static bool fixed_sizes(const Params&) { return true; }
  static constexpr Flows kFlows = Flows::round_trips;
  static uint32_t connections(const Params& p) { return p.flows; }
  static std::vector<Point> plan(const Params& p, const Caps& caps) { return sized_points<LatExperiment>(p, caps); }
  static PointCost cost(const Params& p, const Caps&, const Point& pt) {
    // Every round trip but the first waits --gap-us before it.
    const double gap_s = p.gap_us * 1e-6;
    const double s = counted_seconds<LatExperiment>(p, static_cast<double>(pt.size), kMinRoundTripNs + p.gap_us * 1e3);
    return {0, std::max(0.0, s - gap_s), 8 * static_cast<double>(lat_raw_slots(p, pt.iterations))};
  }
  template <Transport T, Poll P>
  static Status client(T& t, Ctx& c, const Point& pt, PointOut& out) {
    return lat_client<T, P>(t, c, pt.size, pt.iterations, pt.warmup, out);
  }
  template <Transport T, Poll P>
  static Status server(T& t, Ctx& c, const Point& pt, PointOut&) {
    return lat_server<T, P>(t, c, pt.size, pt.warmup);
  }
};

}  // namespace fm
