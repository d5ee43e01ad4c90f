// Failed authentications on the server, per source address: counted and
// logged as one summary line a second at most per source (a flood of wrong
// tokens must not become a flood of log lines, nor fill a stderr pipe and
// block the accepting process), and answered ever more slowly: a source's
// next challenges wait kDelayStepMs doubled per failure after its first
// kFreeFailures, at most kMaxDelayMs, so guessing gets slow while other
// sources, and a client that then proves the token, are not locked out.
// The accepting process keeps it; session processes say how their
// handshake ended (Admission's auth_failed stage).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace fm {

constexpr uint32_t kFreeFailures = 3;
constexpr uint32_t kDelayStepMs = 50;
constexpr uint32_t kMaxDelayMs = 1000;     // under the client's kSilenceMs wait for its challenge
constexpr uint64_t kForgetFailuresS = 60;  // a source quiet this long starts afresh
constexpr size_t kMaxSources = 4096;       // the table's bound: the stalest source makes room

class AuthFailures {
 public:
  // How long the next challenge to `source` waits.
  uint32_t delay_ms(const std::string& source) const;
  void failed(const std::string& source, uint64_t now_ns);
  void proved(const std::string& source) { sources_.erase(source); }
  // Logs the sources with failures not yet said, each at most once a second (`all`: now, at the end).
  void log(uint64_t now_ns, bool all);

 private:
  struct Source {
    uint32_t streak = 0;     // failures since it was quiet kForgetFailuresS
    uint32_t unlogged = 0;   // failures since its last line
    uint64_t last_ns = 0, logged_ns = 0;
  };
  std::unordered_map<std::string, Source> sources_;
};

}  // namespace fm
