// What both ends of a session share: exit codes, the checks against the
// transport's capabilities, where this end's fabric is, and how the
// server's messages print a duration.
#pragma once
#include <string>
#include <vector>

#include "experiment/common.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/fabric.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/session.hpp"

namespace fm {

// A point's status as the engine's exit code: 0 ok, 130 interrupted, 3 otherwise.
int exit_code(Status s);

// Checks that need the transport's capabilities; both ends run them
// (usage_error: exit 2). `same_host`: the other end is on this host.
void check_against_caps(const Params& p, const Caps& caps, bool same_host);

// Where this end's fabric is: the control connection's local address, the
// RDMA device the options name, and what the transport's library can add.
FabricWhere fabric_where(const Params& p, const Ctrl& ctrl, int cpu);

// The client's side of the opening (handshake.hpp): hello, proof, welcome;
// with a token, every frame from here on authenticated. `relay`: the server
// is asked to run the client against that server (relay.hpp), on --cpu
// there; `tool`: to start a peer tool's server side (tool_server.hpp). A
// client's session and a hop's toward its server (forward.hpp) open so.
Welcome open_session(Ctrl& ctrl, const Params& p, const ClientOptions& o, const std::string& me,
                     const std::string& relay, const std::string& tool = "");
// A serve's own session toward another server for a client (a relay's run,
// a hop): refused (usage_error, the reason for the client) unless its
// operator's `allowed` list (serve's `option`) names the target's host and
// the serve has a token, which it proves there. `verb`: what it would do.
void check_onward(const std::string& target, const std::vector<std::string>& allowed, const ServerOptions& o,
                  const std::string& option, const std::string& verb);
// "2.5 s", as the server's refusals and messages print durations.
std::string seconds(double s);

}  // namespace fm
