// oneway: the thesis' custom one-way benchmark. The client sends bursts of
// messages, stamping t_subm just before each post; the server stamps t_recv
// as it sees each one. Both ends on one host read the same TSC, so
// t_recv - t_subm needs no clock correction; across hosts the server's clock
// is mapped onto the client's by the offset measured at connect.
#pragma once
#include <time.h>

#include <algorithm>
#include <cmath>

#include "experiment/common.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/stats.hpp"

namespace fm {

struct ClockSync {
  bool probed = false;      // false: shared TSC, no correction
  double offset_ns = 0;     // server mono ns - client mono ns
  double error_bound_ns = 0;
};

inline void pause_for(const Clock& clk, Poll poll, double us) {
  if (us <= 0) return;
  if (poll == Poll::event && us >= 50) {
    timespec ts{static_cast<time_t>(us / 1e6), static_cast<long>(std::fmod(us, 1e6) * 1e3)};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
    return;
  }
  const uint64_t until = clk.ticks() + clk.ns_to_ticks(us * 1e3);
  while (clk.ticks() < until && !stop_requested()) cpu_relax();
}

// Server -> client after the point: how many arrived and when.
struct OnewayReport {
  uint64_t received, duplicated, reordered, total;
  double ns_per_tick;
  double mono0_ns;
  uint64_t tick0;
};

template <class T>
Status oneway_client(T& t, Ctx& c, uint64_t size, uint64_t warmup, const ClockSync& sync, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t total = warmup + p.bursts * p.burst_size;
  SampleBuf t_subm(total);
  PayloadBuf buf(size);
  Guard g(c);
  const uint32_t len = static_cast<uint32_t>(size);
  uint64_t sent = 0;
  Status st = Status::ok;

  // Warm-up goes first, as a burst of its own, then the measured bursts.
  const uint64_t n_bursts = p.bursts + (warmup ? 1 : 0);
  for (uint64_t b = 0; b < n_bursts && st == Status::ok; ++b) {
    const uint64_t in_burst = (warmup && b == 0) ? warmup : p.burst_size;
    for (uint64_t j = 0; j < in_burst; ++j) {
      if (stop_requested()) { st = Status::interrupted; break; }
      if (!c.caps.reliable) put_seq(buf.data(), size, static_cast<uint32_t>(sent));
      // ---- hot path ----
      t_subm[sent] = clk.ticks();
      if ((st = send_one(t, buf.data(), len, 0, sent, g, p.poll)) != Status::ok) break;
      ++sent;
    }
    if (st == Status::ok) pause_for(clk, p.poll, p.pause_us);
  }
  if (st == Status::ctrl_message) st = Status::ok;  // nothing is expected from the server mid-burst
  if (st != Status::ok) {
    out.partial = true;
    out.fields.add("sent", sent);
    return st;
  }
  c.ctrl.send(CtrlType::end_point, std::to_string(sent));
  std::string blob = c.ctrl.recv(CtrlType::exchange, "oneway receive timestamps");
  OnewayReport r;
  if (blob.size() < sizeof r) runtime_error("oneway: short report from the server");
  std::memcpy(&r, blob.data(), sizeof r);
  if (r.total != total || blob.size() != sizeof r + total * sizeof(uint64_t))
    runtime_error("oneway: the server's report does not match this run (version mismatch?)");
  const auto* t_recv = reinterpret_cast<const uint64_t*>(blob.data() + sizeof r);

  std::vector<double> lat;
  lat.reserve(total - warmup);
  uint64_t lost = 0;
  for (uint64_t k = warmup; k < sent; ++k) {
    if (t_recv[k] == 0) { ++lost; continue; }
    double ns;
    if (!sync.probed) {
      ns = clk.to_ns(static_cast<double>(static_cast<int64_t>(t_recv[k] - t_subm[k])));
    } else {
      double recv_ns = r.mono0_ns + (static_cast<double>(t_recv[k]) - static_cast<double>(r.tick0)) * r.ns_per_tick;
      ns = recv_ns - sync.offset_ns - clk.ticks_to_mono_ns(t_subm[k]);
    }
    lat.push_back(ns);
  }
  uint64_t above = 0;
  for (double x : lat) above += x > p.threshold_us * 1e3;
  JsonObj cs;
  cs.add("method", sync.probed ? "probe" : "shared_tsc");
  if (sync.probed) cs.add("offset_ns", sync.offset_ns).add("error_bound_ns", sync.error_bound_ns);
  out.fields.add("iterations", static_cast<uint64_t>(lat.size())).add("sent", sent - std::min(sent, warmup))
      .add("lost", lost).add("duplicated", r.duplicated).add("reordered", r.reordered)
      .add("latency_kind", "one-way")
      .add("latency_ns", to_json(summarize(lat.data(), lat.size())))
      .add("threshold_us", p.threshold_us)
      .add("above_threshold_pct", lat.empty() ? 0.0 : 100.0 * static_cast<double>(above) / static_cast<double>(lat.size()))
      .add("bursts", p.bursts).add("burst_size", p.burst_size).add("pause_us", p.pause_us)
      .add("clock_sync", cs)
      .add("samples_locked", t_subm.locked());
  out.arrays.emplace_back("latency_ns", std::move(lat));
  return st;
}

template <class T>
Status oneway_server(T& t, Ctx& c, uint64_t size, uint64_t warmup) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t total = warmup + p.bursts * p.burst_size;
  std::string blob(sizeof(OnewayReport) + total * sizeof(uint64_t), '\0');
  auto* t_recv = reinterpret_cast<uint64_t*>(blob.data() + sizeof(OnewayReport));
  // Touch every page now so stamping never faults.
  for (size_t i = 0; i < blob.size(); i += 4096) blob[i] = 0;
  Guard g(c);
  uint64_t received = 0, duplicated = 0, reordered = 0, expected = UINT64_MAX, last_seq = 0;
  uint64_t deadline = UINT64_MAX;
  const uint64_t drain = clk.ns_to_ticks((c.caps.reliable ? p.timeout_ms : p.loss_timeout_ms) * 1e6);
  Status st;
  while (received < expected) {
    RecvMsg m;
    st = recv_next(t, m, g, clk, p.poll, deadline);
    if (st == Status::ok) {
      // ---- hot path ----
      const uint64_t now = clk.ticks();
      uint64_t idx = c.caps.reliable ? received : get_seq(m.data, m.len);
      t.release(m);
      if (idx < total && t_recv[idx] == 0) t_recv[idx] = now;
      else ++duplicated;
      if (idx < last_seq) ++reordered;
      last_seq = idx;
      ++received;
      continue;
    }
    if (st == Status::ctrl_message) {
      expected = std::stoull(c.ctrl.recv(CtrlType::end_point, "end of oneway point"));
      deadline = clk.ticks() + drain;  // what is still in flight arrives by then, or is lost
      continue;
    }
    if (st == Status::timeout) {
      if (c.caps.reliable) runtime_error("oneway: messages missing after the client finished (reliable transport)");
      break;
    }
    return st;
  }
  OnewayReport r{received - duplicated, duplicated, reordered, total, clk.ns_per_tick(), clk.ticks_to_mono_ns(0), 0};
  std::memcpy(blob.data(), &r, sizeof r);
  c.ctrl.send(CtrlType::exchange, blob);
  return Status::ok;
}

}  // namespace fm
