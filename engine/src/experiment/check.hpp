// check: does a transport do what it claims? The client sends a few messages
// of every size from 1 B up to the transport's maximum (capped by
// --max-size), each filled with a pattern derived from its sequence number;
// the server verifies length, content and order (where the transport promises
// order) and reports. Then, after a pause long enough for an event-mode
// receiver to fall asleep, one more message measures the wake-up.
#pragma once
#include <algorithm>
#include <cmath>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "fabmeter/samples.hpp"

namespace fm {

constexpr uint64_t kCheckPerSize = 4;
constexpr double kCheckSleepMs = 100;

inline std::vector<uint64_t> check_sizes(const Params& p, uint64_t transport_max) {
  const uint64_t top = std::min(p.max_size, transport_max);
  std::vector<uint64_t> sizes;
  for (uint64_t size = 1; size <= top; size *= 2) sizes.push_back(size);
  if (sizes.back() != top) sizes.push_back(top);  // the exact maximum, e.g. 65507 for udp
  return sizes;
}

inline uint8_t check_byte(uint64_t seq, uint64_t j) { return static_cast<uint8_t>(seq * 131 + j * 7 + 1); }

inline void check_fill(std::byte* buf, uint64_t len, uint32_t seq) {
  for (uint64_t j = 0; j < len; ++j) buf[j] = static_cast<std::byte>(check_byte(seq, j));
  put_seq(buf, len, seq);
}

struct CheckReport {
  ClockInfo clock;
  uint64_t received, order_errors, content_errors, size_errors, duplicated;
  uint64_t wake_recv;   // ticks when the wake-up message arrived
};

inline CheckReport read_check_report(std::string_view blob, uint64_t sent) {
  CheckReport report;
  if (blob.size() != sizeof report) runtime_error("check: malformed report from the server");
  std::memcpy(&report, blob.data(), sizeof report);
  check_clock_info(report.clock, "check");
  if (report.received > sent) runtime_error("check: the server's report counts more arrivals than were sent");
  return report;
}

template <Transport T, Poll P>
Status check_client(T& t, Ctx& c, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const std::vector<uint64_t> sizes = check_sizes(p, c.caps.max_msg_size);
  PayloadBuf buf(sizes.back());
  Guard g(c);
  uint32_t seq = 0;
  Status st = Status::ok;
  c.cpu.begin();  // no warm-up: every message is checked
  for (uint64_t size : sizes) {
    for (uint64_t k = 0; k < kCheckPerSize && st == Status::ok; ++k, ++seq) {
      check_fill(buf.data(), size, seq);
      st = send_one<P>(t, buf.data(), static_cast<uint32_t>(size), 0, seq, g);
      // The contract lets the caller reuse its buffer at once: a transport
      // that still reads it after post_send returns sends this instead.
      std::memset(buf.data(), 0xa5, size);
    }
  }
  // Let the receiver go idle (and, in event mode, to sleep) before the wake-up message.
  const uint64_t until = clk.ticks() + clk.ns_to_ticks(kCheckSleepMs * 1e6);
  while (st == Status::ok && clk.ticks() < until) {
    IgnoreCompletions none;
    reap_send_comps(t, none);
    cpu_relax();
  }
  check_fill(buf.data(), 8, seq);
  const uint64_t t_wake = clk.ticks();
  if (st == Status::ok) st = send_one<P>(t, buf.data(), 8, kSendSignaled, seq, g);
  ++seq;
  if (st == Status::ctrl_pending) st = Status::ok;  // nothing is expected from the server meanwhile
  if (st == Status::ok) st = flush_sends<P>(t, g);
  c.cpu.end(seq, "message");
  if (st != Status::ok) {
    out.partial = true;
    return st;
  }
  c.ctrl.send(CtrlType::end_point, std::to_string(seq));
  std::string blob = c.ctrl.recv(CtrlType::exchange, "check report");
  const CheckReport report = read_check_report(blob, seq);

  const uint64_t lost = seq - std::min<uint64_t>(seq, report.received);
  const bool delivered_all = c.caps.reliable ? lost == 0 : true;
  // Unreliable: any message may be lost, the wake-up one too (its wake_ns is then null).
  const bool passed = delivered_all && report.order_errors == 0 && report.content_errors == 0 &&
                      report.size_errors == 0 && (c.caps.reliable ? report.duplicated == 0 && report.wake_recv != 0 : true);
  std::string list;
  for (uint64_t size : sizes) list += (list.empty() ? "" : ", ") + std::to_string(size);
  out.fields.add("passed", passed).add("messages", static_cast<uint64_t>(seq)).add("received", report.received)
      .add("lost", lost).add("order_errors", report.order_errors).add("content_errors", report.content_errors)
      .add("size_errors", report.size_errors).add("duplicated", report.duplicated)
      .add_raw("sizes_checked", "[" + list + "]")
      .add("max_msg_size", c.caps.max_msg_size).add("reliable", c.caps.reliable).add("ordered", c.caps.ordered)
      .add("wake_after_ms", kCheckSleepMs)
      .add("wake_ns", report.wake_recv && c.same_host
                          ? clk.to_ns(static_cast<double>(static_cast<int64_t>(report.wake_recv - t_wake)))
                          : NAN);
  return st;
}

template <Transport T, Poll P>
Status check_server(T& t, Ctx& c) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const std::vector<uint64_t> sizes = check_sizes(p, c.caps.max_msg_size);
  const uint64_t planned = sizes.size() * kCheckPerSize;  // then the wake-up message
  std::vector<uint8_t> seen(planned + 1);
  Guard g(c);
  CheckReport report{};
  report.clock = ClockInfo::of(clk);
  uint64_t arrivals = 0, last_seq = UINT64_MAX;
  const bool by_arrival = c.caps.ordered && c.caps.reliable;
  c.cpu.begin();
  const auto take = [&](const RecvMsg& m) {
    const uint64_t now = clk.ticks();
    // Reliable and ordered: the n-th arrival is message n. Otherwise the
    // sequence number in the payload says which (short messages carry part of
    // it): an ordered transport that may lose (UC) numbers its arrivals wrong
    // after one loss.
    uint64_t seq = by_arrival ? arrivals : get_seq(m.data, m.len);
    if (!by_arrival && m.len < 4) {
      for (uint64_t i = 0; i < planned; ++i)
        if (sizes[i / kCheckPerSize] == m.len && (i & ((1ull << (8 * m.len)) - 1)) == seq && !seen[i]) {
          seq = i;
          break;
        }
    }
    ++arrivals;
    if (seq > planned) { ++report.content_errors; t.release(m); return Status::ok; }
    if (seen[seq]++) { ++report.duplicated; t.release(m); return Status::ok; }
    ++report.received;
    const uint64_t want_len = seq == planned ? 8 : sizes[seq / kCheckPerSize];
    if (m.len != want_len) {
      ++report.size_errors;
    } else {
      // Ordered: by arrival, the payload's number is the arrival's; lossy, never one before the last.
      if (by_arrival ? get_seq(m.data, m.len) != (static_cast<uint32_t>(seq) & (m.len >= 4 ? ~0u : (1u << (8 * m.len)) - 1))
                     : c.caps.ordered && last_seq != UINT64_MAX && seq < last_seq)
        ++report.order_errors;
      last_seq = seq;
      for (uint64_t j = 4; j < m.len; ++j)
        if (static_cast<uint8_t>(m.data[j]) != check_byte(seq, j)) {
          ++report.content_errors;
          break;
        }
    }
    if (seq == planned) report.wake_recv = now;
    t.release(m);
    return Status::ok;
  };
  // Status::timeout: the rest is lost.
  if (const Status st = receive_counted<P>(t, c, g, "check sent count", take, [&] { return report.received; });
      st != Status::ok && st != Status::timeout)
    return st;
  c.cpu.end(report.received, "message");
  c.ctrl.send(CtrlType::exchange, std::string(reinterpret_cast<const char*>(&report), sizeof report));
  return Status::ok;
}

struct CheckExperiment : ExperimentDefaults {
  static constexpr const char* name = "check";
  // One point: its size is the largest checked (the session sizes buffers by it).
  static std::vector<Point> plan(const Params& p, const Caps& caps) {
    return {{.size = check_sizes(p, caps.max_msg_size).back()}};
  }
  static PointCost cost(const Params& p, const Caps& caps, const Point&) {
    return {static_cast<double>(check_sizes(p, caps.max_msg_size).size() * kCheckPerSize), 0};  // the seen flags
  }
  template <Transport T, Poll P>
  static Status client(T& t, Ctx& c, const Point&, PointOut& out) {
    return check_client<T, P>(t, c, out);
  }
  template <Transport T, Poll P>
  static Status server(T& t, Ctx& c, const Point&, PointOut&) {
    return check_server<T, P>(t, c);
  }
};

}  // namespace fm
