// What both ends of a session share: exit codes, the checks against the
// transport's capabilities, where this end's fabric is, and how the
// server's messages print a duration.
#pragma once
#include <string>

#include "experiment/common.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/fabric.hpp"
#include "fabmeter/params.hpp"

namespace fm {

// A point's status as the engine's exit code: 0 ok, 130 interrupted, 3 otherwise.
int exit_code(Status s);

// Checks that need the transport's capabilities; both ends run them
// (usage_error: exit 2). `same_host`: the other end is on this host.
void check_against_caps(const Params& p, const Caps& caps, bool same_host);

// Where this end's fabric is: the control connection's local address, the
// RDMA device the options name, and what the transport's library can add.
FabricWhere fabric_where(const Params& p, const Ctrl& ctrl, int cpu);

// "2.5 s", as the server's refusals and messages print durations.
std::string seconds(double s);

}  // namespace fm
