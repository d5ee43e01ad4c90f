// load: open-loop request/response, the question of the Homa and RAMCloud
// studies: what happens to the tail when the path is loaded?
//
// Each client thread sends on an absolute schedule fixed in advance
// (arrivals.hpp: --arrivals at its share of --rate), never waiting for a
// reply to decide when to send, and measures each reply from the request's
// *intended* send time, so a slow server cannot hide its queueing
// (coordinated omission); apart, from the actual send (service latency) and
// how late the send was (lag: the generator's own accuracy). A request due
// while --max-outstanding are in flight is shed: counted, never sent late.
// The server answers each request with a reply of the size the request asks
// for, after an optional busy-wait (--service-ns), and counts how many
// requests each poll of a connection returned (completions per poll, as in
// the RAMCloud notes) and how many each of its threads answered. Its threads
// serve connections of their own, or (--server-rx shared) every one of them
// through readers of their own, as Homa's receiver threads share one port.
//
// Latencies go into log-linear histograms (histogram.hpp: 3 significant
// digits), one set per thread, merged at the end; --samples raw also keeps
// every latency. Before its measured requests each point measures the
// unloaded latency of each size bucket (one request in flight): the
// reference of the slowdown figures (Homa's metric: latency / unloaded p50
// of that size).
//
// --of-capacity F: the first point runs closed loop (a request whenever one of
// --max-outstanding slots is free) and its achieved rate is the capacity;
// the next points offer F x that (above 1: more than the path carries).
//
// --clients N: closed loop, one point per N: N clients, each with
// --outstanding requests in flight, a slot reused as soon as its reply is
// in (after --think-us); the clients are dealt among the threads. Latency
// is still from the intended send, which in closed loop is the moment a
// slot came free: a slow reply delays the next request instead of queueing
// behind it, so closed loop never shows the open loop's queueing
// (coordinated omission).
#pragma once
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "fabmeter/arrivals.hpp"
#include "fabmeter/histogram.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/schedule.hpp"
#include "fabmeter/workload.hpp"

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

constexpr int kSizeBuckets = 10;                 // slowdown: sizes by deciles of the workload
constexpr int kMaxBatch = 64;                    // completions per poll: 1 .. 63, then 64 and more
constexpr uint64_t kMaxRawSamples = 1ull << 22;  // per thread, --samples raw (128 MiB of arrays)
constexpr double kStartLeadNs = 2e6;             // threads start their schedules together, this far ahead
constexpr double kProbeBudgetNs = 100e6;         // the unloaded probes of one bucket stop after this long
constexpr double kPoolSampleNs = 1e6;            // the server samples its pools this often at first ...
constexpr size_t kPoolSeries = 1024;             // ... keeping this many samples, every other one dropped when full

// The transport's pools where it reports them (transport.hpp's optional pools()).
template <Transport T>
std::optional<Pools> pools_of(const T& t) {
  if constexpr (requires { t.pools(); }) return t.pools();
  else return std::nullopt;
}

// Pool occupancy as the server saw it: the extremes over every thread, and
// over time for the first thread's connections.
struct PoolRecord {
  uint64_t unit = 0;                    // 0 none, 1 work requests, 2 bytes
  uint64_t rx_capacity = 0, tx_capacity = 0, rx_max = 0, tx_max = 0, rx_sum = 0, tx_sum = 0, samples = 0;
  std::vector<std::array<uint64_t, 3>> series;  // {us since the point started, rx used, tx used}

  static uint64_t unit_code(const char* unit) { return std::string_view(unit) == "bytes" ? 2 : 1; }
  static const char* unit_name(uint64_t code) { return code == 2 ? "bytes" : code == 1 ? "work requests" : "none"; }
};

// The largest message of a plan: both ends compute it from the parameters
// (a workload's largest size came with them: LoadExperiment::resolve).
inline uint64_t load_largest_message(const Params& p) {
  if (!p.load.workload.empty()) return p.max_size;
  return std::max(p.load.req_size, p.load.resp_size);
}

// Client side: the size of every request and its reply, and the size
// buckets of the slowdown figures (deciles of the workload's CDF, merged
// where they hold the same sizes; one bucket for a fixed size).
class LoadSizes {
 public:
  explicit LoadSizes(const Params& p) : req_(p.load.req_size), resp_(p.load.resp_size), max_(load_largest_message(p)) {
    if (p.load.workload.empty()) {
      buckets_.push_back({req_, 0, 1});
      return;
    }
    workload_.emplace(Workload::load(p.load.workload));
    for (int k = 1; k <= kSizeBuckets; ++k) {
      const double lo = (k - 1) / double(kSizeBuckets), hi = k / double(kSizeBuckets);
      const uint64_t top = clamp(workload_->at(std::nextafter(hi, 0.0)));
      if (!buckets_.empty() && buckets_.back().hi == top) buckets_.back().u_hi = hi;
      else buckets_.push_back({top, lo, hi});
    }
  }

  struct Bucket {
    uint64_t hi;        // largest request size in the bucket (the one below it holds smaller ones)
    double u_lo, u_hi;  // its share of the CDF
  };

