// Errors that end a run. The kind decides the exit code, so a user (or the
// Python orchestrator) can tell bad input from a failed remote end.
#pragma once
#include <stdexcept>
#include <string>

namespace fm {

enum class ErrorKind {
  usage = 2,     // bad argument or impossible combination: fix the command
  runtime = 3,   // remote end lost, timeout, system call failed
};

struct Error : std::runtime_error {
  ErrorKind kind;
  Error(ErrorKind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
};

// The other end closed, reset or stopped answering on the control channel:
// what this end measured before it stands (a point is kept, partial), unlike
// after a malformed or unauthenticated frame.
struct RemoteLost : Error {
  explicit RemoteLost(const std::string& msg) : Error(ErrorKind::runtime, msg) {}
};

[[noreturn]] inline void usage_error(const std::string& msg) { throw Error(ErrorKind::usage, msg); }
[[noreturn]] inline void runtime_error(const std::string& msg) { throw Error(ErrorKind::runtime, msg); }
[[noreturn]] inline void remote_lost(const std::string& msg) { throw RemoteLost(msg); }
// A failed system call: message plus strerror(errno).
[[noreturn]] void sys_error(const std::string& what);

}  // namespace fm
