// load: one client thread (LoadSender): its connections, its schedule of
// requests (open or closed loop), the replies matched to their slots, and
// its counts and latency record.
#pragma once
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "experiment/load/common.hpp"
#include "experiment/load/sizes.hpp"
#include "fabmeter/arrivals.hpp"
#include "fabmeter/histogram.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/schedule.hpp"

namespace fm {

constexpr double kProbeBudgetNs = 100e6;         // the unloaded probes of one bucket stop after this long

// One client thread's counts; the point's are their sum.
struct LoadTally {
  uint64_t issued = 0;           // requests the schedule made due (sent + shed), warm-up included
  uint64_t sent = 0, completed = 0, shed = 0, lost = 0;             // measured
  uint64_t warmup_sent = 0, warmup_completed = 0, warmup_shed = 0, warmup_lost = 0;
  uint64_t clamped = 0, stale = 0;
  uint64_t bytes = 0;            // request + reply bytes of the completed measured requests
  uint64_t outstanding_max = 0;
  uint64_t first_intended = UINT64_MAX, last_reply = 0;  // ticks: the measured span

  void add(const LoadTally& o) {
    issued += o.issued;
    sent += o.sent, completed += o.completed, shed += o.shed, lost += o.lost;
    warmup_sent += o.warmup_sent, warmup_completed += o.warmup_completed, warmup_shed += o.warmup_shed;
    warmup_lost += o.warmup_lost, clamped += o.clamped, stale += o.stale, bytes += o.bytes;
    outstanding_max += o.outstanding_max;
    first_intended = std::min(first_intended, o.first_intended);
    last_reply = std::max(last_reply, o.last_reply);
  }
};

// One client thread's latency record: histograms always (merged across
// threads), and with --samples raw every measured request as well.
struct LoadRecord {
  Histogram latency, service, lag;
  std::vector<Histogram> by_bucket;
  SampleBuf raw_latency, raw_service, raw_lag, raw_size;
  uint64_t raw_n = 0;

  LoadRecord(size_t buckets, uint64_t raw) : by_bucket(buckets), raw_latency(raw), raw_service(raw), raw_lag(raw), raw_size(raw) {}
  void merge(const LoadRecord& o) {
    latency.merge(o.latency), service.merge(o.service), lag.merge(o.lag);
    for (size_t b = 0; b < by_bucket.size(); ++b) by_bucket[b].merge(o.by_bucket[b]);
  }
};

// What one point asks of each client thread.
struct LoadSchedule {
  bool closed;            // capacity point or --clients: a request whenever a slot is free, until stop_at
  double rate;            // requests/s of this thread (open loop)
  uint64_t total;         // requests this thread issues, warm-up included (closed loop by time: UINT64_MAX)
  uint64_t warmup;        // of those, the first ones
  uint64_t t0;            // ticks: the schedule's start, shared by the threads
  uint64_t window;        // ticks: closed loop by time, how long measured requests are issued (0: by count)
  uint64_t stop_at;       // ticks: when to stop issuing, `window` after the warm-up
  uint64_t think = 0;     // ticks: closed loop, how long a slot rests between its reply and its next request
};
// Sleeps until `until` (ticks) at most kWaitSliceMs, so the caller's checks still run.
inline void sleep_until_ticks(const Clock& clk, uint64_t until) {
  const uint64_t now = clk.ticks();
  if (until <= now) return;
  const double ns = std::min(clk.to_ns(static_cast<double>(until - now)), kWaitSliceMs * 1e6);
  timespec ts{static_cast<time_t>(ns / 1e9), static_cast<long>(std::fmod(ns, 1e9))};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
}

// One client thread: its connections, its schedule, its record.
template <Transport T, Poll P>
class LoadSender {
 public:
  LoadSender(Ctx& c, std::vector<T*> conns, const LoadSizes& sizes, const LoadSchedule& s, uint64_t seed,
             double start_ns, uint64_t max_outstanding, uint64_t raw)
      : c_(c), clk_(c.clk), conns_(std::move(conns)), sizes_(sizes), s_(s),
        arrivals_(parse_arrivals(c.p.load.arrivals), s.closed ? 1.0 : s.rate, seed, start_ns), size_rng_(seed ^ 0x9e3779b97f4a7c15ull),
        slots_(max_outstanding, Slot{kFree, 0, 0, 0, 0, 0, false}), free_(max_outstanding), rec_(sizes.buckets().size(), raw),
        buf_(load_largest_message(c.p)),
        loss_ticks_(clk_.ns_to_ticks(c.p.loss_timeout_ms * 1e6)), drain_ticks_(clk_.ns_to_ticks(c.p.timeout_ms * 1e6)) {
    for (uint32_t i = 0; i < max_outstanding; ++i) free_[i] = static_cast<uint32_t>(max_outstanding - 1 - i);
    n_free_ = max_outstanding;
    if (s_.think) thinking_.resize(max_outstanding);
  }

