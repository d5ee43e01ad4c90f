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
#include "fabmeter/samples.hpp"

namespace fm {

constexpr uint64_t kCheckPerSize = 4;
constexpr double kCheckSleepMs = 100;

inline std::vector<uint64_t> check_sizes(const Params& p, uint64_t transport_max) {
  const uint64_t top = std::min(p.max_size, transport_max);
  std::vector<uint64_t> s;
  for (uint64_t x = 1; x <= top; x *= 2) s.push_back(x);
  if (s.back() != top) s.push_back(top);  // the exact maximum, e.g. 65507 for udp
  return s;
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
  CheckReport r;
  if (blob.size() != sizeof r) runtime_error("check: malformed report from the server");
  std::memcpy(&r, blob.data(), sizeof r);
  check_clock_info(r.clock, "check");
  if (r.received > sent) runtime_error("check: the server's report counts more arrivals than were sent");
  return r;
}

template <class T>
Status check_client(T& t, Ctx& c, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const std::vector<uint64_t> sizes = check_sizes(p, c.caps.max_msg_size);
  PayloadBuf buf(sizes.back());
  Guard g(c);
  uint32_t seq = 0;
  Status st = Status::ok;
  for (uint64_t size : sizes) {
    for (uint64_t k = 0; k < kCheckPerSize && st == Status::ok; ++k, ++seq) {
      check_fill(buf.data(), size, seq);
      st = send_one(t, buf.data(), static_cast<uint32_t>(size), 0, seq, g, p.poll);
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
  if (st == Status::ok) st = send_one(t, buf.data(), 8, kSendSignaled, seq, g, p.poll);
  ++seq;
  if (st == Status::ctrl_message) st = Status::ok;
  if (st == Status::ok) st = flush_sends(t, g, p.poll);
  if (st != Status::ok) {
    out.partial = true;
    return st;
  }
  c.ctrl.send(CtrlType::end_point, std::to_string(seq));
  std::string blob = c.ctrl.recv(CtrlType::exchange, "check report");
  const CheckReport r = read_check_report(blob, seq);

  const uint64_t lost = seq - std::min<uint64_t>(seq, r.received);
  const bool delivered_all = c.caps.reliable ? lost == 0 : true;
  const bool passed = delivered_all && r.order_errors == 0 && r.content_errors == 0 && r.size_errors == 0 &&
                      (c.caps.reliable ? r.duplicated == 0 : true) && r.wake_recv != 0;
  std::string list;
  for (uint64_t s : sizes) list += (list.empty() ? "" : ", ") + std::to_string(s);
  out.fields.add("passed", passed).add("messages", static_cast<uint64_t>(seq)).add("received", r.received)
      .add("lost", lost).add("order_errors", r.order_errors).add("content_errors", r.content_errors)
      .add("size_errors", r.size_errors).add("duplicated", r.duplicated)
      .add_raw("sizes_checked", "[" + list + "]")
      .add("max_msg_size", c.caps.max_msg_size).add("reliable", c.caps.reliable).add("ordered", c.caps.ordered)
      .add("wake_after_ms", kCheckSleepMs)
      .add("wake_ns", r.wake_recv && c.same_host ? clk.to_ns(static_cast<double>(static_cast<int64_t>(r.wake_recv - t_wake)))
                                                : NAN);
  return st;
}

template <class T>
Status check_server(T& t, Ctx& c) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const std::vector<uint64_t> sizes = check_sizes(p, c.caps.max_msg_size);
  const uint64_t planned = sizes.size() * kCheckPerSize;  // then the wake-up message
  std::vector<uint8_t> seen(planned + 1);
  Guard g(c);
  CheckReport r{};
  r.clock = ClockInfo::of(clk);
  uint64_t arrivals = 0, expected = UINT64_MAX, deadline = UINT64_MAX;
  const uint64_t drain = clk.ns_to_ticks((c.caps.reliable ? p.timeout_ms : p.loss_timeout_ms) * 1e6);
  // Distinct arrivals: a duplicate must not end the wait for a straggler.
  while (r.received < expected) {
    RecvMsg m;
    Status st = recv_next(t, m, g, clk, p.poll, deadline);
    if (st == Status::ctrl_message) {
      expected = recv_count(c.ctrl, "check sent count");
      g.peer_finished();
      deadline = clk.ticks() + drain;
      continue;
    }
    if (st == Status::timeout) break;
    if (st != Status::ok) return st;
    const uint64_t now = clk.ticks();
    // Reliable and ordered: the n-th arrival is message n. Otherwise the
    // sequence number in the payload says which (short messages carry part of it).
    uint64_t seq = c.caps.ordered ? arrivals : get_seq(m.data, m.len);
    if (!c.caps.ordered && m.len < 4) {
      for (uint64_t i = 0; i < planned; ++i)
        if (sizes[i / kCheckPerSize] == m.len && (i & ((1ull << (8 * m.len)) - 1)) == seq && !seen[i]) {
          seq = i;
          break;
        }
    }
    ++arrivals;
    if (seq > planned) { ++r.content_errors; t.release(m); continue; }
    if (seen[seq]++) { ++r.duplicated; t.release(m); continue; }
    ++r.received;
    const uint64_t want_len = seq == planned ? 8 : sizes[seq / kCheckPerSize];
    if (m.len != want_len) {
      ++r.size_errors;
    } else {
      if (c.caps.ordered && get_seq(m.data, m.len) != (static_cast<uint32_t>(seq) & (m.len >= 4 ? ~0u : (1u << (8 * m.len)) - 1)))
        ++r.order_errors;
      for (uint64_t j = 4; j < m.len; ++j)
        if (static_cast<uint8_t>(m.data[j]) != check_byte(seq, j)) {
          ++r.content_errors;
          break;
        }
    }
    if (seq == planned) r.wake_recv = now;
    t.release(m);
  }
  c.ctrl.send(CtrlType::exchange, std::string(reinterpret_cast<const char*>(&r), sizeof r));
  return Status::ok;
}

}  // namespace fm
