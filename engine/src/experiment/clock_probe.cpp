// Clock probes. The server answers each probe with its clock when the probe
// arrived and how long it took to answer (its turnaround, which is then not
// counted as path delay); the client keeps the lowest-delay probe of each
// burst and refits offset and drift over all its bursts so far
// (ClockEstimator).
//
// Two paths. UDP with kernel timestamps (kUdpKernelTimestamps): each probe
// is a datagram on a socket of its own per session, and all four times are
// the kernels' software stamps at the network devices (StampedUdp), so the
// socket layers of both hosts (most of a kernel round trip) are no part of
// the delay; the server's stamps come back over the control channel after
// the burst, authenticated like everything there. The control channel
// (kControlChannel): each probe a frame on the control connection, stamped
// by the engines themselves; the fallback where the UDP socket cannot be
// had or a burst got no usable probe.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "experiment/common.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/trace.hpp"

namespace fm {

namespace {
constexpr uint32_t kProbesPerBurst = 64;
constexpr double kSpinNs = 1e6;
// A UDP probe unanswered (or unstamped) this long is lost; after this many
// in a row the burst ends (a remote end gone quiet costs ~0.2 s, not 64 waits).
constexpr double kProbeWaitNs = 20e6;
constexpr int kMaxLostInARow = 8;
// The server's turnaround is measured on its clock, the round trip on
// ours: their rates differ (~100 ppm between real oscillators, at most
// kMaxClockDrift), so a probe's delay is off by that times its
// turnaround. Probes the server held longer than this (descheduled) are
// not used: at 100 ppm they would be 20 ns off, unseen by the bound.
constexpr double kMaxTurnaroundNs = 200e3;

// The one datagram of the UDP path, both ways: the probe's index in its
// burst and the burst's nonce (sent over the control channel), so a stray
// or forged datagram (a port reused, another sender) matches nothing.
struct ProbeDatagram {
  uint64_t nonce;
  uint32_t index;
  uint32_t zero;
};
static_assert(sizeof(ProbeDatagram) == 16);

// Busy probes: spin on non-blocking peeks for the next frame rather than
// sleep in poll(), so no wake-up latency enters a probe's delay (it would
// widen the bound); after kSpinNs the wait blocks as any other.
void spin_for_frame(const Ctx& ctx) {
  const uint64_t until = ctx.clk.ticks() + ctx.clk.ns_to_ticks(kSpinNs);
  while (ctx.ctrl.peek() == Ctrl::Peek::nothing && ctx.clk.ticks() < until) cpu_relax();
}

// One burst over the control channel; the client adds its probes to the
// estimator (the caller closes the window).
void probe_over_control_channel(Ctx& ctx) {
  const Clock& clk = ctx.clk;
  ++ctx.sync.control_bursts;
  if (ctx.role == Role::server) {
    for (uint32_t i = 0; i < kProbesPerBurst; ++i) {
      spin_for_frame(ctx);
      ctx.ctrl.recv(CtrlType::exchange, "clock probe");
      const uint64_t arrived = clk.ticks();
      char buf[64];
      int n = std::snprintf(buf, sizeof buf, "%.3f ", clk.ticks_to_mono_ns(arrived));
      std::snprintf(buf + n, sizeof buf - n, "%.3f", clk.to_ns(static_cast<double>(clk.ticks() - arrived)));
      ctx.ctrl.send(CtrlType::exchange, buf);
    }
    return;
  }
  for (uint32_t i = 0; i < kProbesPerBurst; ++i) {
    const double sent = clk.ticks_to_mono_ns(clk.ticks());
    ctx.ctrl.send(CtrlType::exchange, "");
    spin_for_frame(ctx);
    const std::string answer = ctx.ctrl.recv(CtrlType::exchange, "clock probe answer");
    const double received = clk.ticks_to_mono_ns(clk.ticks());
    const ClockProbe probe = read_probe_answer(answer, sent, received);
    if (probe.delay_ns() >= 0) ctx.sync.estimator.add(probe);  // else the clocks' rates, not the path (kMaxClockDrift)
  }
}

// Reads one datagram if there is one: true if it was a probe of this burst
// (index set), false otherwise; a datagram that is not (wrong length, nonce,
// index, no kernel stamp) is counted dropped.
bool read_probe_datagram(StampedUdp& udp, uint64_t nonce, uint32_t* index, int64_t* stamp, bool* any,
                         uint64_t* dropped) {
  char buf[sizeof(ProbeDatagram) + 1];  // one byte more: a longer datagram shows as such
  const std::optional<StampedUdp::Datagram> d = udp.poll_recv(buf, sizeof buf);
  if (!d) return false;
  *any = true;
  ProbeDatagram in;
  std::memcpy(&in, buf, sizeof in);
  if (d->len != sizeof in || d->truncated || in.nonce != nonce || in.zero != 0 || in.index >= kProbesPerBurst ||
      d->stamp_ns <= 0) {
    ++*dropped;
    return false;
  }
  *index = in.index;
  *stamp = d->stamp_ns;
  return true;
}

uint64_t new_nonce() {
  uint64_t nonce;
  const std::string bytes = random_bytes(sizeof nonce);
  std::memcpy(&nonce, bytes.data(), sizeof nonce);
  return nonce;
}

// The server's half of a UDP burst: answer each probe of the burst once
// (stamping its arrival and its answer's departure) until the client says
// the burst is over, then send the stamps. A burst outlasting the control
// timeout ends the session, as any wait for the client.
void serve_udp_burst(Ctx& ctx) {
  const Clock& clk = ctx.clk;
  StampedUdp& udp = *ctx.sync.udp;
  const uint64_t nonce = parse_remote_u64(ctx.ctrl.recv(CtrlType::exchange, "clock probe nonce"), "clock probe nonce");
  udp.clock_stepped();  // a step before the burst moves none of its stamps
  struct Answer {
    ClockPair pair;
    int64_t arrived = 0, left = 0;  // kernel stamps; 0: none (yet)
    uint32_t tx_id = 0;
  };
  std::array<Answer, kProbesPerBurst> answers{};
  std::array<bool, kProbesPerBurst> answered{};
  uint64_t dropped = 0;
  const uint64_t deadline = clk.ticks() + clk.ns_to_ticks(ctx.ctrl.timeout_ms() * 1e6);
  uint64_t spin_until = clk.ticks() + clk.ns_to_ticks(kSpinNs);
  auto take_tx_stamps = [&] {
    bool any = false;
    while (const std::optional<StampedUdp::TxStamp> s = udp.poll_tx_stamp()) {
      any = true;
      for (uint32_t i = 0; i < kProbesPerBurst; ++i)
        if (answered[i] && answers[i].tx_id == s->id) answers[i].left = s->stamp_ns;
    }
    return any;
  };
  for (;;) {
    bool any = false;
    uint32_t index;
    int64_t stamp;
    if (read_probe_datagram(udp, nonce, &index, &stamp, &any, &dropped)) {
      if (answered[index]) {
        ++dropped;  // each probe is answered once: no more than 64 answers per burst
      } else {
        Answer& a = answers[index];
        a.pair = ClockPair::read(clk);
        a.arrived = stamp;
        a.tx_id = udp.sent();
        const ProbeDatagram out{nonce, index, 0};
        answered[index] = udp.send(&out, sizeof out);
      }
    }
    any |= take_tx_stamps();
    if (ctx.ctrl.peek() != Ctrl::Peek::nothing) break;  // the client's end of the burst (or it is gone: recv says)
    const uint64_t now = clk.ticks();
    if (now >= deadline) runtime_error("clock probe: the client's UDP burst did not end within the control timeout");
    if (any) spin_until = now + clk.ns_to_ticks(kSpinNs);
    else if (now >= spin_until) udp.wait(ctx.ctrl.fd(), 10);
    else cpu_relax();
  }
  const std::string end = ctx.ctrl.recv(CtrlType::exchange, "end of the clock probes");
  if (end != "end") runtime_error("clock probe: expected the end of the burst, got '" + remote_excerpt(end) + "'");
  take_tx_stamps();  // the last answer's stamp was taken long before the client's frame arrived
  std::string frame = std::to_string(dropped);
  // Stamps that may straddle a step of the clock go unsent: with none, the
  // client takes the burst again over the control channel.
  const bool stepped = udp.clock_stepped();
  for (uint32_t i = 0; i < kProbesPerBurst && !stepped; ++i) {
    const Answer& a = answers[i];
    if (!answered[i] || !a.left) continue;
    // The latest the arrival and the earliest the departure may have been
    // on our clock: the client's bound then covers the pair's width too.
    // The pair was read between the two, so the turnaround stays >= 0.
    const double arrived = a.pair.latest(a.arrived);
    char line[80];
    std::snprintf(line, sizeof line, "\n%u %.3f %.3f", i, arrived, std::max(0.0, a.pair.earliest(a.left) - arrived));
    frame += line;
  }
  ctx.ctrl.send(CtrlType::exchange, frame);
}

// The client's half: 64 probes, one at a time, each waited for (its TX
// stamp and its answer) at most kProbeWaitNs. Adds what it got to the
// estimator; false if no probe was usable.
bool probe_udp_burst(Ctx& ctx) {
  const Clock& clk = ctx.clk;
  ClockSync& sync = ctx.sync;
  StampedUdp& udp = *sync.udp;
  const uint64_t nonce = new_nonce();
  udp.clock_stepped();  // a step before the burst moves none of its stamps
  ctx.ctrl.send(CtrlType::exchange, std::to_string(nonce));
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  std::array<ProbeStamps, kProbesPerBurst> mine;
  mine.fill({kNone, kNone});
  uint64_t stamped = 0;
  for (uint32_t i = 0, lost_in_a_row = 0; i < kProbesPerBurst && lost_in_a_row < kMaxLostInARow; ++i) {
    const ClockPair pair = ClockPair::read(clk);
    if (i == 0) trace_phase("client", "clock probe");
    const uint32_t id = udp.sent();
    const ProbeDatagram out{nonce, i, 0};
    int64_t sent = 0, received = 0;
    if (udp.send(&out, sizeof out)) {
      const uint64_t start = clk.ticks(), until = start + clk.ns_to_ticks(kProbeWaitNs);
      const uint64_t spin_until = start + clk.ns_to_ticks(kSpinNs);
      while (!sent || !received) {
        bool any = false;
        while (const std::optional<StampedUdp::TxStamp> s = udp.poll_tx_stamp()) {
          any = true;
          if (s->id == id) sent = s->stamp_ns;
        }
        uint32_t index;
        int64_t stamp;
        if (read_probe_datagram(udp, nonce, &index, &stamp, &any, &sync.datagrams_dropped)) {
          if (index == i && !received) received = stamp;
          else ++sync.datagrams_dropped;  // a late answer to a probe given up on
        }
        if (any) continue;
        const uint64_t now = clk.ticks();
        if (now >= until) break;
        if (now >= spin_until) udp.wait(-1, 1);
        else cpu_relax();
      }
    }
    if (sent && received) {
      mine[i] = {pair.earliest(sent), pair.latest(received)};  // the round trip widened by the pair's width
      ++stamped;
      lost_in_a_row = 0;
    } else {
      ++sync.probes_lost;
      ++lost_in_a_row;
    }
  }
  ctx.ctrl.send(CtrlType::exchange, "end");
  std::vector<ClockProbe> probes =
      read_probe_stamps(ctx.ctrl.recv(CtrlType::exchange, "clock probe stamps"), mine, &sync.datagrams_dropped);
  std::erase_if(probes, [](const ClockProbe& p) { return p.turnaround_ns > kMaxTurnaroundNs || p.delay_ns() < 0; });
  sync.probes_lost += stamped - probes.size();  // answered, but the server had no stamp of its own or held it long
  if (udp.clock_stepped()) {  // our stamps and pairs may straddle the step: the burst again, over the control channel
    ++sync.realtime_steps;
    probes.clear();
  }
  ctx.ctrl.send(CtrlType::exchange, probes.empty() ? kControlChannel : kUdpKernelTimestamps);
  for (const ClockProbe& p : probes) sync.estimator.add(p);
  return !probes.empty();
}

}  // namespace

ClockProbe read_probe_answer(std::string_view answer, double sent_ns, double received_ns) {
  const size_t space = answer.find(' ');
  if (space == std::string_view::npos)
    runtime_error("clock probe: the other end's answer is not 'TIME TURNAROUND': " + remote_excerpt(answer));
  const double remote = parse_remote_double(answer.substr(0, space), "clock probe time");
  const double turnaround = parse_remote_double(answer.substr(space + 1), "clock probe turnaround");
  if (!plausible_reading(remote))
    runtime_error(kImplausibleClock + std::string("a reading of ") + remote_excerpt(answer.substr(0, space)) + " ns");
  // The other end's turnaround may exceed our round trip by the rates' difference before it counts as a lie.
  if (!(turnaround >= 0 && turnaround <= (received_ns - sent_ns) * (1 + kMaxClockDrift)))
    runtime_error("clock probe: the other end's turnaround (" + remote_excerpt(answer.substr(space + 1)) +
                  " ns) does not fit in the round trip");
  return {sent_ns, remote, received_ns, turnaround};
}

std::vector<ClockProbe> read_probe_stamps(std::string_view frame, std::span<const ProbeStamps> mine,
                                          uint64_t* dropped) {
  size_t eol = frame.find('\n');
  *dropped += parse_remote_u64(frame.substr(0, eol), "clock probe: datagrams the server dropped");
  std::vector<ClockProbe> probes;
  std::vector<bool> seen(mine.size());
  while (eol != std::string_view::npos) {
    frame.remove_prefix(eol + 1);
    eol = frame.find('\n');
    const std::string_view line = frame.substr(0, eol);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos)
      runtime_error("clock probe: a stamps line is not 'INDEX TIME TURNAROUND': " + remote_excerpt(line));
    const uint64_t i = parse_remote_u64(line.substr(0, space), "clock probe index", mine.size() - 1);
    if (seen[i]) runtime_error("clock probe: the server's stamps name probe " + std::to_string(i) + " twice");
    seen[i] = true;
    // A probe whose answer we never got: the server's stamps are checked but of no use.
    const bool ours = !std::isnan(mine[i].sent_ns);
    const ClockProbe p = read_probe_answer(line.substr(space + 1), ours ? mine[i].sent_ns : 0,
                                           ours ? mine[i].received_ns : std::numeric_limits<double>::infinity());
    if (ours) probes.push_back(p);
  }
  return probes;
}

