// bw: streaming throughput. The sender posts as fast as the transport takes
// messages; throughput is measured where it matters, at the receiver, from
// the arrival of the last warm-up message to the arrival of the last one.
// --bidir: both ends send and receive at once and both directions count.
// One-sided ops (read, atomics) are answered at their sender: each end then
// counts its own answers, and the client's are direction c2s.
// Each end announces how many it sent on the control channel, so the receiver
// knows when it has everything (or, on unreliable transports, what was lost).
#pragma once
#include <algorithm>
#include <array>
#include <sstream>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "fabmeter/rng.hpp"
#include "fabmeter/samples.hpp"

namespace fm {

// Throughput over time at a receiver: arrivals per bin of --series-ms from
// the end of the warm-up, counted where bw stamps the clock (once per batch
// of receives), into a buffer that lives on the stack before the run. A run
// that outlasts kMaxBins bins merges neighbours and doubles the width, so
// nothing is allocated or dropped whatever the run's length.
struct BwSeries {
  static constexpr size_t kMaxBins = 512;
  uint64_t bin_ticks = 1;
  size_t used = 0;
  std::array<uint64_t, kMaxBins> msgs{};

  void add(uint64_t since_mark_ticks, uint64_t n) {
    uint64_t i = since_mark_ticks / bin_ticks;
    while (i >= kMaxBins) {
      for (size_t k = 0; k < kMaxBins / 2; ++k) msgs[k] = msgs[2 * k] + msgs[2 * k + 1];
      std::fill(msgs.begin() + kMaxBins / 2, msgs.end(), 0);
      bin_ticks *= 2;
      used = (used + 1) / 2;
      i = since_mark_ticks / bin_ticks;
    }
    msgs[i] += n;
    used = std::max<size_t>(used, i + 1);
  }
};

struct BwSide {
  uint64_t sent = 0, received = 0, measured = 0;
  double recv_ns = 0, send_ns = 0;
  uint64_t warmup_received = 0;  // of `received`, how many were warm-up messages
  double series_bin_ns = 0;      // BwSeries, as the receiver ended it
  std::vector<uint64_t> series;

  std::string encode() const {
    std::ostringstream o;
    o.precision(17);
    o << sent << ' ' << received << ' ' << measured << ' ' << recv_ns << ' ' << send_ns << ' ' << warmup_received
      << ' ' << series_bin_ns << ' ' << series.size();
    for (uint64_t n : series) o << ' ' << n;
    return o.str();
  }
  // {"bin_ns": W, "msgs": [...]}: the point's throughput_series of one direction.
  std::string series_json() const {
    std::string msgs;
    for (uint64_t n : series) msgs += (msgs.empty() ? "" : ",") + std::to_string(n);
    return JsonObj().add("bin_ns", series_bin_ns).add_raw("msgs", "[" + msgs + "]").str();
  }
  // Space-separated fields, each checked: the other end's text is untrusted.
  static BwSide decode(std::string_view text) {
    std::string_view s = text;
    std::vector<std::string_view> f;
    while (!s.empty() && f.size() < 8 + BwSeries::kMaxBins + 1) {
      const size_t sp = std::min(s.find(' '), s.size());
      f.push_back(s.substr(0, sp));
      s = s.substr(std::min(sp + 1, s.size()));
    }
    if (f.size() < 8) runtime_error("bw: malformed counts from the other end: '" + remote_excerpt(text) + "'");
    BwSide b;
    b.sent = parse_remote_u64(f[0], "bw sent count");
    b.received = parse_remote_u64(f[1], "bw received count");
    b.measured = parse_remote_u64(f[2], "bw measured count");
    b.recv_ns = parse_remote_double(f[3], "bw receive time");
    b.send_ns = parse_remote_double(f[4], "bw send time");
    b.warmup_received = parse_remote_u64(f[5], "bw warm-up received count");
    b.series_bin_ns = parse_remote_double(f[6], "bw series bin width");
    const uint64_t bins = parse_remote_u64(f[7], "bw series bins", BwSeries::kMaxBins);
    if (f.size() != 8 + bins) runtime_error("bw: the other end's series has " + std::to_string(f.size() - 8) + " bins, not " +
                                            std::to_string(bins));
    uint64_t in_bins = 0;
    for (uint64_t i = 0; i < bins; ++i) {
      b.series.push_back(parse_remote_u64(f[8 + i], "bw series count", b.measured));
      in_bins += b.series.back();
    }
    if (b.measured > b.received || b.warmup_received > b.received || b.recv_ns < 0 || b.send_ns < 0 ||
        in_bins != b.measured)
      runtime_error("bw: impossible counts from the other end: '" + remote_excerpt(f[0]) + " " + remote_excerpt(f[1]) + " " +
                    remote_excerpt(f[2]) + "'");
    return b;
  }
};

// --size-spread PCT: message n's size is sizes[n mod kSlots], drawn once
// before the run, uniform in size +- PCT % from a fixed seed. Both ends draw
// the same table, so each can tell the bytes of any run of messages from
// their numbers (the receiver counts messages, not bytes).
struct SpreadSizes {
  static constexpr uint64_t kSlots = 4096;  // a power of two: the hot path masks
  static constexpr uint64_t kSeed = 1;
  std::vector<uint32_t> sizes;              // empty: every message is `size`
  uint64_t total = 0;                       // bytes of one pass over the table