  // A request size: from the workload (clamped to [8, the largest message]) or fixed.
  uint64_t draw(Rng& rng, uint64_t* clamped) const { return workload_ ? clamped_size(workload_->sample(rng), clamped) : req_; }
  // A request size within bucket b (the unloaded probes).
  uint64_t draw_in(int b, Rng& rng) const {
    if (!workload_) return req_;
    const Bucket& k = buckets_[b];
    uint64_t unused;
    return clamped_size(workload_->at(k.u_lo + rng.uniform() * (k.u_hi - k.u_lo)), &unused);
  }
  uint64_t reply(uint64_t req) const { return resp_ ? resp_ : req; }
  int bucket_of(uint64_t size) const {
    int b = 0;
    while (b + 1 < static_cast<int>(buckets_.size()) && size > buckets_[b].hi) ++b;
    return b;
  }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  uint64_t bucket_lo(int b) const { return b == 0 ? (workload_ ? clamp(workload_->min_size()) : req_) : buckets_[b - 1].hi + 1; }
  double mean_request() const { return workload_ ? workload_->mean_size() : static_cast<double>(req_); }

 private:
  uint64_t clamp(uint64_t s) const { return std::clamp<uint64_t>(s, kLoadMinMessage, max_); }
  uint64_t clamped_size(uint64_t s, uint64_t* clamped) const {
    const uint64_t c = clamp(s);
    *clamped += c != s;
    return c;
  }
  uint64_t req_, resp_, max_;
  std::optional<Workload> workload_;
  std::vector<Bucket> buckets_;
};

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

// Server -> client after the point: what the server saw, added over its threads.
struct LoadServerStats {
  uint64_t requests = 0, malformed = 0, empty_polls = 0;
  uint64_t per_poll[kMaxBatch] = {};  // [n-1]: polls of a connection that returned n requests (the last: 64 and more)
  bool tx_timed = false;              // send completions reported and --tx-stamps on: `tx` below means something
  TxRecord tx;
  std::vector<uint64_t> per_thread;   // requests each server thread answered (load_server fills it)

  PoolRecord pools;

  void add(const LoadServerStats& o) {
    requests += o.requests, malformed += o.malformed, empty_polls += o.empty_polls;
    for (int i = 0; i < kMaxBatch; ++i) per_poll[i] += o.per_poll[i];
    tx_timed |= o.tx_timed;
    tx.add(o.tx);
    PoolRecord& p = pools;
    const PoolRecord& q = o.pools;
    p.unit = std::max(p.unit, q.unit);
    p.rx_capacity += q.rx_capacity, p.tx_capacity += q.tx_capacity, p.rx_max += q.rx_max, p.tx_max += q.tx_max;
    p.rx_sum += q.rx_sum, p.tx_sum += q.tx_sum, p.samples = std::max(p.samples, q.samples);
    if (p.series.empty()) p.series = q.series;  // the first thread's
  }
  std::string encode() const {
    std::string s = std::to_string(requests) + " " + std::to_string(malformed) + " " + std::to_string(empty_polls);
    for (uint64_t n : per_poll) s += " " + std::to_string(n);
    s += tx_timed ? " 1" : " 0";
    for (int i = 0; i < TxRecord::kFields; ++i) s += " " + std::to_string(tx.field(i));
    const PoolRecord& p = pools;
    for (uint64_t n : {p.unit, p.rx_capacity, p.tx_capacity, p.rx_max, p.tx_max, p.rx_sum, p.tx_sum, p.samples,
                       static_cast<uint64_t>(p.series.size())})
      s += " " + std::to_string(n);
    for (const auto& row : p.series)
      for (uint64_t n : row) s += " " + std::to_string(n);
    s += " " + std::to_string(per_thread.size());
    for (uint64_t n : per_thread) s += " " + std::to_string(n);
    return s;
  }
  // The largest encode(): 20 digits and a space per number.
  static constexpr uint64_t kMaxEncoded =
      (3 + kMaxBatch + 1 + TxRecord::kFields + 9 + 3 * kPoolSeries + 1 + LoadOptions::kMaxServerThreads) * 21;
  // Every number checked, the series' length bounded before it is read:
  // the peer's text is untrusted.
  static LoadServerStats decode(std::string_view s) {
    LoadServerStats st;
    auto next = [&](uint64_t max = UINT64_MAX) {
      if (s.empty()) runtime_error("load: the server's counts end early");
      const size_t sp = s.find(' ');
      const uint64_t v = parse_peer_u64(s.substr(0, sp), "load server counts", max);
      s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
      return v;
    };
    st.requests = next(), st.malformed = next(), st.empty_polls = next();
    for (uint64_t& n : st.per_poll) n = next();
    st.tx_timed = next(1) == 1;
    for (int i = 0; i < TxRecord::kFields; ++i) st.tx.field(i) = next();
    PoolRecord& p = st.pools;
    p.unit = next(2);
    for (uint64_t* f : {&p.rx_capacity, &p.tx_capacity, &p.rx_max, &p.tx_max, &p.rx_sum, &p.tx_sum, &p.samples}) *f = next();
    p.series.resize(next(kPoolSeries));
    for (auto& row : p.series)
      for (uint64_t& n : row) n = next();
    st.per_thread.resize(next(LoadOptions::kMaxServerThreads));
    for (uint64_t& n : st.per_thread) n = next();
    if (!s.empty()) runtime_error("load: the server's counts have extra fields: '" + peer_excerpt(s) + "'");
    return st;
  }
  JsonObj json() const {
    JsonObj per, o;
    uint64_t polls = 0, sum = 0;
    for (int i = 0; i < kMaxBatch; ++i) {
      if (!per_poll[i]) continue;
      per.add(i + 1 == kMaxBatch ? std::to_string(kMaxBatch) + "+" : std::to_string(i + 1), per_poll[i]);
      polls += per_poll[i];
      sum += per_poll[i] * static_cast<uint64_t>(i + 1);
    }
    std::string threads;
    for (uint64_t n : per_thread) threads += (threads.empty() ? "" : ",") + std::to_string(n);
    o.add("requests", requests).add_raw("requests_per_thread", "[" + threads + "]")
        .add("malformed", malformed).add("empty_polls", empty_polls)
        .add("completions_per_poll", per).add("mean_per_poll", polls ? static_cast<double>(sum) / static_cast<double>(polls) : 0.0);
    if (tx_timed) o.add("tx", tx.json());
    else o.add_raw("tx", "null");
    const PoolRecord& p = pools;
    if (!p.unit) return o;
    auto column = [&](int k) {
      std::string a;
      for (const auto& row : p.series) a += (a.empty() ? "" : ",") + std::to_string(row[k]);
      return "[" + a + "]";
    };
    const double n = static_cast<double>(std::max<uint64_t>(p.samples, 1));
    JsonObj series, po;
    series.add_raw("t_us", column(0)).add_raw("rx_used", column(1)).add_raw("tx_used", column(2));
    po.add("unit", PoolRecord::unit_name(p.unit)).add("rx_capacity", p.rx_capacity).add("tx_capacity", p.tx_capacity)
        .add("rx_used_max", p.rx_max).add("tx_used_max", p.tx_max)
        .add("rx_used_mean", static_cast<double>(p.rx_sum) / n).add("tx_used_mean", static_cast<double>(p.tx_sum) / n)
        .add("samples", p.samples).add("series", series);
    // Receives the transport holds posted at the worst moment seen (verbs, ofi).
    if (p.unit == 1) po.add("rx_posted_min", p.rx_capacity - std::min(p.rx_capacity, p.rx_max));
    o.add("pools", po);
    return o;
  }
};

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
      // ---- slow path: the peer, Ctrl-C, the other threads, losses ----
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

