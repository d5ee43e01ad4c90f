// A relayed run: `fabmeter-engine run EXP --server DST --via SRC` asks the
// server on SRC to run the client role against the server on DST, as
// `fabmeter-engine run EXP --server DST` would there, and to carry the run's
// output back; the output is the same as if it had been run on SRC. So a
// mesh of hosts that each run `fabmeter serve` needs nothing else on them
// (fabmeter mesh --launch serve).
//
// After the welcome (the hello's relay line names DST), on the control
// channel, all `exchange` frames:
//   client -> relay   "ping"           at most kRelayPings times
//   relay -> client   "<ns>"           its CLOCK_MONOTONIC
//   client -> relay   "start <ns>"     --start-at on the relay's clock (0: none);
//                                      the client prints a "relay" line: that clock's offset;
//                                      "start <ns> samples": the client keeps the raw samples (--out)
//   relay -> client   "out <line>"     a line of the run's stdout
//                     "err <line>"     a line of its stderr
//                     "file <name> <bytes>", "data <bytes>"...: after a point
//                                      line, each sample file it names (with samples)
//                     "exit <code>"    the run ended with that exit code
//   client -> relay   bye; or, after "start <ns> series" (run --series --via),
//                     "next HOST[:PORT]": another run of the hello's parameters,
//                     against that server (checked as the hello's target),
//                     then the pings and "start <ns>" again; or "done", then bye.
//                     A series' runs are one process on the relay (run --series),
//                     at most kMaxRelayRuns of them, each within the watchdog.
// The relay runs only to servers its operator listed (serve --relay-to), only
// when it has a token (which it then proves to DST), never with options that
// name a file on its host, and kills the run when the client goes away or
// falls silent.
#pragma once
#include <string>
#include <string_view>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/handshake.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/session.hpp"

namespace fm {

constexpr int kRelayPings = 8;
// Bytes of one relayed line: a point's line with its histogram fits (load's
// hist mode carries a few hundred KiB); longer ones end the run.
constexpr uint32_t kMaxRelayLine = 8u << 20;
constexpr std::string_view kSamplesWord = " samples";
constexpr std::string_view kSeriesWord = " series";
constexpr std::string_view kRelayNextWord = "next ";
// Runs in one relay session (a mesh source's pairs: one per other host).
constexpr uint32_t kMaxRelayRuns = 1024;
// The longest end line a relay reads for its code (an end line is short).
constexpr size_t kMaxSeriesEndLine = 4096;

// Server: refuses (usage_error, the reason for the client) a relay this
// server may not make: a target not in --relay-to, no token, or options
// that would make the run (a client here) read or write a file it names.
// Nothing is opened.
void check_relay(const std::string& target, const Params& p, const ServerOptions& o);
// Server, after the welcome: runs the client against `target` and relays
// its output; the run on `cpus.client` (session_cpus': this process may run
// on them), asking its server for `cpus.server`. Returns the session's exit
// code (the run's).
int serve_relay(Ctrl& ctrl, const Params& p, const std::string& target, const SessionCpus& cpus,
                const ServerOptions& o);
// Client, after the welcome (a Heartbeat on `ctrl`): starts the run and
// prints what comes back. Returns the run's exit code, after the bye; in a
// series without it (the caller goes on with "next HOST[:PORT]" or "done").
// `run`: which run of the series' session this is (1: the first; its
// "relay" line says so).
int run_relayed(Ctrl& ctrl, const ClientOptions& o, bool series, uint32_t run);

}  // namespace fm