  static uint64_t low(uint64_t size, uint32_t pct) { return std::max<uint64_t>(1, (size * (100 - pct) + 99) / 100); }
  static uint64_t high(uint64_t size, uint32_t pct) { return size * (100 + pct) / 100; }
  SpreadSizes(uint64_t size, uint32_t pct) {
    if (pct == 0) return;
    Rng rng(kSeed);
    const uint64_t lo = low(size, pct), span = high(size, pct) - lo + 1;
    sizes.resize(kSlots);
    for (uint32_t& n : sizes) {
      n = static_cast<uint32_t>(lo + std::min(span - 1, static_cast<uint64_t>(rng.uniform() * static_cast<double>(span))));
      total += n;
    }
  }
  // Mean bytes of messages first .. first + count - 1.
  double mean(uint64_t first, uint64_t count, uint64_t size) const {
    if (sizes.empty() || count == 0) return static_cast<double>(size);
    double bytes = static_cast<double>(total) * static_cast<double>(count / kSlots);
    for (uint64_t n = first + count / kSlots * kSlots; n < first + count; ++n) bytes += sizes[n & (kSlots - 1)];
    return bytes / static_cast<double>(count);
  }
};

// Messages a sender sent but the receiver never saw, measured and warm-up apart.
struct BwLoss {
  uint64_t lost = 0, warmup_lost = 0;
  void add(const BwSide& tx, const BwSide& rx, uint64_t warmup) {
    const uint64_t warm_tx = std::min(tx.sent, warmup);
    const uint64_t measured_rx = rx.received - std::min(rx.received, rx.warmup_received);
    lost += tx.sent - warm_tx - std::min(tx.sent - warm_tx, measured_rx);
    warmup_lost += warm_tx - std::min(warm_tx, rx.warmup_received);
  }
};

// What an end does in a bw point, chosen once from its role, the options
// and the transport.
struct BwMode {
  bool sends;            // the client always, the server with --bidir
  bool by_duration;      // --duration: the sends end when the time is up, not after a count
  bool seq;              // payloads carry their sequence number
  bool own_answers;      // one-sided ops: each end counts the answers to its own sends
  bool pure_sender;      // nothing ever arrives here: never poll for receives
  bool post_until_full;  // post until the window is full, then poll
  bool idle_server;      // nothing arrives, nothing goes out
  uint64_t mark;         // the arrival that starts the receive clock