// The slowdown buckets as a JSON array (JsonObj makes objects only).
inline std::string slowdown_json(const LoadSizes& sizes, const LoadRecord& rec, const std::vector<Histogram>& unloaded) {
  std::string items;
  for (size_t b = 0; b < sizes.buckets().size(); ++b) {
    const Histogram& h = rec.by_bucket[b];
    const double base = unloaded[b].count() ? static_cast<double>(unloaded[b].value_at_percentile(50)) : 0;
    const double p50 = static_cast<double>(h.value_at_percentile(50)), p99 = static_cast<double>(h.value_at_percentile(99));
    JsonObj o;
    o.add("size_lo", sizes.bucket_lo(static_cast<int>(b))).add("size_hi", sizes.buckets()[b].hi).add("count", h.count())
        .add("p50", h.count() && base > 0 ? p50 / base : 0.0).add("p99", h.count() && base > 0 ? p99 / base : 0.0)
        .add("latency_p50_ns", h.count() ? p50 : 0.0).add("latency_p99_ns", h.count() ? p99 : 0.0)
        .add("unloaded_p50_ns", base).add("unloaded_count", unloaded[b].count());
    // The bucket's histograms, so that runs can be added up exactly (mesh).
    add_hist(o, "latency_hist", h);
    add_hist(o, "unloaded_hist", unloaded[b]);
    items += (items.empty() ? "" : ", ") + o.str();
  }
  return "[" + items + "]";
}

