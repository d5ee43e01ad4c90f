// Phase marks for fault tests: with FABMETER_TRACE_PHASES=FILE in the
// environment (set by whoever starts the engine, never by a remote end), each
// phase boundary appends "ROLE PHASE PID" to FILE, so a test can strike at a
// chosen moment; with FABMETER_STOP_AT="ROLE PHASE" the process stops itself
// (SIGSTOP) at the first such boundary, for the test to act and resume it.
// Off the data path; a no-op without the variables.
#pragma once

namespace fm {

void trace_phase(const char* role, const char* phase);

}  // namespace fm
