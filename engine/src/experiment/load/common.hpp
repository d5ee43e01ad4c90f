// load: what both ends share: the request's header and tags, the largest
// message, the polling loops' back-off, and how threads share the work and
// report their end.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"

namespace fm {

// The back-off of load's polling loops (client and server): true while the
// loop should go round again without its slow path, i.e. between ticks while
// it makes progress, or through a busy poll's empty spins before a check.
template <Poll P>
[[gnu::always_inline]] inline bool stay_hot(bool progressed, uint32_t& idle, uint32_t& busy) {
  if (progressed) {
    idle = 0;
    if (++busy % kTickStride) return true;
  } else if (P == Poll::busy && ++idle < kGuardSpins) {
    if (idle > kHotSpins / 64) cpu_relax();
    return true;
  }
  idle = 0;
  return false;
}

// A request's first bytes: a tag the reply echoes in its first four (the
// outstanding slot, and the sequence number's low bits against stale
// replies) and the size of the reply it asks for.
struct LoadHeader {
  uint32_t tag;
  uint32_t resp_len;
};
constexpr uint64_t kLoadMinMessage = sizeof(LoadHeader);
constexpr int kSlotBits = 20;
constexpr uint32_t kSlotMask = (1u << kSlotBits) - 1;
static_assert(LoadOptions::kMaxOutstanding < kSlotMask);  // the probes' tag is never a slot's
constexpr uint32_t kProbeTag = UINT32_MAX;

// The largest message of a plan: both ends compute it from the parameters
// (a workload's largest size came with them: LoadExperiment::resolve).
inline uint64_t load_largest_message(const Params& p) {
  if (!p.load.workload.empty()) return p.max_size;
  return std::max(p.load.req_size, p.load.resp_size);
}

// Why a thread other than the session's own stopped; the session thread
// reports it (only it touches the control channel and Ctx).
struct LoadThreadEnd {
  Status status = Status::ok;
  std::string failure;
};

// The threads' end as the point's: the first that is neither ok nor a
// thread stopping because another ended (interrupted, without Ctrl-C).
inline Status first_cause(const std::vector<LoadThreadEnd>& ends, Ctx& c) {
  Status cause = Status::ok;
  for (const LoadThreadEnd& e : ends) {
    const bool followed = e.status == Status::interrupted && !stop_requested();
    if (e.status == Status::ok || (followed && cause != Status::ok)) continue;
    if (cause == Status::ok || cause == Status::interrupted) {
      cause = e.status;
      if (!e.failure.empty()) c.failure = e.failure;
    }
  }
  return cause;
}
// The point's requests, split among `threads`: the first ones get one more.
inline uint64_t share_of(uint64_t total, uint32_t threads, uint32_t k) {
  return total / threads + (k < total % threads ? 1 : 0);
}

// Connections dealt round-robin: thread k gets k, k + threads, ...
template <class T>
std::vector<T*> deal(Conns<T> conns, uint32_t threads, uint32_t k) {
  std::vector<T*> mine;
  for (size_t i = k; i < conns.size(); i += threads) mine.push_back(conns[i]);
  return mine;
}

}  // namespace fm