template <Transport T, Poll P>
Status load_client(Conns<T> conns, Ctx& c, const Point& pt, PointOut& out) {
  const Params& p = c.p;
  const LoadOptions& l = p.load;
  const Clock& clk = c.clk;
  const LoadSizes sizes(p);
  Guard g(c);
  const uint32_t threads = l.threads;

  // This point's offered rate: --rate's, a fraction of the capacity, or none (closed loop).
  double rate = static_cast<double>(pt.rate);
  if (pt.of_capacity > 0) {
    if (!(c.capacity_rps > 0)) runtime_error("load: the capacity point completed no request, so --of-capacity has nothing to scale");
    rate = pt.of_capacity * c.capacity_rps;
  }
  const bool closed = pt.capacity || pt.clients;
  const double seconds = p.duration > 0 ? p.duration : 1.0;
  // Measured requests; the warm-up ones come first, on top.
  const uint64_t measured = p.count ? p.count : closed ? UINT64_MAX : std::max<uint64_t>(1, std::llround(seconds * rate));

  std::vector<std::unique_ptr<LoadSender<T, P>>> senders;
  const double thread_rate = rate / threads;
  for (uint32_t k = 0; k < threads; ++k) {
    const uint64_t warmup = share_of(pt.warmup, threads, k);
    const uint64_t mine = measured == UINT64_MAX ? UINT64_MAX : warmup + share_of(measured, threads, k);
    LoadSchedule s{closed, thread_rate, mine, warmup, 0, 0, UINT64_MAX};
    // --clients: this thread's clients, each with its --outstanding slots.
    const uint64_t slots = pt.clients ? share_of(pt.clients, threads, k) * l.outstanding : l.max_outstanding;
    if (pt.clients) s.think = clk.ns_to_ticks(l.think_us * 1e3);
    // Fixed arrivals interleave: thread k starts k/rate after the first.
    const double start_ns = closed ? 0 : static_cast<double>(k) * 1e9 / rate;
    senders.push_back(std::make_unique<LoadSender<T, P>>(c, deal(conns, threads, k), sizes, s, l.seed * 1000003 + k,
                                                         start_ns, std::max<uint64_t>(1, slots),
                                                         keep_raw(p, true) ? kMaxRawSamples : 0));
  }
  const std::vector<Histogram> unloaded = senders[0]->probe_unloaded(g);

  // Every thread's schedule starts at one instant, a little ahead.
  const uint64_t t0 = clk.ticks() + clk.ns_to_ticks(kStartLeadNs);
  std::atomic<bool> stop{false};
  std::vector<LoadThreadEnd> ends(threads);
  std::vector<std::thread> workers;
  const uint64_t window = closed && !p.count ? clk.ns_to_ticks(seconds * 1e9) : 0;
  c.cpu.begin(kWithWarmup);  // each thread's warm-up ends on its own: the window holds them
  for (uint32_t k = 0; k < threads; ++k) senders[k]->start(t0, window);
  for (uint32_t k = 1; k < threads; ++k)
    workers.emplace_back([&, k] {
      ends[k].status = senders[k]->run(nullptr, stop, &ends[k].failure);
      if (ends[k].status != Status::ok) stop = true;
    });
  ends[0].status = senders[0]->run(&g, stop, &ends[0].failure);
  if (ends[0].status != Status::ok) stop = true;
  for (std::thread& w : workers) w.join();
  const Status st0 = first_cause(ends, c);
  uint64_t requests = 0;
  for (const auto& sender : senders) requests += sender->tally().sent + sender->tally().warmup_sent;
  c.cpu.end(requests, "request");


  LoadTally tally;
  LoadRecord& rec = senders[0]->record();
  for (uint32_t k = 0; k < threads; ++k) {
    tally.add(senders[k]->tally());
    if (k) rec.merge(senders[k]->record());
  }

  Status st = st0;
  LoadServerStats server;
  if (st == Status::ok) {
    c.ctrl.send(CtrlType::end_point, std::to_string(tally.sent + tally.warmup_sent));
    try {
      server = LoadServerStats::decode(c.ctrl.recv(CtrlType::exchange, "load server counts"));
    } catch (const Error& e) {
      if (e.kind == ErrorKind::usage) throw;
      c.failure = e.what();
      st = Status::peer_lost;
    }
  }
  out.partial = st != Status::ok;

  const double span_s = tally.last_reply > tally.first_intended
                            ? clk.to_ns(static_cast<double>(tally.last_reply - tally.first_intended)) / 1e9 : 0;
  const double achieved = span_s > 0 ? static_cast<double>(tally.completed) / span_s : 0;
  if (closed) c.capacity_rps = achieved;
  Histogram unloaded_all;
  for (const Histogram& h : unloaded) unloaded_all.merge(h);

  out.fields.add("iterations", tally.completed).add("latency_kind", "rtt from the intended send time")
      .add("phase", pt.clients ? "closed loop" : closed ? "capacity" : "open loop")
      .add("arrivals", closed ? "closed loop" : l.arrivals.c_str())
      .add("offered_rps", closed ? achieved : rate).add_raw("of_capacity", pt.of_capacity > 0 ? std::to_string(pt.of_capacity) : "null")
      .add("achieved_rps", achieved)
      .add("achieved_gbps", span_s > 0 ? static_cast<double>(tally.bytes) * 8 / span_s / 1e9 : 0.0)
      .add("latency_ns", to_json(summarize(rec.latency)))
      .add("service_latency_ns", to_json(summarize(rec.service)))
      .add("lag_ns", to_json(summarize(rec.lag)))
      .add("unloaded_ns", to_json(summarize(unloaded_all)))
      .add("requests", tally.sent + tally.shed).add("sent", tally.sent).add("completed", tally.completed)
      .add("shed", tally.shed).add("lost", tally.lost)
      .add("probes_lost", senders[0]->probes_lost())
      .add("warmup_sent", tally.warmup_sent).add("warmup_shed", tally.warmup_shed).add("warmup_lost", tally.warmup_lost)
      .add("stale_replies", tally.stale).add("clamped", tally.clamped)
      .add("outstanding_max", tally.outstanding_max).add("max_outstanding", l.max_outstanding)
      .add("span_s", span_s)
      .add_raw("slowdown", slowdown_json(sizes, rec, unloaded))
      .add("server", server.json())
      .add("mean_req_bytes", sizes.mean_request())
      .add("conns", static_cast<uint64_t>(l.conns)).add("threads", static_cast<uint64_t>(l.threads))
      .add("server_threads", static_cast<uint64_t>(l.server_threads)).add("server_rx", l.server_rx)
      .add("service_ns", l.service_ns)
      .add("histogram", histogram_info(rec.latency.config()))
      .add("samples_kind", keep_raw(p, true) ? "raw" : "hist");
  if (pt.clients) out.fields.add("clients", pt.clients).add("outstanding", l.outstanding).add("think_us", l.think_us);
  add_hist(out.fields, "latency_hist", rec.latency);
  if (keep_raw(p, true)) {
    uint64_t kept = 0;
    for (uint32_t k = 0; k < threads; ++k) kept += senders[k]->record().raw_n;
    std::vector<double> lat, svc, lag, size;
    for (uint32_t k = 0; k < threads; ++k) {
      const LoadRecord& r = senders[k]->record();
      for (uint64_t i = 0; i < r.raw_n; ++i) {
        lat.push_back(static_cast<double>(r.raw_latency[i]));
        svc.push_back(static_cast<double>(r.raw_service[i]));
        lag.push_back(clk.to_ns(static_cast<double>(r.raw_lag[i])));
        size.push_back(static_cast<double>(r.raw_size[i]));
      }
    }
    if (kept < tally.completed)
      out.fields.add("note", "raw samples kept for the first " + std::to_string(kMaxRawSamples) +
                                 " requests per thread; the histograms hold all " + std::to_string(tally.completed));
    out.arrays.emplace_back("latency_ns", std::move(lat));
    out.arrays.emplace_back("service_latency_ns", std::move(svc));
    out.arrays.emplace_back("lag_ns", std::move(lag));
    out.arrays.emplace_back("size_bytes", std::move(size));
  }
  return st;
}