  // Runs the schedule; `g` only on the session's thread (it watches the
  // control channel), `stop` tells every thread to end.
  Status run(Guard* g, std::atomic<bool>& stop, std::string* failure) {
    if (P == Poll::event) prctl(PR_SET_TIMERSLACK, 1);  // sleeps end on time, not up to 50 us late
    next_due_ = s_.closed ? 0 : s_.t0 + clk_.ns_to_ticks(static_cast<double>(arrivals_.next()));
    next_size_ = sizes_.draw(size_rng_, &tally_.clamped);
    uint64_t next_scan = 0;
    last_activity_ = clk_.ticks();
    const uint64_t scan_every = std::max(clk_.ns_to_ticks(1e6), loss_ticks_ / 4);
    for (uint32_t idle = 0, busy = 0;;) {
      bool progressed = send_due();
      for (T* t : conns_) {
        RecvMsg m;
        while (t->poll_recv(m)) {
          take(*t, m, clk_.ticks());
          progressed = true;
        }
        if (c_.caps.send_completions) {
          IgnoreCompletions none;
          reap_send_comps(*t, none);
        }
      }
      if (done()) return Status::ok;
      if (stay_hot<P>(progressed, idle, busy)) continue;
      // ---- slow path: the other end, Ctrl-C, the other threads, losses ----
      const uint64_t now = clk_.ticks();
      if (Status st = check(g, stop, failure); st != Status::ok) return st;
      if (!c_.caps.reliable && now >= next_scan) {
        count_lost(now);
        next_scan = now + scan_every;
      }
      if (tally_.issued >= s_.total && outstanding_ && c_.caps.reliable && now - last_activity_ > drain_ticks_) {
        *failure = "load: " + std::to_string(outstanding_) + " replies missing " + std::to_string(c_.p.timeout_ms) +
                   " ms after the last request (reliable transport; --timeout-ms sets how long to wait)";
        return Status::failed;
      }
      if constexpr (P == Poll::event) wait(*conns_[0]);
    }
  }

  // The unloaded latency of each size bucket: one request in flight on the
  // first connection, before the schedule starts (closed loop, not counted).
  std::vector<Histogram> probe_unloaded(Guard& g) {
    std::vector<Histogram> out(sizes_.buckets().size());
    const uint64_t per_bucket = std::max<uint64_t>(50, 500 / sizes_.buckets().size());
    const uint64_t wait = clk_.ns_to_ticks((c_.caps.reliable ? c_.p.timeout_ms : c_.p.loss_timeout_ms) * 1e6);
    T& t = *conns_[0];
    Rng rng(c_.p.load.seed + 77);
    // Index -1: a round of the first bucket that only warms the path up.
    for (int b = -1; b < static_cast<int>(out.size()); ++b) {
      const uint64_t budget_end = clk_.ticks() + clk_.ns_to_ticks(kProbeBudgetNs);
      for (uint64_t k = 0; k < per_bucket && clk_.ticks() < budget_end; ++k) {
        const uint64_t req = sizes_.draw_in(std::max(b, 0), rng);
        const LoadHeader h{kProbeTag, static_cast<uint32_t>(sizes_.reply(req))};
        std::memcpy(buf_.data(), &h, sizeof h);
        const uint64_t t0 = clk_.ticks();
        if (send_one<P>(t, buf_.data(), static_cast<uint32_t>(req), 0, 0, g) != Status::ok) return out;
        RecvMsg m;
        Status st;
        // A late reply to a lost probe is no answer to this one; stale tags are counted later.
        while ((st = recv_next<P>(t, m, g, clk_, t0 + wait)) == Status::ok && !is_probe_reply(m)) t.release(m);
        if (st != Status::ok) {
          if (st == Status::timeout && !c_.caps.reliable) {
            ++probes_lost_;
            continue;
          }
          return out;
        }
        const uint64_t t1 = clk_.ticks();
        t.release(m);
        if (b >= 0) out[b].record(std::llround(clk_.to_ns(static_cast<double>(t1 - t0))));
      }
    }
    return out;
  }