  static BwMode of(const Ctx& c, uint64_t size, uint64_t warmup) {
    const Params& p = c.p;
    BwMode m{};
    m.sends = c.role == Role::client || p.bw.bidir;
    m.by_duration = p.duration > 0;
    // Unreliable transports carry the sequence number, so lost warm-up
    // messages are told apart from lost measured ones (where it fits).
    m.seq = !c.caps.reliable && SpreadSizes::low(size, p.bw.size_spread) >= 4;
    m.own_answers = c.caps.one_sided;
    // A two-sided client without --bidir (as perftest's sender).
    m.pure_sender = m.sends && !m.own_answers && c.role == Role::client && !p.bw.bidir;
    // As perftest: where answers come in batches behind a signaled
    // completion (one-sided ops: read 2.5 % faster in the Soft-RoCE guest),
    // and on a pure sender whose posts complete later (verbs, ofi: send 0-1 %
    // faster there). Not where a post that succeeds has handed the message
    // over (shm, sockets): shm's bw fell from ~150 to 14-105 M msg/s when its
    // sender filled the ring first.
    m.post_until_full = m.own_answers || (m.pure_sender && c.caps.send_completions);
    // A one-sided point's server without --bidir.
    m.idle_server = m.own_answers && !m.sends;
    m.mark = std::max<uint64_t>(warmup, 1);
    return m;
  }
};

// The receive clock. Arrival times are taken once per batch of receives,
// not per message: the clock stays out of the per-message path, and the
// error is one batch. The batch that reaches the mark ends there, so the
// clock starts at the mark's arrival and nothing that came with it is
// counted after it.
struct BwRecvClock {
  BwSeries& series;
  uint64_t t_mark = 0, t_last = 0;  // ticks: the mark's arrival, the last batch's
  uint64_t binned = 0;              // arrivals already in the series or before the mark

  // A batch is in, `received` in all: true if the clock starts with it.
  bool stamp(uint64_t now, uint64_t received, uint64_t mark) {
    t_last = now;
    const bool starts = !t_mark && received >= mark;
    if (starts) t_mark = now;
    const uint64_t from = std::max(binned, mark);
    if (t_mark && received > from) series.add(t_last - t_mark, received - from);
    binned = received;
    return starts;
  }
};

// What an end's loop leaves: its counts and the clock stamps that time them.
struct BwLoopEnd {
  Status st = Status::ok;
  BwSide me;                               // sent, received, warmup_received
  uint64_t t_mark = 0, t_last = 0;         // the receive clock: the mark's arrival, the last batch's
  uint64_t t_send0 = 0, t_send_end = 0;    // the send clock: the end of the warm-up, the announcement
};

// A one-sided point's idle server: its count (none) out, the client's in.
template <Transport T>
BwLoopEnd bw_idle(T& t, Ctx& c) {
  BwLoopEnd e;
  e.t_send0 = c.clk.ticks();
  c.ctrl.send(CtrlType::end_point, "0");
  e.st = sleep_until_ctrl(t, c);
  if (e.st == Status::ctrl_pending) {
    e.st = Status::ok;
    recv_count(c.ctrl, "bw sent count");
  }
  return e;
}

// An end that sends, receives or both: until every message is in (or,
// unreliable, given up for lost) and both ends said how many they sent.
template <Transport T, Poll P>
BwLoopEnd bw_loop(T& t, Ctx& c, BwMode mode, uint64_t size, uint64_t iters, uint64_t warmup,
                  const SpreadSizes& spread, PayloadBuf& buf, Guard& g, BwSeries& series) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  uint64_t my_total = mode.sends ? (mode.by_duration ? UINT64_MAX : warmup + iters) : 0;
  const uint64_t drain = clk.ns_to_ticks((c.caps.reliable ? p.timeout_ms : p.loss_timeout_ms) * 1e6);
  const uint32_t len = static_cast<uint32_t>(size);
  BwSide me;
  uint64_t remote_sent = UINT64_MAX, t_send0 = clk.ticks(), t_send_end = 0;
  uint64_t t_stop = UINT64_MAX, t_remote_done = 0;
  bool announced = false;
  Status st = Status::ok;
  if (mode.sends && !warmup) c.cpu.begin();

  BwRecvClock rx{series};
  auto stamp = [&] {
    // A receiver alone: its window opens with the receive clock.
    if (rx.stamp(clk.ticks(), me.received, mode.mark) && !mode.sends) c.cpu.begin();
  };