// One server thread: answers every request on its connections.
template <Transport T, Poll P>
class LoadResponder {
 public:
  // `pools`: whether this thread samples its connections' pools (readers
  // of shared connections: only one of them, or each socket counts N times).
  LoadResponder(Ctx& c, std::vector<T*> conns, uint64_t max_msg, bool pools)
      : c_(c), clk_(c.clk), conns_(std::move(conns)), reply_(max_msg), max_msg_(max_msg), pools_(pools),
        service_ticks_(c.clk.ns_to_ticks(c.p.load.service_ns)), t_start_(c.clk.ticks()),
        sample_every_(c.clk.ns_to_ticks(kPoolSampleNs)) {
    stats_.pools.series.reserve(kPoolSeries);
    stats_.tx_timed = c.caps.send_completions && c.p.load.tx_stamps == "on";
  }

  // Until `stop`; `g` only on the session's thread, which returns ctrl_pending
  // when the client's end of the point arrives.
  Status run(Guard* g, std::atomic<bool>& stop, std::string* failure) {
    for (uint32_t idle = 0, busy = 0;;) {
      bool progressed = false;
      for (T* t : conns_) {
        uint64_t n = 0;
        RecvMsg m;
        while (t->poll_recv(m)) {
          if (Status st = answer(*t, m, stop); st != Status::ok) return ended(*t, st, failure);
          ++n;
        }
        note_poll(n);
        progressed |= n > 0;
      }
      if (stay_hot<P>(progressed, idle, busy)) continue;
      if (stop.load(std::memory_order_relaxed)) return Status::ok;
      sample_pools();
      if (g) {
        if (Status st = g->check(*conns_[0]); st != Status::ok) return st;
      } else if (stop_requested()) {
        return Status::interrupted;
      }
      for (T* t : conns_)
        if (const char* f = t->failure()) {
          *failure = f;
          return Status::failed;
        }
      if constexpr (P == Poll::event) {
        T& t = *conns_[0];
        RecvMsg m;
        if (wait_for_msg(t, m, c_)) {
          uint64_t n = 1;
          if (Status st = answer(t, m, stop); st != Status::ok) return ended(t, st, failure);
          while (t.poll_recv(m)) {
            if (Status st = answer(t, m, stop); st != Status::ok) return ended(t, st, failure);
            ++n;
          }
          note_poll(n);
        }
      }
    }
  }

  const LoadServerStats& stats() const { return stats_; }

 private:
  static Status ended(const T& t, Status st, std::string* failure) {
    if (st != Status::failed) return st;
    if (const char* f = t.failure()) *failure = f;  // a transport that cannot fail (shm) says nothing
    return st;
  }