  // The shared start of the schedules, and (closed loop by time) how long it measures.
  void start(uint64_t t0, uint64_t window) {
    s_.t0 = t0;
    s_.window = window;
  }

  const LoadTally& tally() const { return tally_; }
  uint64_t probes_lost() const { return probes_lost_; }
  LoadRecord& record() { return rec_; }

 private:
  static constexpr uint64_t kFree = UINT64_MAX;  // a slot's `intended` while no request holds it
  struct Slot {
    uint64_t intended, actual;  // ticks
    uint32_t tag, req, resp;
    uint16_t bucket;
    bool warm;
  };

  static bool is_probe_reply(const RecvMsg& m) {
    uint32_t tag = 0;
    if (m.len >= sizeof tag) std::memcpy(&tag, m.data, sizeof tag);
    return tag == kProbeTag;
  }

  bool done() const { return tally_.issued >= s_.total && outstanding_ == 0; }

  void advance() {
    ++tally_.issued;
    if (!s_.closed) next_due_ = s_.t0 + clk_.ns_to_ticks(static_cast<double>(arrivals_.next()));
    next_size_ = sizes_.draw(size_rng_, &tally_.clamped);
  }

  // Sends every request that is due; true if any went out or was shed.
  [[gnu::always_inline]] bool send_due() {
    bool progressed = false;
    uint64_t now = clk_.ticks();
    while (tally_.issued < s_.total) {
      uint64_t intended;
      if (s_.closed) {
        // The window opens at the first measured request: a warm-up of large
        // requests (W4, W5: megabytes each) must not use it up.
        if (s_.window && s_.stop_at == UINT64_MAX && tally_.issued == s_.warmup) s_.stop_at = now + s_.window;
        if (now >= s_.stop_at) {
          s_.total = tally_.issued;  // by time: what was issued is the run
          break;
        }
        if (n_thinking_) wake_thinkers(now);
        if (!n_free_) break;
        intended = now;
      } else {
        if (now < next_due_) break;
        intended = next_due_;
      }
      const bool warm = tally_.issued < s_.warmup;
      if (!n_free_) {  // open loop only: shed, never sent late
        ++(warm ? tally_.warmup_shed : tally_.shed);
        advance();
        progressed = true;
        continue;
      }
      // ---- hot path: one request out ----
      const uint32_t idx = free_[n_free_ - 1];
      const uint32_t tag = idx | static_cast<uint32_t>(tally_.issued << kSlotBits);
      const uint32_t req = static_cast<uint32_t>(next_size_), resp = static_cast<uint32_t>(sizes_.reply(next_size_));
      const LoadHeader h{tag, resp};
      std::memcpy(buf_.data(), &h, sizeof h);
      T& t = *conns_[next_conn_];
      const uint64_t t_subm = clk_.ticks();
      if (!t.post_send(buf_.data(), req, 0, tally_.issued)) break;  // no room: replies first, then again
      // ---- end of hot path ----
      --n_free_;
      last_activity_ = t_subm;
      slots_[idx] = {intended, t_subm, tag, req, resp, static_cast<uint16_t>(sizes_.bucket_of(req)), warm};
      if (++outstanding_ > tally_.outstanding_max) tally_.outstanding_max = outstanding_;
      if (warm) {
        ++tally_.warmup_sent;
      } else {
        ++tally_.sent;
        tally_.first_intended = std::min(tally_.first_intended, intended);
        rec_.lag.record(to_ns(t_subm - intended));
      }
      if (++next_conn_ == conns_.size()) next_conn_ = 0;
      advance();
      progressed = true;
      now = t_subm;
    }
    return progressed;
  }

  int64_t to_ns(uint64_t ticks) const { return std::llround(clk_.to_ns(static_cast<double>(ticks))); }

