// oneway: the thesis' custom one-way benchmark. The client sends bursts of
// messages, stamping t_subm just before each post and t_post as the post
// returns; the server stamps t_recv as it sees each one; where the transport
// reports send completions the client stamps t_comp as it reaps each. Where
// the device reads the payload after the post (verbs, ofi; not inline), the
// client's time thread (time_thread.hpp) keeps writing the clock into it, and
// the server hands back the stamp each message carried: t_send, the device's
// read. Both ends on one host read the same TSC, so
// t_recv - t_subm needs no clock correction; across hosts the server's clock
// is mapped onto the client's by the offset and drift fitted to the clock
// probes so far, the last burst taken right after this point's report.
#pragma once
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "experiment/time_thread.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/stats.hpp"

namespace fm {

// Server -> client after the point: how many arrived and when (and, with
// send_stamps 1, a second array: the t_send each message carried).
struct OnewayReport {
  ClockInfo clock;
  uint64_t received, duplicated, reordered, total, send_stamps;
};

// Transports whose device reads the payload after the post call returned
// (transport.hpp's deferred_read).
template <class T>
concept ReadsAfterPost = requires(const T& t, const char** why) { t.deferred_read(0u, 0u, why); };

// Whether the options leave room for t_send in a payload of `size` bytes:
// not --time-thread off, and the stamp's bytes 8-15 inside it.
inline bool send_stamps_asked(const Params& p, uint64_t size) {
  return p.oneway.time_thread != "off" && size >= kSendStampEnd;
}

// Both ends: whether the payloads carry t_send (the client may still find no
// CPU for its thread: then they carry zeros).
template <Transport T>
bool carries_send_stamps(const Params& p, uint64_t size) {
  return ReadsAfterPost<T> && send_stamps_asked(p, size);
}

// Why this point has no t_send, or nullptr (it has; *src: the first payload).
template <Transport T>
const char* no_send_stamp(const T& t, const Params& p, uint64_t size) {
  if (p.oneway.time_thread == "off") return "--time-thread off";
  if constexpr (!ReadsAfterPost<T>) {
    return "the post call copies the payload: nothing reads the send buffer after it";
  } else {
    if (size < kSendStampEnd) return "messages under 16 B have no room for the stamp (bytes 8-15)";
    const char* why = nullptr;
    return t.deferred_read(static_cast<uint32_t>(size), 0, &why) ? nullptr : why;
  }
}

// The client's stamps of a point: t_subm and t_post of every send, t_comp
// where the transport reports send completions (verbs, ofi), and the time
// thread that writes t_send into the payloads.
struct OnewayStamps {
  OnewayStamps(uint64_t total, bool completions) : t_subm(total), t_post(total), t_comp(completions ? total : 0) {}
  SampleBuf t_subm, t_post, t_comp;
  // t_send: where the device reads the payload after the post and a CPU is free for the thread.
  std::unique_ptr<TimeThread> tt;
  TimeThreadPlace place;
  std::string no_send;  // why there is no t_send ("": there is)
  uint64_t sent = 0;