  // Slow path, about every kPoolSampleNs: the pools of this thread's connections, added up.
  void sample_pools() {
    const uint64_t now = clk_.ticks();
    if (!pools_ || now < next_sample_) return;
    next_sample_ = now + sample_every_;
    PoolRecord& r = stats_.pools;
    uint64_t rx = 0, tx = 0, rx_cap = 0, tx_cap = 0;
    for (const T* t : conns_) {
      const std::optional<Pools> p = pools_of(*t);
      if (!p) return;
      r.unit = PoolRecord::unit_code(p->unit);
      rx += p->rx_used, tx += p->tx_used, rx_cap += p->rx_capacity, tx_cap += p->tx_capacity;
    }
    r.rx_capacity = rx_cap, r.tx_capacity = tx_cap;
    r.rx_max = std::max(r.rx_max, rx), r.tx_max = std::max(r.tx_max, tx);
    r.rx_sum += rx, r.tx_sum += tx, ++r.samples;
    if (r.series.size() == kPoolSeries) {  // full: every other sample, at half the rate
      for (size_t i = 0; i < kPoolSeries / 2; ++i) r.series[i] = r.series[2 * i];
      r.series.resize(kPoolSeries / 2);
      sample_every_ *= 2;
    }
    r.series.push_back({static_cast<uint64_t>(clk_.to_ns(static_cast<double>(now - t_start_)) / 1e3), rx, tx});
  }

  uint64_t ticks_ns(uint64_t ticks) const { return static_cast<uint64_t>(clk_.to_ns(static_cast<double>(ticks))); }

  void note_poll(uint64_t n) {
    if (n) ++stats_.per_poll[std::min<uint64_t>(n, kMaxBatch) - 1];
    else ++stats_.empty_polls;
  }

  // ---- hot path: one request in, its reply out ----
  // The request is the client's: its reply size is bounded before use.
  [[gnu::always_inline]] Status answer(T& t, const RecvMsg& m, std::atomic<bool>& stop) {
    if (m.len < sizeof(LoadHeader)) {
      t.release(m);
      ++stats_.malformed;
      return Status::ok;
    }
    LoadHeader h;
    std::memcpy(&h, m.data, sizeof h);
    t.release(m);
    ++stats_.requests;
    const uint32_t len = static_cast<uint32_t>(std::clamp<uint64_t>(h.resp_len, kLoadMinMessage, max_msg_));
    if (service_ticks_) {
      const uint64_t until = clk_.ticks() + service_ticks_;
      while (clk_.ticks() < until) {
      }
    }
    std::memcpy(reply_.data(), &h.tag, sizeof h.tag);
    if (t.post_send(reply_.data(), len, 0, 0)) [[likely]] return Status::ok;
    return stats_.tx_timed ? wait_for_buffer<true>(t, len, stop) : wait_for_buffer<false>(t, len, stop);
  }

  // No free send buffer: poll for send completions until one frees, each
  // poll and the whole wait stamped (TxRecord) when kStamp.
  template <bool kStamp>
  Status wait_for_buffer(T& t, uint32_t len, std::atomic<bool>& stop) {
    TxRecord& tx = stats_.tx;
    uint64_t waited_from = 0;
    if constexpr (kStamp) waited_from = clk_.ticks(), ++tx.waits;
    for (uint32_t spins = 0;; ++spins) {
      if constexpr (P == Poll::event) t.wait_send();
      else cpu_relax();
      IgnoreCompletions none;
      if constexpr (kStamp) {
        const uint64_t t0 = clk_.ticks();
        const int n = reap_send_comps(t, none);
        const uint64_t t1 = clk_.ticks();
        if (n > 0) {
          ++tx.polls, tx.completions += n, tx.poll_ns += ticks_ns(t1 - t0);
          ++tx.per_poll[std::min(n, kTxPollMax) - 1];
        } else {
          ++tx.polls_empty, tx.empty_ns += ticks_ns(t1 - t0);
        }
      } else {
        reap_send_comps(t, none);
      }
      if (t.post_send(reply_.data(), len, 0, 0)) {
        if constexpr (kStamp) tx.wait_ns += ticks_ns(clk_.ticks() - waited_from);
        return Status::ok;
      }
      if (spins % kGuardSpins) continue;
      if (t.failure()) return Status::failed;
      if (stop.load(std::memory_order_relaxed) || stop_requested()) return Status::interrupted;
    }
  }

  Ctx& c_;
  const Clock& clk_;
  std::vector<T*> conns_;
  PayloadBuf reply_;
  uint64_t max_msg_;
  bool pools_;
  uint64_t service_ticks_;
  uint64_t t_start_, sample_every_, next_sample_ = 0;
  LoadServerStats stats_;
};

// --server-rx shared: a reader of the connection for one server thread.
template <Transport T>
std::unique_ptr<T> reader_of(T& t) {
  if constexpr (requires { t.reader(); }) return t.reader();
  else runtime_error("load: this transport has no readers (--server-rx shared)");  // check_caps refused it first
}

