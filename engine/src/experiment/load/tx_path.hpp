// load: a reply that finds the send queue full, and its timing (TxRecord).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "experiment/load/common.hpp"

namespace fm {

// The server's transmit path as RAMCloud timed it: a reply that finds no
// free send buffer (the send queue full) polls for send completions until
// one frees; each poll is stamped, split into polls that returned
// completions and polls that returned none, and the whole wait is timed.
// Only that path is stamped: a reply that goes out at once costs nothing;
// --tx-stamps off waits the same way unstamped, to show what stamping costs.
constexpr int kTxPollMax = 16;  // completions one poll may return (reap_send_comps)
struct TxRecord {
  uint64_t waits = 0, wait_ns = 0;                    // replies that found no free buffer; their time waiting
  uint64_t polls_empty = 0, empty_ns = 0;             // polls that returned no completion; time in them
  uint64_t polls = 0, poll_ns = 0, completions = 0;   // polls that returned some; time in them; how many
  uint64_t per_poll[kTxPollMax] = {};                 // [n-1]: polls that returned n
  static constexpr int kFields = 7 + kTxPollMax;
  // The fields in the order they travel (LoadServerStats::encode).
  const uint64_t& field(int i) const {
    const uint64_t* f[] = {&waits, &wait_ns, &polls_empty, &empty_ns, &polls, &poll_ns, &completions};
    return i < 7 ? *f[i] : per_poll[i - 7];
  }
  uint64_t& field(int i) { return const_cast<uint64_t&>(std::as_const(*this).field(i)); }
  void add(const TxRecord& o) {
    for (int i = 0; i < kFields; ++i) field(i) += o.field(i);
  }
  JsonObj json() const {
    JsonObj per, o;
    for (int i = 0; i < kTxPollMax; ++i)
      if (per_poll[i]) per.add(std::to_string(i + 1), per_poll[i]);
    auto mean = [](uint64_t sum, uint64_t n) { return n ? static_cast<double>(sum) / static_cast<double>(n) : 0.0; };
    o.add("waits", waits).add("wait_ns_mean", mean(wait_ns, waits)).add("wait_ns_total", wait_ns)
        .add("polls", polls).add("completions", completions).add("completions_per_poll", per)
        .add("mean_per_poll", mean(completions, polls)).add("poll_ns_mean", mean(poll_ns, polls))
        .add("polls_empty", polls_empty).add("empty_poll_ns_mean", mean(empty_ns, polls_empty));
    return o;
  }
};

// No free send buffer: poll for send completions until `reply` goes out,
// each poll and the whole wait stamped into `tx` when kStamp.
template <bool kStamp, Poll P, Transport T>
Status wait_for_buffer(T& t, const Clock& clk, const std::byte* reply, uint32_t len, std::atomic<bool>& stop, TxRecord& tx) {
  auto ns = [&](uint64_t ticks) { return static_cast<uint64_t>(clk.to_ns(static_cast<double>(ticks))); };
  uint64_t waited_from = 0;
  if constexpr (kStamp) waited_from = clk.ticks(), ++tx.waits;
  for (uint32_t spins = 0;; ++spins) {
    if constexpr (P == Poll::event) t.wait_send();
    else cpu_relax();
    IgnoreCompletions none;
    if constexpr (kStamp) {
      const uint64_t t0 = clk.ticks();
      const int n = reap_send_comps(t, none);
      const uint64_t t1 = clk.ticks();
      if (n > 0) {
        ++tx.polls, tx.completions += n, tx.poll_ns += ns(t1 - t0);
        ++tx.per_poll[std::min(n, kTxPollMax) - 1];
      } else {
        ++tx.polls_empty, tx.empty_ns += ns(t1 - t0);
      }
    } else {
      reap_send_comps(t, none);
    }
    if (t.post_send(reply, len, 0, 0)) {
      if constexpr (kStamp) tx.wait_ns += ns(clk.ticks() - waited_from);
      return Status::ok;
    }
    if (spins % kGuardSpins) continue;
    if (t.failure()) return Status::failed;
    if (stop.load(std::memory_order_relaxed) || stop_requested()) return Status::interrupted;
  }
}

}  // namespace fm