  void stamp_comp(const Clock& clk, uint64_t wr_id) {
    if (wr_id < t_comp.capacity()) t_comp[wr_id] = clk.ticks();
    if (tt) tt->read_before(wr_id + 1);  // a completion: the device read this send and every one before
  }
};

// The client's bursts: warm-up first, as a burst of its own, then the
// measured ones, until every send is out (or the point ends early).
template <Transport T, Poll P>
Status oneway_send(T& t, Ctx& c, uint64_t size, uint64_t warmup, PayloadBuf& buf, OnewayStamps& s, Guard& g) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t total = s.t_subm.capacity();
  auto stamp_comp = [&](uint64_t wr_id) { s.stamp_comp(clk, wr_id); };
  const uint32_t len = static_cast<uint32_t>(size);
  uint64_t sent = 0;
  Status st = Status::ok;
  const uint64_t n_bursts = p.oneway.bursts + (warmup ? 1 : 0);
  for (uint64_t burst = 0; burst < n_bursts && st == Status::ok; ++burst) {
    const uint64_t in_burst = (warmup && burst == 0) ? warmup : p.oneway.burst_size;
    if (burst == (warmup ? 1 : 0)) c.cpu.begin();
    for (uint64_t j = 0; j < in_burst; ++j) {
      if (stop_requested()) { st = Status::interrupted; break; }
      if (!c.caps.reliable) put_seq(buf.data(), size, static_cast<uint32_t>(sent));
      // The very last send asks for a completion, so the end of the run is known.
      const uint32_t flags = sent + 1 == total ? uint32_t{kSendSignaled} : 0u;
      prepare_send(t, buf.data(), len, flags);
      // ---- hot path ----
      s.t_subm[sent] = clk.ticks();
      // After t_subm: every stamp the thread writes once it sees this payload is at least t_subm.
      if constexpr (ReadsAfterPost<T>)
        if (s.tt) {
          const char* why;
          s.tt->publish(sent, t.deferred_read(len, flags, &why));
        }
      if ((st = send_one<P>(t, buf.data(), len, flags, sent, g, stamp_comp)) != Status::ok) break;
      s.t_post[sent] = clk.ticks();
      ++sent;
      if (c.caps.send_completions) reap_send_comps(t, stamp_comp);
      if ((st = g.tick(t)) != Status::ok) break;
      // --gap-us between consecutive messages (perftest's --latency_gap), in heartbeat-sized slices.
      for (double left = j + 1 < in_burst ? p.gap_us : 0; st == Status::ok && left > 0; left -= 5e5) {
        pause_for<P>(clk, std::min(left, 5e5));
        st = g.tick<1>(t);
      }
      if (st != Status::ok) break;
    }
    // Long pauses in slices: the other end must keep hearing heartbeats.
    for (double left = p.oneway.pause_us; st == Status::ok && left > 0; left -= 5e5) {
      pause_for<P>(clk, std::min(left, 5e5));
      st = g.tick<1>(t);
    }
  }
  s.sent = sent;
  if (st == Status::ctrl_pending) st = Status::ok;  // nothing is expected from the server mid-burst
  if (st == Status::ok) st = flush_sends<P>(t, g);
  c.cpu.end(sent - std::min(sent, warmup), "message");
  if (st != Status::ok || !c.caps.send_completions) return st;
  // Collect completions up to the last send's (signaled above).
  const uint64_t until = clk.ticks() + clk.ns_to_ticks(p.timeout_ms * 1e6);
  const uint64_t last = sent ? sent - 1 : 0;
  while (sent && !s.t_comp[last] && clk.ticks() < until && !t.failure()) reap_send_comps(t, stamp_comp);
  return st;
}

