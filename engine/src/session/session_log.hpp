// The serve's line per session on stderr, as --log-format says: text for a
// person watching the serve, json (one object a line) for a log collector.
#pragma once
#include <cstdint>
#include <string>

namespace fm {

struct SessionLog {
  std::string client;                  // the control connection's remote address
  uint64_t start_ns = 0;               // Clock::mono_ns() when the connection spoke
  std::string experiment, transport;   // set once the client's parameters are read; empty: no line
  // Writes the line for a session that ended with exit code `rc`.
  void print(int rc, const std::string& format) const;
};

}  // namespace fm