bool udp_clock_probes_wanted() {
  const char* env = std::getenv("FABMETER_CLOCK_PROBES");
  if (!env || !*env) return true;
  const std::string_view v(env);
  if (v == kControlChannel) return false;
  if (v == kUdpKernelTimestamps) return true;
  usage_error("FABMETER_CLOCK_PROBES='" + std::string(v.substr(0, 40)) + "': expected " + kControlChannel + " or " +
              kUdpKernelTimestamps);
}

void open_clock_probes(Ctx& ctx) {
  sockaddr_storage local{}, remote{};
  socklen_t len = sizeof local;
  std::string mine = "none";
  if (udp_clock_probes_wanted() && ::getsockname(ctx.ctrl.fd(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    try {
      ctx.sync.udp = std::make_unique<StampedUdp>(local);
      mine = std::to_string(ctx.sync.udp->port());
    } catch (const Error&) {
      // No such socket here (timestamping refused): the control channel it is.
    }
  }
  const std::string theirs = ctx.ctrl.exchange(mine, "clock probe port");
  len = sizeof remote;
  if (theirs == "none" || !ctx.sync.udp || ::getpeername(ctx.ctrl.fd(), reinterpret_cast<sockaddr*>(&remote), &len) != 0) {
    ctx.sync.udp.reset();
    return;
  }
  const uint64_t port = parse_remote_u64(theirs, "clock probe port", 65535);
  if (port == 0) runtime_error("clock probe: the other end's probe port is 0");
  ctx.sync.udp->connect(remote, static_cast<uint16_t>(port));
}

void probe_clock(Ctx& ctx) {
  ClockSync& sync = ctx.sync;
  bool by_udp = false;
  if (sync.udp && ctx.role == Role::server) {
    serve_udp_burst(ctx);
    // The client's word on whether its probes got through; else the burst again, over the control channel.
    const std::string verdict = ctx.ctrl.recv(CtrlType::exchange, "clock probe verdict");
    if (verdict != kUdpKernelTimestamps && verdict != kControlChannel)
      runtime_error("clock probe: the client's verdict on the burst is '" + remote_excerpt(verdict) + "'");
    by_udp = verdict == kUdpKernelTimestamps;
  } else if (sync.udp) {
    by_udp = probe_udp_burst(ctx);
  }
  if (by_udp) ++sync.udp_bursts;
  else probe_over_control_channel(ctx);
  if (ctx.role == Role::client) {
    sync.estimator.close_window();
    sync.fit = sync.estimator.fit();
    if (const std::string why = implausible_fit(sync.fit, sync.estimator.kept()); !why.empty())
      runtime_error(kImplausibleClock + why);
  }
}

}  // namespace fm