// The client's fields of the point, from its stamps and the server's
// report: t_recv of every message, and t_send where the payloads carried it.
inline void oneway_fields(PointOut& out, Ctx& c, uint64_t warmup, OnewayStamps& s, const OnewayReport& report,
                          const uint64_t* t_recv, const uint64_t* t_send, uint64_t t_end) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t total = s.t_subm.capacity();
  const ClockFit& fit = c.sync.fit;

  std::vector<double> latency;
  latency.reserve(total - warmup);
  uint64_t lost = 0, warmup_lost = 0;
  for (uint64_t k = 0; k < warmup && k < s.sent; ++k) warmup_lost += t_recv[k] == 0;
  for (uint64_t k = warmup; k < s.sent; ++k) {
    if (t_recv[k] == 0) { ++lost; continue; }
    double ns;
    if (!c.sync.probed) {
      ns = clk.to_ns(static_cast<double>(static_cast<int64_t>(t_recv[k] - s.t_subm[k])));
    } else {
      ns = fit.to_local(report.clock.mono_ns(t_recv[k])) - clk.ticks_to_mono_ns(s.t_subm[k]);
    }
    latency.push_back(ns);
  }
  if (!latency.empty()) c.sync.check_arrival(*std::min_element(latency.begin(), latency.end()));
  // Both on the client's clock: no correction.
  std::vector<double> post;  // t_post - t_subm: how long the post call took
  post.reserve(s.sent - std::min(s.sent, warmup));
  for (uint64_t k = warmup; k < s.sent; ++k)
    post.push_back(clk.to_ns(static_cast<double>(static_cast<int64_t>(s.t_post[k] - s.t_subm[k]))));
  // t_send - t_subm (the client's clock) and t_recv - t_send (as t_recv - t_subm), per
  // message that arrived with a stamp the thread wrote after its t_subm; the others are missed.
  std::vector<double> send, latency_send;
  uint64_t send_missed = 0;
  if (s.tt && !t_send) s.no_send = "the server did not return the payloads' stamps";
  if (s.tt && t_send) {
    for (uint64_t k = warmup; k < s.sent; ++k) {
      if (t_recv[k] == 0) continue;
      if (t_send[k] < s.t_subm[k] || t_send[k] > t_end) { ++send_missed; continue; }
      send.push_back(clk.to_ns(static_cast<double>(t_send[k] - s.t_subm[k])));
      latency_send.push_back(
          !c.sync.probed ? clk.to_ns(static_cast<double>(static_cast<int64_t>(t_recv[k] - t_send[k])))
                         : fit.to_local(report.clock.mono_ns(t_recv[k])) - clk.ticks_to_mono_ns(t_send[k]));
    }
  }
  // Every stamp older than its post: the payloads were read inside the call after all.
  if (s.tt && t_send && send.empty() && send_missed)
    s.no_send = "no message carried a stamp written after its post: the payload was read inside the post call "
                "(a provider that sends small messages inline on its own, as libfabric's verbs provider does)";
  std::vector<double> comp;  // t_comp - t_subm: when the sender learns its send is done
  for (uint64_t k = warmup; k < s.t_comp.capacity() && k < s.sent; ++k)
    if (s.t_comp[k]) comp.push_back(clk.to_ns(static_cast<double>(s.t_comp[k] - s.t_subm[k])));
  if (c.caps.send_completions)
    out.fields.add("completions", static_cast<uint64_t>(comp.size()));
  uint64_t above = 0;
  for (double ns : latency) above += ns > p.oneway.threshold_us * 1e3;
  out.fields.add("iterations", static_cast<uint64_t>(latency.size())).add("sent", s.sent - std::min(s.sent, warmup))
      .add("lost", lost).add("warmup_lost", warmup_lost).add("duplicated", report.duplicated).add("reordered", report.reordered)
      .add("latency_kind", "one-way")
      .add("threshold_us", p.oneway.threshold_us)
      .add("above_threshold_pct",
           latency.empty() ? 0.0 : 100.0 * static_cast<double>(above) / static_cast<double>(latency.size()))
      .add("bursts", p.oneway.bursts).add("burst_size", p.oneway.burst_size).add("pause_us", p.oneway.pause_us).add("gap_us", p.gap_us)
      .add("clock", c.sync.json())
      .add("samples_locked", s.t_subm.locked() && s.t_post.locked());
  add_latency(out, p, "latency_ns", std::move(latency));
  add_latency(out, p, "post_ns", std::move(post));
  if (s.tt) {
    JsonObj thread;
    if (s.place.cpu >= 0) thread.add("cpu", s.place.cpu);
    else thread.add_raw("cpu", "null");
    thread.add("pass_ns", s.tt->pass_ns());
    out.fields.add("time_thread", thread).add("t_send_missed", send_missed);
  }
  if (s.no_send.empty()) {
    add_latency(out, p, "send_ns", std::move(send));
    add_latency(out, p, "latency_send_ns", std::move(latency_send));
  } else {
    out.fields.add_raw("send_ns", "null").add_raw("latency_send_ns", "null").add("t_send_absent", s.no_send);
  }
  if (c.caps.send_completions) add_latency(out, p, "completion_ns", std::move(comp));
  add_samples_kind(out, keep_raw(p));
}

template <Transport T, Poll P>
Status oneway_client(T& t, Ctx& c, uint64_t size, uint64_t warmup, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t total = warmup + p.oneway.bursts * p.oneway.burst_size;
  OnewayStamps s(total, c.caps.send_completions);
  s.no_send = no_send_stamp(t, p, size) ?: "";
  if (s.no_send.empty()) {
    s.place = place_time_thread(p.oneway.time_thread, c.own_cpu, c.server_cpu, c.same_host);
    s.no_send = s.place.why;
    if (s.no_send.empty()) s.tt = std::make_unique<TimeThread>(clk, s.place.cpu);
  }
  PayloadBuf buf(size);
  // The stamp field leaves with zeros: a payload the thread never reached says so.
  if (size >= kSendStampEnd) std::memset(buf.data() + kSendStampOffset, 0, kSendStampEnd - kSendStampOffset);
  Guard g(c);
  if (const Status st = oneway_send<T, P>(t, c, size, warmup, buf, s, g); st != Status::ok) {
    out.partial = true;
    out.fields.add("sent", s.sent);
    return st;
  }
  const uint64_t t_end = clk.ticks();  // no stamp of the thread is later
  if (s.tt) s.tt->stop();
  c.ctrl.send(CtrlType::end_point, std::to_string(s.sent));
  std::string blob = c.ctrl.recv(CtrlType::exchange, "oneway receive timestamps");
  OnewayReport report;
  const uint64_t* t_recv = read_stamp_report(blob, total, &report, "oneway");
  const uint64_t* t_send = report.send_stamps ? t_recv + total : nullptr;
  if (c.sync.probed) probe_clock(c);
  oneway_fields(out, c, warmup, s, report, t_recv, t_send, t_end);
  return Status::ok;
}