  // A slot's request is done: free at once, or (closed loop, --think-us)
  // after its client's think time, in the order they finished.
  void release(uint32_t idx, uint64_t now) {
    slots_[idx].intended = kFree;
    --outstanding_;
    if (!s_.think) {
      free_[n_free_++] = idx;
      return;
    }
    thinking_[(think_head_ + n_thinking_++) % thinking_.size()] = {now + s_.think, idx};
  }
  // Slots whose think time is over join the free ones.
  void wake_thinkers(uint64_t now) {
    while (n_thinking_ && thinking_[think_head_].first <= now) {
      free_[n_free_++] = thinking_[think_head_].second;
      think_head_ = (think_head_ + 1) % thinking_.size();
      --n_thinking_;
    }
  }

  // A reply: matched to its slot by the tag it echoes; anything else (late
  // after being counted lost, duplicated, garbled) is counted stale.
  [[gnu::always_inline]] void take(T& t, const RecvMsg& m, uint64_t t_reply) {
    uint32_t tag = kProbeTag;
    if (m.len >= sizeof tag) std::memcpy(&tag, m.data, sizeof tag);
    t.release(m);
    const uint32_t idx = tag & kSlotMask;
    if (idx >= slots_.size() || slots_[idx].tag != tag || slots_[idx].intended == kFree) {
      ++tally_.stale;
      return;
    }
    const Slot s = slots_[idx];
    release(idx, t_reply);
    if (s.warm) {
      ++tally_.warmup_completed;
      last_activity_ = t_reply;
      return;
    }
    const int64_t latency = to_ns(t_reply - s.intended);
    const int64_t service = to_ns(t_reply - s.actual);
    rec_.latency.record(latency);
    rec_.service.record(service);
    rec_.by_bucket[s.bucket].record(latency);
    if (rec_.raw_n < rec_.raw_latency.capacity()) {
      rec_.raw_latency[rec_.raw_n] = static_cast<uint64_t>(latency);
      rec_.raw_service[rec_.raw_n] = static_cast<uint64_t>(service);
      rec_.raw_lag[rec_.raw_n] = s.actual - s.intended;
      rec_.raw_size[rec_.raw_n++] = s.req;
    }
    ++tally_.completed;
    last_activity_ = t_reply;
    tally_.bytes += s.req + s.resp;
    tally_.last_reply = std::max(tally_.last_reply, t_reply);
  }

  // Unreliable transports: a request without a reply after --loss-timeout-ms is lost.
  void count_lost(uint64_t now) {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.intended == kFree || now - s.actual < loss_ticks_) continue;
      ++(s.warm ? tally_.warmup_lost : tally_.lost);
      release(i, now);
    }
  }

  Status check(Guard* g, std::atomic<bool>& stop, std::string* failure) {
    if (stop.load(std::memory_order_relaxed)) return Status::interrupted;
    if (g) {
      const Status st = g->check(*conns_[0]);
      if (st != Status::ok) return st;
    } else if (stop_requested()) {
      return Status::interrupted;
    }
    for (T* t : conns_)
      if (const char* f = t->failure()) {
        *failure = f;
        return Status::failed;
      }
    return Status::ok;
  }

  // Event mode: sleep in the transport while replies are due, else until the
  // next send; a send that falls due during a wait is late (counted in lag).
  void wait(T& t) {
    if (outstanding_) {
      RecvMsg m;
      if (wait_for_msg(t, m, c_, tally_.issued < s_.total && !s_.closed ? next_due_ : UINT64_MAX))
        take(t, m, clk_.ticks());
    } else if (tally_.issued < s_.total && !s_.closed) {
      sleep_until_ticks(clk_, next_due_);
    } else if (n_thinking_) {
      sleep_until_ticks(clk_, thinking_[think_head_].first);
    }
  }

  Ctx& c_;
  const Clock& clk_;
  std::vector<T*> conns_;
  const LoadSizes& sizes_;
  LoadSchedule s_;
  Arrivals arrivals_;
  Rng size_rng_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  uint64_t n_free_ = 0, outstanding_ = 0;
  std::vector<std::pair<uint64_t, uint32_t>> thinking_;  // (ready at, slot): a ring, oldest at think_head_
  uint64_t think_head_ = 0, n_thinking_ = 0;
  LoadRecord rec_;
  LoadTally tally_;
  PayloadBuf buf_;
  uint64_t next_due_ = 0, next_size_ = 0;
  size_t next_conn_ = 0;
  uint64_t loss_ticks_, drain_ticks_;
  uint64_t last_activity_ = 0;
  uint64_t probes_lost_ = 0;  // ticks of the last send or reply: a reliable transport's replies are late after --timeout-ms
};

}  // namespace fm