template <Transport T, Poll P>
Status load_server(Conns<T> conns, Ctx& c, const Point& pt) {
  const uint32_t threads = c.p.load.server_threads;
  // own: thread k serves connections k, k + threads, ...; shared: every
  // thread serves every connection, each through readers of its own.
  const bool shared = c.p.load.server_rx == "shared";
  std::vector<std::unique_ptr<T>> readers;
  std::vector<std::unique_ptr<LoadResponder<T, P>>> responders;
  for (uint32_t k = 0; k < threads; ++k) {
    std::vector<T*> mine;
    if (shared)
      for (T* t : conns) mine.push_back(readers.emplace_back(reader_of(*t)).get());
    else
      mine = deal(conns, threads, k);
    responders.push_back(std::make_unique<LoadResponder<T, P>>(c, std::move(mine), pt.size, !shared || k == 0));
  }
  Guard g(c);
  std::atomic<bool> stop{false};
  std::vector<LoadThreadEnd> ends(threads);
  std::vector<std::thread> workers;
  // No begin(): the requests served (the client's unloaded probes and warm-up among them) all look alike here,
  // so the server's window is the whole point.
  for (uint32_t k = 1; k < threads; ++k)
    workers.emplace_back([&, k] { ends[k].status = responders[k]->run(nullptr, stop, &ends[k].failure); });
  ends[0].status = responders[0]->run(&g, stop, &ends[0].failure);
  stop = true;
  for (std::thread& w : workers) w.join();
  if (ends[0].status == Status::ctrl_pending) {  // the client's end of the point: every reply it waits for went out
    LoadServerStats total;
    for (const auto& r : responders) {
      total.add(r->stats());
      total.per_thread.push_back(r->stats().requests);
    }
    c.cpu.end(total.requests, "request");
    recv_count(c.ctrl, "load sent count");
    c.ctrl.send(CtrlType::exchange, total.encode());
    return Status::ok;
  }
  return first_cause(ends, c);
}

struct LoadExperiment : ExperimentDefaults {
  static constexpr const char* name = "load";
  static constexpr bool kManyConnections = true;
  // Bounds keep a client's numbers from making either end allocate or run without limit.
  static void validate(const Params& p) {
    validate_rates(p);
    const LoadOptions& l = p.load;
    if (l.of_capacity.size() > 64) usage_error("--of-capacity takes at most 64 values");
    for (double f : l.of_capacity)
      if (!(f > 0 && f <= 10)) usage_error("--of-capacity must be a multiple of the capacity: above 0 and at most 10");
    if (!l.clients.empty()) {
      if (!l.of_capacity.empty() || p.named("rate"))
        usage_error("give one of --rate, --of-capacity and --clients");
      if (l.clients.size() > 64) usage_error("--clients takes at most 64 values");
      for (uint64_t n : l.clients) {
        if (n < 1 || n > 4096) usage_error("--clients must be between 1 and 4096");
        if (n < l.threads) usage_error("--clients must be at least --threads (each thread drives clients of its own)");
        if (n * l.outstanding > LoadOptions::kMaxOutstanding)
          usage_error("--clients x --outstanding must be at most " + std::to_string(LoadOptions::kMaxOutstanding));
      }
    }
    if (l.outstanding < 1 || l.outstanding > LoadOptions::kMaxOutstanding)
      usage_error("--outstanding must be between 1 and " + std::to_string(LoadOptions::kMaxOutstanding));
    if (!(l.think_us >= 0 && l.think_us <= 1e6)) usage_error("--think-us must be between 0 and 1000000 (one second)");
    if (l.clients.empty() && (p.named("outstanding") || p.named("think-us")))
      usage_error("--outstanding and --think-us apply to closed loop only: give --clients");
    if (!l.workload.empty() && p.named("req-size")) usage_error("give either --req-size or --workload, not both");
    if (l.req_size < 8) usage_error("--req-size must be at least 8 bytes (its sequence number and response size ride in it)");
    if (l.resp_size != 0 && l.resp_size < 8) usage_error("--resp-size must be at least 8 bytes");
    if (l.req_size > (1ull << 30) || l.resp_size > (1ull << 30)) usage_error("--req-size and --resp-size are limited to 1 GiB");
    if (l.max_outstanding < 1 || l.max_outstanding > LoadOptions::kMaxOutstanding)
      usage_error("--max-outstanding must be between 1 and " + std::to_string(LoadOptions::kMaxOutstanding));
    if (l.conns < 1 || l.conns > 64) usage_error("--conns must be between 1 and 64");
    const bool shared = l.server_rx == "shared";
    if (l.threads < 1 || l.server_threads < 1 || l.threads > l.conns || (!shared && l.server_threads > l.conns))
      usage_error("--threads and --server-threads must be between 1 and --conns (each thread serves connections of its "
                  "own; --server-rx shared lets every server thread read every connection)");
    if (l.server_threads > LoadOptions::kMaxServerThreads)
      usage_error("--server-threads must be at most " + std::to_string(LoadOptions::kMaxServerThreads));
    if (p.poll == Poll::event && (l.threads != l.conns || (shared ? l.conns != 1 : l.server_threads != l.conns)))
      usage_error(shared ? "event mode sleeps on one connection per thread: with --server-rx shared give --conns 1 and --threads 1"
                         : "event mode sleeps on one connection per thread: give --conns, --threads and --server-threads the same value");
    if (l.service_ns > 1e9) usage_error("--service-ns must be at most 1e9 (one second)");
    if (p.count > (1ull << 32)) usage_error("--count is limited to 4294967296 requests per point");
    if (p.duration > 86400) usage_error("--duration is limited to 86400 s per point");
  }
  static uint64_t report_bytes(const Params&, const Point&) { return LoadServerStats::kMaxEncoded; }
  static uint32_t connections(const Params& p) { return p.load.conns; }

