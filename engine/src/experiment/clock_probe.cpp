// Clock probes over the control channel. The server answers each probe with
// its clock when the probe arrived and how long it took to answer (its
// turnaround, which is then not counted as path delay); the client keeps the
// lowest-delay probe of each burst and refits offset and drift over all its
// bursts so far (ClockEstimator).
#include <cstdio>
#include <string>

#include "experiment/common.hpp"

namespace fm {

namespace {
constexpr int kProbesPerBurst = 64;
constexpr double kSpinNs = 1e6;

// Busy probes: spin on non-blocking peeks for the next frame rather than
// sleep in poll(), so no wake-up latency enters a probe's delay (it would
// widen the bound); after kSpinNs the wait blocks as any other.
void spin_for_frame(const Ctx& ctx) {
  const uint64_t until = ctx.clk.ticks() + ctx.clk.ns_to_ticks(kSpinNs);
  while (ctx.ctrl.peek() == Ctrl::Peek::nothing && ctx.clk.ticks() < until) cpu_relax();
}
}  // namespace

ClockProbe read_probe_answer(std::string_view answer, double sent_ns, double received_ns) {
  const size_t space = answer.find(' ');
  if (space == std::string_view::npos)
    runtime_error("clock probe: the peer's answer is not 'TIME TURNAROUND': " + peer_excerpt(answer));
  const double peer = parse_peer_double(answer.substr(0, space), "clock probe time");
  const double turnaround = parse_peer_double(answer.substr(space + 1), "clock probe turnaround");
  if (!(turnaround >= 0 && turnaround <= received_ns - sent_ns))
    runtime_error("clock probe: the peer's turnaround (" + peer_excerpt(answer.substr(space + 1)) +
                  " ns) does not fit in the round trip");
  return {sent_ns, peer, received_ns, turnaround};
}

void probe_clock(Ctx& ctx) {
  const Clock& clk = ctx.clk;
  if (ctx.role == Role::server) {
    for (int i = 0; i < kProbesPerBurst; ++i) {
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
  for (int i = 0; i < kProbesPerBurst; ++i) {
    const double sent = clk.ticks_to_mono_ns(clk.ticks());
    ctx.ctrl.send(CtrlType::exchange, "");
    spin_for_frame(ctx);
    const std::string answer = ctx.ctrl.recv(CtrlType::exchange, "clock probe answer");
    const double received = clk.ticks_to_mono_ns(clk.ticks());
    ctx.sync.estimator.add(read_probe_answer(answer, sent, received));
  }
  ctx.sync.estimator.close_window();
  ctx.sync.fit = ctx.sync.estimator.fit();
}

}  // namespace fm
