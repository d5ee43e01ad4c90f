// What every experiment shares: the run context, a point of the plan, the
// slow-path guard that notices a lost remote end or Ctrl-C, and the send/receive
// helpers, instantiated per poll mode (no run-time branch on it per message).
#pragma once
#include <poll.h>
#include <time.h>

#include <cmath>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fabmeter/clock.hpp"
#include "fabmeter/clock_sync.hpp"
#include "fabmeter/cpu_cost.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/histogram.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/remote_parse.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/signals.hpp"
#include "fabmeter/stamped_udp.hpp"
#include "fabmeter/stats.hpp"
#include "fabmeter/transport.hpp"

namespace fm {

// Event mode sleeps through pauses of 50 us and more; busy mode spins.
template <Poll P>
void pause_for(const Clock& clk, double us) {
  if (us <= 0) return;
  if (P == Poll::event && us >= 50) {
    timespec ts{static_cast<time_t>(us / 1e6), static_cast<long>(std::fmod(us, 1e6) * 1e3)};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
    return;
  }
  const uint64_t until = clk.ticks() + clk.ns_to_ticks(us * 1e3);
  while (clk.ticks() < until && !stop_requested()) cpu_relax();
}


// How a wait, a send or a whole point ended.
enum class Status {
  ok,
  // Not an end: a control frame from the other end waits to be read. Loops that
  // expect one (the other end's count at the end of a point) read it; any other
  // loop stops and returns this, and the session reads the frame (e.g. the
  // server's refuse when its watchdog ends the session mid-point).
  ctrl_pending,
  timeout,        // a deadline passed (a reply counted lost on unreliable transports)
  peer_lost,      // the other end went away or stopped answering
  interrupted,    // Ctrl-C / SIGTERM
  failed,         // the transport reported an error
};

// How the other end's timestamps map onto ours: a shared TSC needs nothing;
// across hosts, offset and drift fitted to round-trip probes (probe_clock),
// taken at the start and after every point, so each point is corrected by a
// fit whose probes bracket it. A probe travels as a UDP datagram stamped by
// both kernels at their network devices (kUdpKernelTimestamps), or, where
// that socket cannot be had or a burst got no usable probe, over the
// control channel (kControlChannel).
inline constexpr const char* kUdpKernelTimestamps = "udp_kernel_timestamps";
inline constexpr const char* kControlChannel = "control_channel";
struct ClockSync {
  bool probed = false;
  ClockEstimator estimator;
  ClockFit fit;                      // over every probe so far
  std::unique_ptr<StampedUdp> udp;   // the session's probe socket; null: control channel only
  uint64_t udp_bursts = 0;           // bursts whose probes came from the kernel's stamps
  uint64_t control_bursts = 0;       // bursts over the control channel (fallbacks included)
  uint64_t probes_lost = 0;          // UDP probes without an answer or a stamp, or held long by the server
  uint64_t datagrams_dropped = 0;    // by either end: wrong length, nonce, index, a repeat
  uint64_t realtime_steps = 0;       // UDP bursts during which our CLOCK_REALTIME was set (taken again by control channel)
  // The earliest arrival a point's stamps show, by the fit (arrival - send):
  // one before its send refuses the fit (implausible_arrival).
  void check_arrival(double earliest_one_way_ns) const {
    if (!probed) return;
    if (const std::string why = implausible_arrival(fit, earliest_one_way_ns); !why.empty())
      runtime_error(kImplausibleClock + why);
  }
  const char* path() const {
    return udp_bursts && control_bursts ? "mixed" : udp_bursts ? kUdpKernelTimestamps : kControlChannel;
  }
  JsonObj json() const {
    JsonObj o;
    o.add("method", probed ? "probe" : "shared_tsc");
    // Times in whole ns: JSON doubles carry 10 digits, too few for a time
    // since boot or two hosts' offset (their boots are days apart).
    if (probed) {
      o.add("path", path()).add("offset_ns", static_cast<int64_t>(std::llround(fit.offset_ns)))
          .add("drift_ppm", fit.drift_ppm()).add("error_bound_ns", fit.error_bound_ns).add("probes", fit.probes)
          .add("kept", fit.kept).add("ref_mono_ns", static_cast<uint64_t>(std::llround(fit.ref_ns)))
          .add("span_ns", fit.span_ns);
      if (udp)
        o.add("fallback_bursts", control_bursts).add("probes_lost", probes_lost)
            .add("datagrams_dropped", datagrams_dropped).add("realtime_steps", realtime_steps);
    }
    return o;
  }
};

// Client, --start-at: when each step before the first point's start ended
// (CLOCK_MONOTONIC), so that a run ready after its instant says which step
// took the time (mesh's late reason); the SYNs its control connection
// needed beyond the first.
struct StartSteps {
  int64_t begun = 0, control_connected = 0, welcomed = 0, transport_connected = 0, probed = 0;
  uint32_t control_syn_retransmits = 0;
  JsonObj json() const {
    return JsonObj().add("begun", begun).add("control_connected", control_connected).add("welcomed", welcomed)
        .add("transport_connected", transport_connected).add("probed", probed)
        .add("control_syn_retransmits", control_syn_retransmits);
  }
};

struct Ctx {
  const Params& p;
  const Clock& clk;
  Ctrl& ctrl;
  Role role;
  Caps caps;
  bool same_host;            // both ends share one TSC
  ClockSync sync;            // probed where the experiment needs the other end's clock and it is not ours
  std::string failure;       // why the point ended early
  bool failure_echoes_remote = false;  // failure only says the other end ended the point: its word, if it comes, is the cause
  double capacity_rps = 0;   // load, client: what the capacity point achieved (--of-capacity's 1.0)
  int64_t start_at_ns = 0;   // client: CLOCK_MONOTONIC instant the first point may start (--start-at); 0: none
  int64_t step0_ns = 0;      // client, this point: CLOCK_MONOTONIC instant of stream's step 0 (--start-at); 0: soon
  uint64_t spin_ticks = 0;   // --spin-us: event mode polls this long before it sleeps
  uint64_t sleeps = 0;       // event mode: waits that slept (wait_for_msg), this point; any thread, atomic_ref
  std::vector<int> cpus = {};  // --flows: the CPUs this end's flows run on, in turn (--cpu N+M...); empty: unpinned
  int own_cpu = -1;          // this end's --cpu (-1: unpinned)
  int server_cpu = -1;       // client: the server's --cpu, as its welcome says (-1: unpinned or not said)
  CpuWindow cpu{};           // this point's CPU cost: the experiment marks begin() and end() of its measured part
  std::vector<Caps> op_caps = {};  // --ops: each op's caps, connection i runs op i mod their count (empty: caps)
  StartSteps start_steps{};  // client: one_run and run_points stamp them
};

// Event mode's wait for a message: poll for --spin-us first (spin, then
// sleep), then sleep in the transport, counted in Ctx::sleeps. A caller
// with something else due at tick `due` (load's next send) gets false
// there instead of a sleep.
template <Transport T>
[[gnu::always_inline]] inline bool wait_for_msg(T& t, RecvMsg& m, Ctx& c, uint64_t due = UINT64_MAX) {
  if (c.spin_ticks) {
    const uint64_t now = c.clk.ticks(), until = std::min(now + c.spin_ticks, due);
    do {
      if (t.poll_recv(m)) return true;
      cpu_relax();
    } while (c.clk.ticks() < until);
    if (until == due) return false;
  }
  std::atomic_ref<uint64_t>(c.sleeps).fetch_add(1, std::memory_order_relaxed);
  return t.wait_recv(m);
}

// FABMETER_CLOCK_PROBES=control_channel (a test hook, like
// FABMETER_CLOCK_SKEW; set by whoever starts the engine): this engine
// offers no UDP probe socket. A value other than that or
// udp_kernel_timestamps is a usage error (exit 2).
bool udp_clock_probes_wanted();
// Both roles, once before the first burst: opens the UDP probe socket and
// tells the other end its port, or settles on the control channel.
void open_clock_probes(Ctx& ctx);
// One burst of clock probes, both roles at the same place in the session
// (the client probes and refits ctx.sync, the server answers).
void probe_clock(Ctx& ctx);
// The server's answer to a probe sent at sent_ns and answered at
// received_ns (our clock): "TIME TURNAROUND", each checked.
ClockProbe read_probe_answer(std::string_view answer, double sent_ns, double received_ns);
// The client's own stamps of one UDP probe (NaN: it has none, lost).
struct ProbeStamps {
  double sent_ns;      // t1: when it left our device
  double received_ns;  // t4: when its answer came in at our device
};
// The server's stamps after a UDP burst: "DROPPED" (datagrams it dropped),
// then per probe it answered a line "INDEX TIME TURNAROUND" (its arrival
// stamp t2 and t3 - t2), each index of `mine` at most once. The probes the
// client has stamps for, each checked as read_probe_answer does; adds the
// server's dropped count to `dropped`.
std::vector<ClockProbe> read_probe_stamps(std::string_view frame, std::span<const ProbeStamps> mine,
                                          uint64_t* dropped);

// One measured point of a plan, as the experiment's plan() made it.
struct Point {
  uint64_t size;             // message bytes
  uint64_t rate = 0;         // stream: samples per second
  uint64_t values = 0;       // stream: float64 values per sample
  uint64_t iterations = 0;   // measured messages (lat, bw; oneway: all bursts) or steps (stream)
  uint64_t warmup = 0;       // messages before the measured ones
  double of_capacity = 0;    // load: the offered rate as a multiple of the capacity (0: `rate` is the offered rate)
  bool capacity = false;     // load: the closed-loop point that measures the capacity --of-capacity refers to
  uint64_t clients = 0;      // load --clients: closed-loop clients of this point (0: open loop or capacity)
  uint64_t max_size = 0;     // bw --size-spread: the largest message (0: every message is `size`)
  uint64_t register_bytes = 0;  // setup: the bytes a memory-registration point registers (0: not one)
  uint64_t largest() const { return max_size ? max_size : size; }
};

// What one measured point produced: summary fields and raw arrays to save.
struct PointOut {
  JsonObj fields;
  std::vector<std::pair<std::string, std::vector<double>>> arrays;  // name -> ns values
  bool partial = false;
};

// A frozen (SIGSTOPped) remote end keeps its sockets open: each end's Heartbeat
// thread (ctrl.hpp) beats every second, and the guard declares the other end lost
// after kSilenceS without a frame from it, from the start of a point too:
// the thread beats from the welcome on, so a remote end frozen before its first
// message of the point is silent as well (not a --timeout-ms wait).
constexpr double kSilenceS = kSilenceMs / 1e3;
// Loops that may stay busy for long call tick() once per message, outside
// the timed part; every kTickStride-th call reads the clock, and the full
// check (a system call) runs every kTickMs at most.
constexpr uint32_t kTickStride = 64;
constexpr double kTickMs = 100;

// Slow-path checks, called every few thousand spins or once per event-mode
// wait slice. Only the control-channel poll is a system call, and it is
// rate-limited to once a millisecond.
class Guard {
 public:
  Ctx& ctx() const { return c_; }
  explicit Guard(Ctx& c)
      : c_(c), interval_(c.clk.ns_to_ticks(1e6)), tick_interval_(c.clk.ns_to_ticks(kTickMs * 1e6)),
        silence_(c.clk.ns_to_ticks(kSilenceS * 1e9)),
        heard_(c.clk.ticks()), remote_heard_(c.ctrl) {}

