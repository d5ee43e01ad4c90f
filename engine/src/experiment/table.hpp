// The experiment table: one entry per experiment (its struct, experiment.hpp
// says what it holds), and per transport the point loops of every
// experiment, instantiated for both poll modes and picked once per point
// (as UCX perftest picks its loops): no branch on the poll mode per message.
#pragma once
#include <array>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "experiment/bw.hpp"
#include "experiment/check.hpp"
#include "experiment/experiment.hpp"
#include "experiment/flows.hpp"
#include "experiment/lat.hpp"
#include "experiment/load.hpp"
#include "experiment/oneway.hpp"
#include "experiment/setup.hpp"
#include "experiment/stream.hpp"

namespace fm {

template <class... E>
struct ExperimentList {};
// Adding an experiment: its header (with its struct) and its struct here.
using Experiments =
    ExperimentList<LatExperiment, OnewayExperiment, BwExperiment, StreamExperiment, CheckExperiment, LoadExperiment,
                   SetupExperiment>;

// An experiment's hooks, without its loops (those are per transport, below).
struct ExperimentEntry {
  const char* name;
  size_t index;       // into Experiments, for the loop tables
  bool remote_clock;   // ExperimentDefaults::kRemoteClock
  bool one_cpu_ticks;  // ExperimentDefaults::kOneCpuTicks
  uint32_t in_flight;  // ExperimentDefaults::kInFlight
  std::vector<Point> (*plan)(const Params&, const Caps&);
  uint64_t (*report_bytes)(const Params&, const Point&);
  void (*check_caps)(const Params&, const Caps&);
  bool (*writes_file)(const Params&);
  PointCost (*cost)(const Params&, const Caps&, const Point&);
  uint32_t (*send_window)(const Params&);
  bool (*fixed_sizes)(const Params&);
  uint32_t (*connections)(const Params&);
  void (*resolve)(Params&, const Caps&);
  void (*validate)(const Params&);
  bool one_sided;  // ExperimentDefaults::kOneSided
  bool numbers_only_unreliable;  // ExperimentDefaults::kNumbersOnlyUnreliable
};

// E's checks against the transport's capabilities, then its plan's sample
// storage against kMaxSampleBytes: before anything is allocated, on both ends.
template <class E>
void check_plan(const Params& p, const Caps& caps) {
  E::check_caps(p, caps);
  for (const Point& pt : E::plan(p, caps)) {
    const double bytes = E::cost(p, caps, pt).sample_bytes;
    if (bytes > kMaxSampleBytes) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", bytes);
      usage_error(std::string(E::name) + ": a point would keep " + text + " B of samples in memory, over the limit of " +
                  std::to_string(static_cast<uint64_t>(kMaxSampleBytes) >> 30) +
                  " GiB per point: give fewer messages per point");
    }
  }
}

template <class... E, size_t... I>
constexpr auto make_experiment_entries(ExperimentList<E...>, std::index_sequence<I...>) {
  return std::array<ExperimentEntry, sizeof...(E)>{
      ExperimentEntry{E::name, I, E::kRemoteClock, E::kOneCpuTicks, E::kInFlight, &E::plan, &E::report_bytes,
                      &check_plan<E>, &E::writes_file, &E::cost, &E::send_window, &E::fixed_sizes, &E::connections,
                      &E::resolve, &E::validate, E::kOneSided, E::kNumbersOnlyUnreliable}...};
}
template <class... E>
constexpr auto make_experiment_entries(ExperimentList<E...> list) {
  return make_experiment_entries(list, std::index_sequence_for<E...>{});
}

inline constexpr auto kExperimentTable = make_experiment_entries(Experiments{});

// nullptr for a name not in the table.
inline const ExperimentEntry* find_experiment(std::string_view name) {
  for (const ExperimentEntry& e : kExperimentTable)
    if (name == e.name) return &e;
  return nullptr;
}

// One point of one experiment over transport T, on one end.
template <Transport T>
using PointLoop = Status (*)(Conns<T>, const Fresh<T>&, Ctx&, const Point&, PointOut&);

// [role][poll]: client, server x busy, event.
template <Transport T>
using PointLoops = std::array<std::array<PointLoop<T>, 2>, 2>;

// An experiment's loop for one end; one-connection experiments get the
// point's only transport (a call per point, none per message), or with
// --flows a thread per transport (flows.hpp).
template <Transport T, class E, Role R, Poll P>
Status run_loop(Conns<T> conns, const Fresh<T>& fresh, Ctx& c, const Point& pt, PointOut& out) {
  if constexpr (E::kFlows != Flows::none) {
    if (conns.size() > 1) return flows_loop<T, E, R, P>(conns, c, pt, out);
  }
  if constexpr (E::kFreshConnections) {
    if constexpr (R == Role::client) return E::template client<T, P>(*conns[0], fresh, c, pt, out);
    else return E::template server<T, P>(*conns[0], fresh, c, pt, out);
  } else if constexpr (E::kManyConnections) {
    if constexpr (R == Role::client) return E::template client<T, P>(conns, c, pt, out);
    else return E::template server<T, P>(conns, c, pt, out);
  } else {
    if constexpr (R == Role::client) return E::template client<T, P>(*conns[0], c, pt, out);
    else return E::template server<T, P>(*conns[0], c, pt, out);
  }
}

template <Transport T, class E>
constexpr PointLoops<T> loops_of() {
  return {{{&run_loop<T, E, Role::client, Poll::busy>, &run_loop<T, E, Role::client, Poll::event>},
           {&run_loop<T, E, Role::server, Poll::busy>, &run_loop<T, E, Role::server, Poll::event>}}};
}

template <Transport T, class... E>
constexpr auto make_loop_table(ExperimentList<E...>) {
  return std::array<PointLoops<T>, sizeof...(E)>{loops_of<T, E>()...};
}

template <Transport T>
PointLoop<T> point_loop(const ExperimentEntry& e, Role role, Poll poll) {
  static constexpr auto table = make_loop_table<T>(Experiments{});
  return table[e.index][role == Role::server ? 1 : 0][poll == Poll::event ? 1 : 0];
}

}  // namespace fm
