#include "session/auth_failures.hpp"

#include <algorithm>
#include <cstdio>

namespace fm {

uint32_t AuthFailures::delay_ms(const std::string& source) const {
  const auto it = sources_.find(source);
  if (it == sources_.end() || it->second.streak <= kFreeFailures) return 0;
  const uint32_t doublings = std::min<uint32_t>(it->second.streak - kFreeFailures - 1, 16);
  return std::min<uint32_t>(kMaxDelayMs, kDelayStepMs << doublings);
}

void AuthFailures::failed(const std::string& source, uint64_t now_ns) {
  if (!sources_.contains(source) && sources_.size() >= kMaxSources)
    sources_.erase(std::min_element(sources_.begin(), sources_.end(), [](const auto& a, const auto& b) {
      return a.second.last_ns < b.second.last_ns;
    }));
  Source& s = sources_[source];
  if (now_ns - s.last_ns >= kForgetFailuresS * 1000000000) s.streak = 0;
  ++s.streak;
  ++s.unlogged;
  s.last_ns = now_ns;
}

void AuthFailures::log(uint64_t now_ns, bool all) {
  for (auto& [source, s] : sources_) {
    if (!s.unlogged || (!all && now_ns - s.logged_ns < 1000000000)) continue;
    std::fprintf(stderr, "fabmeter-engine: authentication failed: %u attempt%s from %s (wrong or missing proof)%s\n",
                 s.unlogged, s.unlogged > 1 ? "s" : "", source.c_str(),
                 delay_ms(source) ? (", its challenges now wait " + std::to_string(delay_ms(source)) + " ms").c_str() : "");
    s.unlogged = 0;
    s.logged_ns = now_ns;
  }
}

}  // namespace fm