  for (uint32_t idle = 0, busy = 0;;) {
    if (stop_requested()) { st = Status::interrupted; break; }
    bool progressed = false;
    if (me.sent < my_total) {
      const uint32_t n = spread.sizes.empty() ? len : spread.sizes[me.sent & (SpreadSizes::kSlots - 1)];
      if (mode.seq) put_seq(buf.data(), n, static_cast<uint32_t>(me.sent));
      // The last message asks for a completion (kSendSignaled, not
      // kSendMore), so its completion (a one-sided op's answer) comes and
      // tx_idle covers every send; with --duration it is the first one
      // posted after the time is up. So does the last warm-up message: a
      // completion then answers exactly up to the mark, none past it.
      const bool time_up = mode.by_duration && me.sent >= warmup && clk.ticks() >= t_stop;
      const bool ends_a_phase = time_up || me.sent + 1 == my_total || me.sent + 1 == warmup;
      // The payload changes only with a sequence number; the run's first
      // post makes the transport take its bytes afresh.
      const uint32_t flags = (ends_a_phase ? uint32_t{kSendSignaled} : uint32_t{kSendMore}) |
                             (!mode.seq && me.sent ? uint32_t{kSameBytes} : 0u);
      if (t.post_send(buf.data(), n, flags, me.sent)) {
        // ---- hot path: one message out ----
        if (++me.sent == warmup && mode.by_duration) t_stop = clk.ticks() + clk.ns_to_ticks(p.duration * 1e9);
        if (me.sent == warmup) c.cpu.begin(), t_send0 = clk.ticks();
        if (time_up) my_total = me.sent;
        progressed = true;
        // Every kTickStride-th post goes on to the guard below: ofi's post
        // reaps completions itself, so its window need never fill.
        if (mode.post_until_full && me.sent < my_total && me.sent % kTickStride) continue;
      } else {
        IgnoreCompletions none;
        reap_send_comps(t, none);
      }
    }
    if (me.sent >= my_total && !announced && !tx_idle(t)) {
      IgnoreCompletions none;  // drives tcp's flush of a partial send
      reap_send_comps(t, none);
    }
    if (me.sent >= my_total && !announced && tx_idle(t)) {
      t_send_end = clk.ticks();
      c.ctrl.send(CtrlType::end_point, std::to_string(me.sent));
      announced = true;
    }
    auto take = [&](RecvMsg& m) {
      if (mode.seq) me.warmup_received += get_seq(m.data, m.len) < warmup;
      t.release(m);
      ++me.received;
    };
    RecvMsg m;
    const uint64_t before = me.received;
    while (!mode.pure_sender && me.received - before < 64 && (rx.t_mark || me.received < mode.mark) && t.poll_recv(m)) take(m);
    if (me.received != before) {
      stamp();
      progressed = true;
    }
    const uint64_t expected = mode.own_answers ? me.sent : remote_sent;
    if (announced && remote_sent != UINT64_MAX && me.received >= expected) break;
    // Busy or idle, the guard runs now and then: heartbeats, the other end's count.
    if (progressed) {
      idle = 0;
      if (++busy % kTickStride) continue;
    } else if (P == Poll::busy && ++idle < kGuardSpins) {
      cpu_relax();
      continue;
    }
    idle = 0;
    st = g.check(t);
    if (st == Status::ctrl_pending) {
      st = Status::ok;
      // Only the first message is the count; a second one is the other end, done
      // already, waiting for our counts: the drain deadline below ends it.
      if (remote_sent == UINT64_MAX) {
        remote_sent = recv_count(c.ctrl, "bw sent count");
        t_remote_done = clk.ticks();
        continue;
      }
    }
    if (st != Status::ok) break;
    // Only once our own sends are out: a slow sender must not give up on the other end.
    // Draining starts when both ends are done sending: a long send phase
    // must not count against the drain deadline.
    if (announced && remote_sent != UINT64_MAX && clk.ticks() > std::max({rx.t_last, t_remote_done, t_send_end}) + drain) {
      if (c.caps.reliable) {
        c.failure = "bw: " + std::to_string(expected - me.received) + " messages missing on a reliable transport";
        st = Status::failed;
      }
      break;  // unreliable: whatever has not arrived by now is lost
    }
    if (P == Poll::event && !progressed) {
      if (me.sent < my_total) t.wait_send();
      else if (wait_for_msg(t, m, c)) {
        take(m);
        stamp();
      }
    }
  }
  return {st, std::move(me), rx.t_mark, rx.t_last, t_send0, t_send_end};
}

