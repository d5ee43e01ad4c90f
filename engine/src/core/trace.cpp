#include "fabmeter/trace.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fm {

namespace {

// FABMETER_STOP_AT="ROLE PHASE": this process stops itself (SIGSTOP) at the
// first such boundary, so that a test acts while it is stopped and resumes it.
void stop_at(const char* role, const char* phase) {
  static bool stopped = false;
  const char* want = std::getenv("FABMETER_STOP_AT");
  if (stopped || !want || std::string(role) + " " + phase != want) return;
  stopped = true;
  ::raise(SIGSTOP);
}

}  // namespace

void trace_phase(const char* role, const char* phase) {
  const char* path = std::getenv("FABMETER_TRACE_PHASES");
  if (path && *path) {
    int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      char line[128];
      int n = std::snprintf(line, sizeof line, "%s %s %d\n", role, phase, static_cast<int>(getpid()));
      // One write with O_APPEND: lines of both engines never interleave.
      if (n > 0) (void)!::write(fd, line, static_cast<size_t>(n));
      ::close(fd);
    }
  }
  stop_at(role, phase);
}

}  // namespace fm
