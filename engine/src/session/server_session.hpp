// One session on the server: the opening (hello, proof, admission,
// welcome), the plan's checks against the server's limits, and the run of
// its points, a relayed run or a peer tool; in a process of its own
// (session_child), which serve.cpp forks per connection.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "session/admission.hpp"
#include "experiment/run_points.hpp"
#include "fabmeter/clock.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/session.hpp"

namespace fm {

// Set-up and result exchange a session may take beyond --max-duration.
constexpr double kWatchdogGraceS = 2;

// The server's clocks, calibrated once before it listens (a session's hello
// is answered at once); tsc_cpu only where the TSC is not invariant and the
// server is pinned (Clock).
struct ServerClocks {
  Clock tsc{true}, mono{false};
  std::optional<Clock> tsc_cpu;
  explicit ServerClocks(int cpu) {
    if (!tsc.reads_tsc() && cpu >= 0) tsc_cpu.emplace(true, true);
  }
  // Both ends must read the same clock for one-way stamps: the client's choice.
  const Clock& of(const Params& p) const {
    if (p.clock != "tsc") return mono;
    return tsc_cpu && experiment_for(p.experiment).one_cpu_ticks ? *tsc_cpu : tsc;
  }
};

// The CPUs one end of a session runs on here (a session's, or a relayed
// run's): those the client asked for, each one this serve may give (its
// --cpu list, else every CPU it may run on), or none asked: the serve's own
// --cpu. Refuses (usage_error, the reason for the client) any other.
std::vector<int> session_cpus(const std::vector<int>& asked, const ServerOptions& o);

// The refusal for a client that finds every session slot taken.
std::string busy_reason(const ServerOptions& o);

// Serves one connection in record `rec` of `admission`, then exits; dies
// with the server (`server`, its pid). Its challenge waits `challenge_delay_ms`
// (a source that failed to authenticate: auth_failures.hpp).
[[noreturn]] void session_child(Ctrl ctrl, const ServerOptions& o, const ServerClocks& clocks, Admission& admission,
                                size_t rec, pid_t server, uint32_t challenge_delay_ms);

}  // namespace fm