// The client's fields of the point: direction c2s was received by the
// server, s2c by the client.
inline void bw_fields(PointOut& out, const Params& p, const BwMode& mode, const SpreadSizes& spread, uint64_t size,
                      uint64_t warmup, const BwSide& me, const BwSide& remote) {
  // The measured arrivals are messages mark .. mark + measured - 1 (in order;
  // with losses on an unreliable transport their mean size is estimated so).
  auto rate = [&](const BwSide& rx, double* gbps, double* msgs) {
    *msgs = rx.recv_ns > 0 ? static_cast<double>(rx.measured) / rx.recv_ns * 1e9 : 0;
    *gbps = *msgs * spread.mean(mode.mark, rx.measured, size) * 8 / 1e9;
  };
  const BwSide& rx_c2s = mode.own_answers ? me : remote;
  const BwSide& rx_s2c = mode.own_answers ? remote : me;
  double gbps, msg_rate;
  rate(rx_c2s, &gbps, &msg_rate);
  JsonObj series_json;
  series_json.add_raw("c2s", rx_c2s.series_json());
  BwLoss loss;
  loss.add(me, rx_c2s, warmup);
  if (p.bw.bidir) {
    double gbps_s2c, msg_rate_s2c;
    rate(rx_s2c, &gbps_s2c, &msg_rate_s2c);
    out.fields.add("gbps_c2s", gbps).add("gbps_s2c", gbps_s2c);
    series_json.add_raw("s2c", rx_s2c.series_json());
    gbps += gbps_s2c;
    msg_rate += msg_rate_s2c;
    loss.add(remote, rx_s2c, warmup);
  }
  double offered = me.send_ns > 0 ? static_cast<double>(me.sent - warmup) / me.send_ns * 1e9 : 0;
  out.fields.add("iterations", me.sent - std::min(me.sent, warmup)).add("lost", loss.lost)
      .add("warmup_lost", loss.warmup_lost)
      .add("gbps", gbps).add("msg_rate", msg_rate)
      .add("offered_msg_rate", offered)
      .add("bidir", p.bw.bidir).add("tx_depth", p.bw.tx_depth)
      .add("size_spread", static_cast<uint64_t>(p.bw.size_spread)).add("mean_size", spread.mean(mode.mark, rx_c2s.measured, size))
      .add("throughput_series", series_json)
      .add("measured_at", mode.own_answers ? "sender (one-sided: where the answers arrive)" : "receiver");
}