  template <Transport T>
  Status check(const T& t) {
    if (stop_requested()) return Status::interrupted;
    const char* f = t.failure();
    uint64_t now = c_.clk.ticks();
    if (now < next_ && !f) return Status::ok;
    next_ = now + interval_;
    const Ctrl::Peek peek = c_.ctrl.peek();
    if (remote_heard_.since_last(c_.ctrl, peek)) heard_ = now;
    // A remote end that finished closes its data connection right after saying so
    // on the control channel: its message wins over our transport's failure.
    switch (peek) {
      case Ctrl::Peek::closed:
        c_.failure = "the other end closed the control channel (process ended?)";
        return Status::peer_lost;
      case Ctrl::Peek::message:
        return Status::ctrl_pending;
      case Ctrl::Peek::nothing:
        break;
    }
    if (f) {
      c_.failure = f;
      return Status::failed;
    }
    if (watch_ && now - heard_ > silence_) {
      c_.failure = "the other end stopped answering (no heartbeat for " +
                   std::to_string(static_cast<int>(c_.clk.to_ns(static_cast<double>(now - heard_)) / 1e9)) + " s)";
      return Status::peer_lost;
    }
    return Status::ok;
  }

  // For busy loops: heartbeats and a lost remote end, as check(); a pending
  // control message is left for the loop's own logic.
  template <uint32_t Stride = kTickStride, Transport T>
  Status tick(const T& t) {
    if (++ticks_ % Stride) return Status::ok;
    const uint64_t now = c_.clk.ticks();
    if (now < next_tick_) return Status::ok;
    next_tick_ = now + tick_interval_;
    Status s = check(t);
    return s == Status::ctrl_pending ? Status::ok : s;
  }

