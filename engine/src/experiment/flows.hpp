// --flows N (lat, bw): N connections of one point at once, each driven by a
// thread of its own through the experiment's one-connection loop, unchanged.
//
// Who talks on the control channel: the session's thread alone (Ctrl is not
// thread-safe, and the loops' Guard peeks it). Each flow thread gets a Ctrl
// of its own over a local socket pair; the session's thread relays each
// flow's frames (end_point, exchange) to the other end's session thread as
// exchange frames tagged with the flow's number, hands each flow the frames
// tagged for it, and passes on the other end's heartbeats, so a flow's Guard
// notices a lost or frozen remote end as it would on the real channel
// (flows.cpp). Flows end each other by closing their socket pairs.
#pragma once
#include <cstdint>
#include <functional>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"

namespace fm {

// One flow's loop over its connection, with a Ctx of its own.
using FlowLoop = std::function<Status(uint32_t flow, Ctx& flow_ctx, PointOut& out)>;

// Runs `n` flows of one point on this end: each on a thread of its own,
// pinned to ctx.cpus[flow mod size] where CPUs are given, all released at
// once (a barrier), the session's thread relaying their control frames. On
// the client, merges what they measured into `out`: per flow and in
// aggregate, with Jain's fairness index and how much the flows overlapped
// in time. Returns the first flow's failure.
Status run_flows(Ctx& c, const Point& pt, uint32_t n, Flows merge, const FlowLoop& loop, PointOut& out);

// Jain's fairness index of the flows' throughputs: (sum x)^2 / (n sum x^2),
// 1 when equal, 1/n when one flow has it all; NaN when every x is 0.
double jain_index(const std::vector<double>& x);

template <Transport T, class E, Role R, Poll P>
Status flows_loop(Conns<T> conns, Ctx& c, const Point& pt, PointOut& out) {
  return run_flows(
      c, pt, static_cast<uint32_t>(conns.size()), E::kFlows,
      [&](uint32_t i, Ctx& fc, PointOut& fo) {
        if constexpr (R == Role::client) return E::template client<T, P>(*conns[i], fc, pt, fo);
        else return E::template server<T, P>(*conns[i], fc, pt, fo);
      },
      out);
}

}  // namespace fm
