#include "session/session_log.hpp"

#include <cstdio>

#include "fabmeter/clock.hpp"
#include "fabmeter/results.hpp"

namespace fm {

namespace {
// The session's exit code in words (the codes of docs/cli.md).
std::string outcome(int rc) {
  switch (rc) {
    case 0: return "ok";
    case 2: return "refused";
    case 3: return "failed";
    case 130: return "interrupted";
  }
  return "exit " + std::to_string(rc);
}
}  // namespace

void SessionLog::print(int rc, const std::string& format) const {
  if (experiment.empty()) return;  // a probe, a failed handshake: said elsewhere, or summarized per source
  const double seconds = static_cast<double>(Clock::mono_ns() - start_ns) / 1e9;
  if (format == "json") {
    JsonObj j;
    j.add("event", "session").add("client", client).add("experiment", experiment).add("transport", transport)
        .add("outcome", outcome(rc)).add("exit_code", rc).add("duration_s", seconds);
    std::fprintf(stderr, "%s\n", j.str().c_str());
  } else {
    std::fprintf(stderr, "fabmeter-engine: session from %s: %s over %s, %s (exit %d) after %.1f s\n", client.c_str(),
                 experiment.c_str(), transport.c_str(), outcome(rc).c_str(), rc, seconds);
  }
}

}  // namespace fm