  void remote_finished() { watch_ = false; }

 private:
  Ctx& c_;
  uint64_t interval_, tick_interval_, silence_;
  uint64_t next_ = 0, next_tick_ = 0;
  uint64_t heard_;  // ticks when the other end was last heard
  RemoteHeard remote_heard_;
  uint32_t ticks_ = 0;
  bool watch_ = true;
};

constexpr uint32_t kGuardSpins = 1024;
// Empty polls before `pause` enters the spin: a message that comes soon is
// seen at once (pause costs tens of ns per poll on recent x86); a long wait
// still leaves the sibling hyperthread its share.
constexpr uint32_t kHotSpins = 2048;

// Waits for the next message until `deadline` (ticks). Busy: spin on
// poll_recv; event: sleep in wait_recv slices. Returns ok with `msg` filled,
// or why it stopped waiting.
template <Poll P, Transport T>
[[gnu::always_inline]] inline Status recv_next(T& t, RecvMsg& m, Guard& g, const Clock& clk,
                                               uint64_t deadline = UINT64_MAX) {
  if constexpr (P == Poll::busy) {
    for (uint32_t spins = 0, total = 0;; ++spins) {
      if (t.poll_recv(m)) return Status::ok;
      if (spins == kGuardSpins) {
        spins = 0;
        if (Status s = g.check(t); s != Status::ok) return s;
        if (deadline != UINT64_MAX && clk.ticks() >= deadline) return Status::timeout;
      }
      if (total < kHotSpins) ++total;
      else cpu_relax();
    }
  } else {
    for (;;) {
      if (wait_for_msg(t, m, g.ctx())) return Status::ok;
      if (Status s = g.check(t); s != Status::ok) return s;
      if (deadline != UINT64_MAX && clk.ticks() >= deadline) return Status::timeout;
    }
  }
}

// Send completions reaped while waiting for room go to `on_comp(wr_id)`.
struct IgnoreCompletions {
  void operator()(uint64_t) const {}
};

// Reaps up to a batch of send completions; returns how many.
template <Transport T, class OnComp>
[[gnu::always_inline]] inline int reap_send_comps(T& t, OnComp& on_comp) {
  uint64_t ids[16];
  int n = t.poll_send_comp(ids, 16);
  for (int i = 0; i < n; ++i) on_comp(ids[i]);
  return n;
}

// Posts one send, waiting for room as the send side's poll mode says
// (--poll-send: a branch here, off the path of a post that finds room).
template <Poll P, Transport T, class OnComp = IgnoreCompletions>
[[gnu::always_inline]] inline Status send_one(T& t, const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id,
                                              Guard& g, OnComp on_comp = {}) {
  if (t.post_send(buf, len, flags, wr_id)) [[likely]] return Status::ok;
  const bool sleep = g.ctx().p.poll_send == Poll::event;
  for (uint32_t spins = 0;; ++spins) {
    if (sleep) t.wait_send();
    else cpu_relax();
    reap_send_comps(t, on_comp);
    if (t.post_send(buf, len, flags, wr_id)) return Status::ok;
    if (sleep || spins >= kGuardSpins) {
      spins = 0;
      if (Status s = g.check(t); s != Status::ok) return s;
    }
  }
}

// The server of a one-sided point (read, atomics) has nothing to poll: it
// sleeps on the control channel, as perftest's server does, rather than
// spin on a CPU the device's work (rxe: the kernel's) may need. Returns
// ctrl_pending when the client's next message is there, or why it stopped.
template <Transport T>
Status sleep_until_ctrl(T& t, Ctx& c) {
  Guard g(c);
  for (;;) {
    pollfd pfd{c.ctrl.fd(), POLLIN, 0};
    ::poll(&pfd, 1, kWaitSliceMs);
    if (Status st = g.check(t); st != Status::ok) return st;
  }
}

// Every message of this point, both ways, has `size` bytes (lat, bw). A
// transport may then carry no length (verbs' plain write: the write is the
// payload alone, as perftest's); the point's content beyond what the
// experiment reads is the transport's. Both ends call it before the point.
template <Transport T>
void fix_message_size(T& t, uint64_t size) {
  if constexpr (requires { t.fix_message_size(uint32_t{}); }) t.fix_message_size(static_cast<uint32_t>(size));
}

// Before a send's timestamp: its payload copied where the device reads it
// (transport.hpp's prepare_send), so that the timed post copies none.
template <Transport T>
[[gnu::always_inline]] inline void prepare_send(T& t, const void* buf, uint32_t len, uint32_t flags) {
  if constexpr (requires { t.prepare_send(buf, len, flags); }) t.prepare_send(buf, len, flags);
}

template <Transport T>
bool tx_idle(const T& t) {
  if constexpr (requires { t.tx_idle(); }) return t.tx_idle();
  return true;
}

// Until every posted byte has left the transport (a sender that announces
// its count while tcp still holds the tail of a send would wait forever).
// Only for ends that do not receive meanwhile; bw flushes in its own loop.
template <Poll P, Transport T>
Status flush_sends(T& t, Guard& g) {
  IgnoreCompletions none;
  const bool sleep = g.ctx().p.poll_send == Poll::event;
  for (uint32_t spins = 0; !tx_idle(t); ++spins) {
    reap_send_comps(t, none);
    if (tx_idle(t)) break;
    if (sleep) t.wait_send();
    else cpu_relax();
    if (sleep || spins >= kGuardSpins) {
      spins = 0;
      if (Status s = g.check(t); s != Status::ok && s != Status::ctrl_pending) return s;
    }
  }
  return Status::ok;
}

// Sequence numbers ride in the payload only where the transport may lose or
// reorder (the receiver cannot count on arrival order).
inline void put_seq(std::byte* buf, uint64_t len, uint32_t seq) {
  std::memcpy(buf, &seq, len < 4 ? len : 4);
}
inline uint32_t get_seq(const std::byte* buf, uint64_t len) {
  uint32_t seq = 0;
  std::memcpy(&seq, buf, len < 4 ? len : 4);
  return seq;
}

// The other end's clock, sent with its timestamps so they can be put on ours.
struct ClockInfo {
  double ns_per_tick;
  double mono_at_tick0;   // its CLOCK_MONOTONIC_RAW ns at tick 0
  static ClockInfo of(const Clock& c) { return {c.ns_per_tick(), c.ticks_to_mono_ns(0)}; }
  double mono_ns(uint64_t t) const { return mono_at_tick0 + static_cast<double>(t) * ns_per_tick; }
};

// The other end's clock must map its stamps to finite times.
inline void check_clock_info(const ClockInfo& ci, const char* what) {
  if (!(ci.ns_per_tick > 0 && ci.ns_per_tick < 1e6) || !std::isfinite(ci.mono_at_tick0))
    runtime_error(std::string(what) + ": the other end's report carries an impossible clock");
}

// After a one-way point the receiver answers with a fixed header (with a
// `total` field) followed by one receive stamp per message (0 = never
// arrived), and for oneway with send_stamps 1 a second array after it. The receiver builds it before the run, pages touched.
template <class Header>
std::string stamp_report(uint64_t total, uint64_t** stamps) {
  std::string blob(sizeof(Header) + total * sizeof(uint64_t), '\0');
  for (size_t i = 0; i < blob.size(); i += 4096) blob[i] = 0;
  *stamps = reinterpret_cast<uint64_t*>(blob.data() + sizeof(Header));
  return blob;
}

template <class Header>
const uint64_t* read_stamp_report(const std::string& blob, uint64_t total, Header* h, const char* what) {
  if (blob.size() < sizeof *h) runtime_error(std::string(what) + ": short report from the other end");
  std::memcpy(h, blob.data(), sizeof *h);
  uint64_t arrays = 1;  // oneway's report may carry a second array (send_stamps)
  if constexpr (requires { h->send_stamps; }) {
    if (h->send_stamps > 1) runtime_error(std::string(what) + ": the other end's report has an impossible layout");
    arrays += h->send_stamps;
  }
  if (h->total != total || blob.size() != sizeof *h + arrays * total * sizeof(uint64_t))
    runtime_error(std::string(what) + ": the other end's report does not match this run (version mismatch?)");
  check_clock_info(h->clock, what);
  if (h->received > total) runtime_error(std::string(what) + ": the other end's report counts more arrivals than were sent");
  return reinterpret_cast<const uint64_t*>(blob.data() + sizeof *h);
}

// The other end's count at the end of a point (how many it sent), checked.
inline uint64_t recv_count(Ctrl& ctrl, const char* what, uint64_t max = UINT64_MAX) {
  return parse_remote_u64(ctrl.recv(CtrlType::end_point, what), what, max);
}

// The receiving end of a one-way point (oneway, stream, check): hands each
// message to `take(m)` (which releases it; not ok ends the point) until the
// client's sent count (`count_what`) has come and `distinct()` messages
// match it, or until what was in flight had its drain time to come
// (Status::timeout: the rest is lost). A duplicate must not end the wait for
// a straggler, so `distinct()` leaves duplicates out.
template <Poll P, Transport T, class Take, class Distinct>
[[gnu::always_inline]] inline Status receive_counted(T& t, Ctx& c, Guard& g, const char* count_what, Take&& take,
                                                     Distinct&& distinct) {
  const uint64_t drain = c.clk.ns_to_ticks((c.caps.reliable ? c.p.timeout_ms : c.p.loss_timeout_ms) * 1e6);
  uint64_t expected = UINT64_MAX, deadline = UINT64_MAX;
  while (distinct() < expected) {
    RecvMsg m;
    Status st = recv_next<P>(t, m, g, c.clk, deadline);
    if (st == Status::ok) {
      if ((st = take(m)) != Status::ok) return st;
      continue;
    }
    if (st != Status::ctrl_pending) return st;
    expected = recv_count(c.ctrl, count_what);
    g.remote_finished();
    deadline = c.clk.ticks() + drain;
  }
  return Status::ok;
}

// --samples: raw keeps every latency (.npy under --out; exact percentiles),
// hist only a log-linear histogram (3 significant digits, nearest-rank
// percentiles, bounded memory), encoded in the point so runs and hosts merge.
inline bool keep_raw(const Params& p, bool hist_by_default = false) {
  return p.samples == "raw" || (p.samples == "auto" && !hist_by_default);
}

inline JsonObj histogram_info(const HistogramConfig& cfg) {
  JsonObj o;
  o.add("digits", cfg.digits).add("lowest_ns", cfg.lowest).add("highest_ns", cfg.highest)
      .add("percentiles", "nearest rank (HdrHistogram)");
  return o;
}

// Says once per point how its latencies were kept.
inline void add_samples_kind(PointOut& out, bool raw) {
  out.fields.add("samples_kind", raw ? "raw" : "hist");
  if (!raw) out.fields.add("histogram", histogram_info(HistogramConfig{}));
}

// A histogram's encoding and, beside it, the values the encoding cannot
// hold (below 0: a one-way figure on a clock that stepped or a timer that
// woke early; above its highest), so its counts add up to the point's.
inline void add_hist(JsonObj& f, const std::string& key, const Histogram& h) {
  f.add(key, h.encode()).add(key + "_below", h.below()).add(key + "_above", h.above());
}

// A latency figure of a point, `name` (e.g. "latency_ns"): its summary, and
// its samples as the run asked: the raw array, or NAME_hist (HdrHistogram's
// encoding, values outside it counted in the summary only).
inline void add_latency(PointOut& out, const Params& p, const std::string& name, std::vector<double>&& ns) {
  if (keep_raw(p)) {
    out.fields.add(name, to_json(summarize(ns.data(), ns.size())));
    out.arrays.emplace_back(name, std::move(ns));
    return;
  }
  Histogram h;
  for (double v : ns) h.record(std::llround(v));
  out.fields.add(name, to_json(summarize(h)));
  add_hist(out.fields, name.substr(0, name.rfind("_ns")) + "_hist", h);
}

const char* status_name(Status s);

}  // namespace fm