template <Transport T, Poll P>
Status oneway_server(T& t, Ctx& c, uint64_t size, uint64_t warmup) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t total = warmup + p.oneway.bursts * p.oneway.burst_size;
  uint64_t* t_recv;
  const bool stamps = carries_send_stamps<T>(p, size);
  std::string blob = stamp_report<OnewayReport>(stamps ? 2 * total : total, &t_recv);
  uint64_t* t_send = stamps ? t_recv + total : nullptr;
  Guard g(c);
  uint64_t received = 0, duplicated = 0, reordered = 0, last_seq = 0;
  if (!warmup) c.cpu.begin();
  const auto take = [&](const RecvMsg& m) __attribute__((always_inline)) {
    // ---- hot path ----
    const uint64_t now = clk.ticks();
    uint64_t idx = c.caps.reliable ? received : get_seq(m.data, m.len);
    if (idx < total && t_recv[idx] == 0) {
      t_recv[idx] = now;
      if (t_send && m.len >= kSendStampEnd) std::memcpy(&t_send[idx], m.data + kSendStampOffset, sizeof(uint64_t));
    } else {
      ++duplicated;
    }
    t.release(m);
    if (idx < last_seq) ++reordered;
    last_seq = idx;
    if (++received == warmup) c.cpu.begin();
    return g.tick(t);
  };
  const Status st = receive_counted<P>(t, c, g, "oneway sent count", take, [&] { return received - duplicated; });
  if (st == Status::timeout && c.caps.reliable)
    runtime_error("oneway: messages missing after the client finished (reliable transport)");
  if (st != Status::ok && st != Status::timeout) return st;
  c.cpu.end(received - std::min(received, warmup), "message");
  OnewayReport report{ClockInfo::of(clk), received - duplicated, duplicated, reordered, total, stamps};
  std::memcpy(blob.data(), &report, sizeof report);
  c.ctrl.send(CtrlType::exchange, blob);
  if (c.sync.probed) probe_clock(c);
  return Status::ok;
}

struct OnewayExperiment : ExperimentDefaults {
  static constexpr const char* name = "oneway";
  static constexpr bool kRemoteClock = true;
  static constexpr bool kFewerWarmupAboveFullSize = false;
  static constexpr bool kNumbersOnlyUnreliable = true;  // put_seq / get_seq
  static void validate(const Params& p) {
    if (p.oneway.bursts == 0 || p.oneway.burst_size == 0) usage_error("--bursts and --burst-size must be at least 1");
  }
  static std::vector<Point> plan(const Params& p, const Caps& caps) {
    std::vector<Point> plan = sized_points<OnewayExperiment>(p, caps);
    for (Point& pt : plan) pt.iterations = sat_mul(p.oneway.bursts, p.oneway.burst_size);  // its bursts, at any size
    return plan;
  }
  static uint64_t report_bytes(const Params& p, const Point& pt) {
    const uint64_t total = sat_add(pt.warmup, sat_mul(p.oneway.bursts, p.oneway.burst_size));
    // A bound: the t_send array too wherever a payload may carry one.
    return stamp_report_bytes<OnewayReport>(send_stamps_asked(p, pt.size) ? sat_mul(total, 2) : total);
  }
  static void check_caps(const Params& p, const Caps& caps) {
    ExperimentDefaults::check_caps(p, caps);
    if (!caps.reliable && p.size < 4)
      usage_error("oneway over " + p.transport +
                  " needs --size >= 4 to carry a sequence number (the transport may lose or reorder)");
  }
  static PointCost cost(const Params& p, const Caps& caps, const Point&) {
    const double total = counted_warmup<OnewayExperiment, double>(p, 0) +
                         static_cast<double>(p.oneway.bursts) * static_cast<double>(p.oneway.burst_size);
    // Devices that read payloads after the post have send completions: their t_send comes back too.
    const bool stamps = caps.send_completions && send_stamps_asked(p, p.size);
    return {8 * total * (stamps ? 2 : 1),  // the receive stamps (and the payloads' t_send)
            static_cast<double>(p.oneway.bursts) * p.oneway.pause_us * 1e-6 + total * (kMinMessageNs * 1e-9 + p.gap_us * 1e-6),
            8 * total * (caps.send_completions ? 3 : 2)};  // t_subm, t_post (and t_comp)
  }
  template <Transport T, Poll P>
  static Status client(T& t, Ctx& c, const Point& pt, PointOut& out) {
    return oneway_client<T, P>(t, c, pt.size, pt.warmup, out);
  }
  template <Transport T, Poll P>
  static Status server(T& t, Ctx& c, const Point& pt, PointOut&) {
    return oneway_server<T, P>(t, c, pt.size, pt.warmup);
  }
};

}  // namespace fm