// Both ends run this: the client always sends, the server with --bidir.
template <Transport T, Poll P>
Status bw_run(T& t, Ctx& c, uint64_t size, uint64_t iters, uint64_t warmup, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const BwMode mode = BwMode::of(c, size, warmup);
  const SpreadSizes spread(size, p.bw.size_spread);
  PayloadBuf buf(SpreadSizes::high(size, p.bw.size_spread));  // high and low are `size` without a spread
  if (!p.bw.size_spread) fix_message_size(t, size);
  Guard g(c);
  // Credits this end sent as writes of their own or its writes carried
  // (verbs' plain write: in --bidir most are carried).
  const auto credits0 = [&] {
    if constexpr (requires { t.credit_counts(); }) return t.credit_counts();
    else return 0;
  }();
  BwSeries series;
  series.bin_ticks = std::max<uint64_t>(1, clk.ns_to_ticks(p.bw.series_ms * 1e6));
  BwLoopEnd end = mode.idle_server ? bw_idle(t, c) : bw_loop<T, P>(t, c, mode, size, iters, warmup, spread, buf, g, series);

  BwSide& me = end.me;
  me.measured = end.t_mark ? me.received - mode.mark : 0;
  const uint64_t moved = (mode.sends ? me.sent - std::min(me.sent, warmup) : 0) + me.measured;
  c.cpu.end(moved, "message", sat_mul(moved, size));
  if (!mode.seq) me.warmup_received = std::min(me.received, warmup);  // taken as the first to arrive
  me.recv_ns = me.measured ? clk.to_ns(static_cast<double>(end.t_last - end.t_mark)) : 0;
  me.send_ns = me.sent > warmup && end.t_send_end > end.t_send0 ? clk.to_ns(static_cast<double>(end.t_send_end - end.t_send0)) : 0;
  me.series_bin_ns = clk.to_ns(static_cast<double>(series.bin_ticks));
  me.series.assign(series.msgs.begin(), series.msgs.begin() + static_cast<std::ptrdiff_t>(series.used));
  if (end.st != Status::ok) {
    out.partial = true;
    return end.st;
  }
  BwSide remote;
  try {
    remote = BwSide::decode(c.ctrl.exchange(me.encode(), "bw counts"));
  } catch (const Error& e) {
    if (e.kind == ErrorKind::usage) throw;  // the server's refuse mid-point
    // The other end died or froze after the loop: the point is kept, partial.
    c.failure = e.what();
    out.partial = true;
    return Status::peer_lost;
  }
  if (c.role == Role::server) return Status::ok;
  bw_fields(out, p, mode, spread, size, warmup, me, remote);
  if constexpr (requires { t.credit_counts(); }) {
    out.fields.add("credit_writes", t.credit_counts().writes - credits0.writes)
        .add("credits_carried", t.credit_counts().carried - credits0.carried);
  }
  return Status::ok;
}

struct BwExperiment : ExperimentDefaults {
  static constexpr const char* name = "bw";
  static constexpr bool kOneCpuTicks = true;  // each end times its own sends and receives
  static constexpr uint64_t kIterations = 100000;
  static constexpr bool kOneSided = true;
  static std::vector<Point> plan(const Params& p, const Caps& caps) {
    std::vector<Point> plan = sized_points<BwExperiment>(p, caps);
    if (p.bw.size_spread)
      for (Point& pt : plan) pt.max_size = SpreadSizes::high(pt.size, p.bw.size_spread);
    return plan;
  }
  static PointCost cost(const Params& p, const Caps&, const Point& pt) {
    return {0, counted_seconds<BwExperiment>(p, static_cast<double>(pt.size), kMinMessageNs)};
  }
  static void check_caps(const Params& p, const Caps& caps) {
    ExperimentDefaults::check_caps(p, caps);
    if (!p.bw.size_spread) return;
    if (p.sweep) usage_error("--size-spread varies one size (-s), not a sweep (-a)");
    if (caps.fixed_msg_size || caps.one_sided)
      usage_error("--size-spread: this op moves messages of one size (a plain write, a read or an atomic)");
    if (SpreadSizes::high(p.size, p.bw.size_spread) > caps.max_msg_size)
      usage_error(p.transport + ": -s " + std::to_string(p.size) + " with --size-spread " +
                  std::to_string(p.bw.size_spread) + " reaches " + std::to_string(SpreadSizes::high(p.size, p.bw.size_spread)) +
                  " B, above the transport's maximum of " + std::to_string(caps.max_msg_size) + " B");
  }
  static bool fixed_sizes(const Params& p) { return !p.bw.size_spread; }
  static constexpr Flows kFlows = Flows::throughput;
  // --ops: --flows connections of each op.
  static uint32_t connections(const Params& p) { return p.flows * static_cast<uint32_t>(ops_of(p.rdma).size()); }
  // --tx-depth: the sends bw keeps in flight, on every transport that completes them.
  static uint32_t send_window(const Params& p) { return p.bw.tx_depth; }
  template <Transport T, Poll P>
  static Status client(T& t, Ctx& c, const Point& pt, PointOut& out) {
    return bw_run<T, P>(t, c, pt.size, pt.iterations, pt.warmup, out);
  }
  template <Transport T, Poll P>
  static Status server(T& t, Ctx& c, const Point& pt, PointOut& out) {
    return bw_run<T, P>(t, c, pt.size, pt.iterations, pt.warmup, out);
  }
};

}  // namespace fm