  // A workload file is read here, on the client, and never by the server:
  // its largest size travels as --max-size, which sizes the server's
  // buffers. The workload runs whole: a transport that cannot carry its
  // largest request refuses it, with what clamping would take away. Only a
  // --max-size given on purpose clamps it (counted in `clamped`).
  static void resolve(Params& p, const Caps& caps) {
    if (p.load.workload.empty()) return;
    const Workload w = Workload::load(p.load.workload);
    const bool max_given = p.named("max-size");
    if (!max_given && w.max_size() > caps.max_msg_size) {
      const Workload::Share lost = w.share_above(caps.max_msg_size);
      char share[160];
      std::snprintf(share, sizeof share, "%.3g %% of its requests and %.3g %% of its bytes", 100 * lost.messages,
                    100 * lost.bytes);
      usage_error(p.transport + ": workload " + w.name() + " has requests up to " + std::to_string(w.max_size()) +
                  " B, above the transport's largest message, " + std::to_string(caps.max_msg_size) + " B" +
                  (caps.max_msg_note.empty() ? "" : " (" + caps.max_msg_note + ")") + ": clamped, " + share +
                  " would change, a different workload; run it over a transport that carries " +
                  std::to_string(w.max_size()) + " B, or clamp on purpose with --max-size");
    }
    const uint64_t top = max_given ? std::min({p.max_size, caps.max_msg_size, w.max_size()}) : w.max_size();
    p.max_size = std::max({top, p.load.resp_size, kLoadMinMessage});
  }

  static std::vector<Point> plan(const Params& p, const Caps&) {
    const uint64_t size = load_largest_message(p);
    const uint64_t warmup = counted_warmup<LoadExperiment>(p, 0);
    std::vector<Point> points;
    if (!p.load.clients.empty()) {
      for (uint64_t n : p.load.clients) points.push_back({.size = size, .warmup = warmup, .clients = n});
      return points;
    }
    if (!p.load.of_capacity.empty()) {
      points.push_back({.size = size, .warmup = warmup, .capacity = true});
      for (double f : p.load.of_capacity) points.push_back({.size = size, .warmup = warmup, .of_capacity = f});
      return points;
    }
    for (uint64_t r : p.rate) {
      const uint64_t auto_warmup = std::max<uint64_t>(1, default_step_warmup(r));
      points.push_back({.size = size, .rate = r, .warmup = p.warmup >= 0 ? warmup : auto_warmup});
    }
    return points;
  }

  static void check_caps(const Params& p, const Caps& caps) {
    if (p.load.server_rx == "shared" && !caps.shared_rx)
      usage_error(p.transport + ": --server-rx shared needs a socket several threads can read (udp, tcp); " +
                  p.transport + " serves each connection from one thread (--server-rx own)");
    const uint64_t largest = load_largest_message(p);
    if (largest > caps.max_msg_size)
      usage_error(p.transport + ": load's largest message, " + std::to_string(largest) +
                  " B, exceeds the transport's maximum of " + std::to_string(caps.max_msg_size) + " B" +
                  (caps.max_msg_note.empty() ? "" : " (" + caps.max_msg_note + ")"));
  }

  static PointCost cost(const Params& p, const Caps&, const Point& pt) {
    const double threads = p.load.server_threads;
    const double seconds = p.count ? static_cast<double>(p.count) * kMinRoundTripNs * 1e-9
                                   : (p.duration > 0 ? p.duration : 1.0);
    // A reply buffer per server thread; shared, a reader per thread and
    // connection, each with a receive buffer (udp's holds its largest datagram).
    const double readers = p.load.server_rx == "shared" ? threads * p.load.conns : 0;
    return {threads * static_cast<double>(pt.size) + readers * static_cast<double>(std::max<uint64_t>(pt.size + 4, 65508)),
            seconds};
  }

  template <Transport T, Poll P>
  static Status client(Conns<T> conns, Ctx& c, const Point& pt, PointOut& out) {
    return load_client<T, P>(conns, c, pt, out);
  }
  template <Transport T, Poll P>
  static Status server(Conns<T> conns, Ctx& c, const Point& pt, PointOut&) {
    return load_server<T, P>(conns, c, pt);
  }
};

}  // namespace fm
