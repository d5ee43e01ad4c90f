// Phase marks for fault tests: with FABMETER_TRACE_PHASES=FILE in the
// environment (set by whoever starts the engine, never by a peer), each
// phase boundary appends "ROLE PHASE PID" to FILE, so a test can strike at a
// chosen moment. Off the data path; a no-op without the variable.
#pragma once

namespace fm {

void trace_phase(const char* role, const char* phase);

}  // namespace fm
