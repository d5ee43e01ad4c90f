// stream: the thesis' node-type benchmark. A source emits samples on an
// absolute schedule (step k is due at t0 + k/rate); a sink stamps each on
// arrival. A late source skips the step and counts it missed: it never
// bunches samples to catch up. Latency is receive time minus the step's
// scheduled time, so a late source shows in the figures instead of hiding.
#pragma once
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "experiment/common.hpp"
#include "experiment/experiment.hpp"
#include "experiment/oneway.hpp"
#include "experiment/stream_sink.hpp"
#include "fabmeter/samples.hpp"
#include "fabmeter/schedule.hpp"
#include "fabmeter/stats.hpp"

namespace fm {

// On the wire: this header, then `values` float64.
struct SampleHeader {
  uint64_t seq;        // step index
  uint64_t origin;     // scheduled time of the step, source ticks
  uint32_t values;
  uint32_t flags;
};
static_assert(sizeof(SampleHeader) == 24);

inline uint64_t stream_size(uint64_t values) { return sizeof(SampleHeader) + 8 * values; }

inline uint64_t stream_steps(const Params& p, uint64_t rate) {
  if (p.count) return p.count;
  double sec = p.duration > 0 ? p.duration : 1.0;
  return std::max<uint64_t>(1, static_cast<uint64_t>(sec * static_cast<double>(rate)));
}

inline uint64_t stream_warmup(const Params& p, uint64_t rate) {
  return p.warmup >= 0 ? static_cast<uint64_t>(p.warmup) : default_step_warmup(rate);
}

// Waits for the schedule: spinning on the TSC, on a periodic timerfd, or in
// clock_nanosleep to an absolute CLOCK_MONOTONIC time.
class StepTimer {
 public:
  StepTimer(const Clock& clk, const std::string& kind, const StepSchedule& schedule)
      : clk_(clk), kind_(kind), s_(schedule) {
    if (kind_ == "tsc") return;
    // CLOCK_MONOTONIC at t0 (the tick clock is MONOTONIC_RAW based; over a
    // run the two drift by ppm at most).
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double now_ns = static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec);
    mono_t0_ns_ = now_ns + clk_.to_ns(static_cast<double>(s_.t0) - static_cast<double>(clk_.ticks()));
    if (kind_ == "timerfd") {
      fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
      if (fd_ < 0) sys_error("timerfd_create");
      double period_ns = clk_.to_ns(s_.period);
      itimerspec its{};
      its.it_value = to_ts(mono_t0_ns_);
      its.it_interval = to_ts(period_ns);
      if (timerfd_settime(fd_, TFD_TIMER_ABSTIME, &its, nullptr) != 0) sys_error("timerfd_settime");
    }
  }
  ~StepTimer() {
    if (fd_ >= 0) ::close(fd_);
  }

  const StepSchedule& schedule() const { return s_; }
  uint64_t due(uint64_t k) const { return s_.due(k); }

  void wait(uint64_t k) {
    const uint64_t d = due(k);
    if (kind_ == "tsc") {
      s_.spin_until_due(clk_, k);
    } else if (kind_ == "timerfd") {
      if (clk_.ticks() >= d) return;  // already due: the timer fired while we worked
      // A read returns at once while expirations of steps already past are
      // pending: read again until this step's. Half a period of slack, as
      // CLOCK_MONOTONIC and the tick clock may differ by a little.
      const uint64_t early = d - std::min<uint64_t>(d, static_cast<uint64_t>(s_.period / 2));
      do {
        uint64_t expirations;
        if (::read(fd_, &expirations, sizeof expirations) < 0 && errno != EINTR) sys_error("read timerfd");
      } while (clk_.ticks() < early && !stop_requested());
    } else {
      timespec ts = to_ts(mono_t0_ns_ + clk_.to_ns(static_cast<double>(d - s_.t0)));
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
  }

 private:
  static timespec to_ts(double ns) {
    return {static_cast<time_t>(ns / 1e9), static_cast<long>(std::fmod(ns, 1e9))};
  }
  const Clock& clk_;
  std::string kind_;
  StepSchedule s_;
  double mono_t0_ns_ = 0;
  int fd_ = -1;
};

// Fields of the sink's report beyond the stamp-report header's.
inline void check_sink_report(const SinkReport& report) {
  if (!std::isfinite(report.recv_span_ns) || report.recv_span_ns < 0 || !std::isfinite(report.write_busy_ns) ||
      !std::isfinite(report.csv_ns) || report.to_file > 1)
    runtime_error("stream: malformed sink report from the other end");
}

template <Transport T, Poll P>
Status stream_client(T& t, Ctx& c, uint64_t rate, uint64_t values, PointOut& out) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t steps = stream_steps(p, rate), warmup = stream_warmup(p, rate);
  const uint64_t total = warmup + steps;
  const uint64_t size = stream_size(values);
  SampleBuf t_subm(total);  // 0 = step missed
  PayloadBuf buf(size);
  auto* hdr = reinterpret_cast<SampleHeader*>(buf.data());
  auto* vals = reinterpret_cast<double*>(buf.data() + sizeof(SampleHeader));
  Guard g(c);
  uint64_t sent = 0, missed_measured = 0, sent_in_warmup = UINT64_MAX;
  Status st = Status::ok;

  StepTimer timer(clk, p.stream.timer, c.step0_ns ? StepSchedule::starting_at(clk, rate, c.step0_ns)
                                                   : StepSchedule::starting_soon(clk, rate));
  for (uint64_t k = 0; k < total;) {
    if (stop_requested()) { st = Status::interrupted; break; }
    if (k >= warmup && sent_in_warmup == UINT64_MAX) c.cpu.begin(), sent_in_warmup = sent;  // before the wait: off the step's time
    timer.wait(k);
    k = timer.schedule().catch_up(k, clk.ticks(), warmup, total, missed_measured);
    if (k >= total) break;
    hdr->seq = k;
    hdr->origin = timer.due(k);
    hdr->values = static_cast<uint32_t>(values);
    hdr->flags = 0;
    for (uint64_t j = 0; j < values; ++j) vals[j] = stream_value(k, j);
    // ---- hot path ----
    t_subm[k] = clk.ticks();
    // The last step asks for a completion: flush_sends then covers every
    // send (not where the last steps are missed: tx_idle sees up to the last
    // signaled send then).
    const uint32_t flags = k + 1 == total ? uint32_t{kSendSignaled} : 0u;
    if ((st = send_one<P>(t, buf.data(), static_cast<uint32_t>(size), flags, k, g)) != Status::ok) break;
    ++sent;
    ++k;
    if ((st = g.tick<1>(t)) != Status::ok) break;  // every step: at low rates steps are far apart
  }
  if (st == Status::ctrl_pending) st = Status::ok;  // nothing is expected from the server mid-stream
  if (st == Status::ok) st = flush_sends<P>(t, g);
  const uint64_t sent_measured_now = sent - std::min(sent, sent_in_warmup);
  c.cpu.end(sent_measured_now, "message", sat_mul(sent_measured_now, size));
  if (st != Status::ok) {
    out.partial = true;
    out.fields.add("sent", sent);
    return st;
  }
  c.ctrl.send(CtrlType::end_point, std::to_string(sent));
  std::string blob = c.ctrl.recv(CtrlType::exchange, "stream sink report");
  SinkReport report;
  const uint64_t* t_recv = read_stamp_report(blob, total, &report, "stream");
  check_sink_report(report);
  JsonObj sink = report.sink_json();
  if (report.to_file) {
    const std::string path = p.stream.sink.substr(5);  // "file:PATH", on this (the client's) side
    SinkCopy copy = receive_sink_file(c.ctrl, path, report.file_bytes, sink_csv_max_bytes(total, values));
    sink.add("path", path).add("written_on", "server, sent back over the control channel")
        .add("sent_back_s", copy.seconds);
  }

  if (c.sync.probed) probe_clock(c);
  const ClockFit& fit = c.sync.fit;
  const double deadline_ns = (p.stream.deadline_us > 0 ? p.stream.deadline_us * 1e3 : 1e9 / static_cast<double>(rate));
  std::vector<double> latency, late;
  std::string step_late = "[", step_latency = "[";  // --per-step: every measured step, null where none
  const auto put = [](std::string& list, const double* ns) {
    if (list.size() > 1) list += ',';
    list += ns ? std::to_string(std::llround(*ns)) : "null";
  };
  uint64_t sent_measured = 0, lost = 0, warmup_lost = 0, over_deadline = 0;
  double earliest = std::numeric_limits<double>::infinity();  // arrival - send, by the fit
  for (uint64_t k = 0; k < warmup; ++k) warmup_lost += t_subm[k] && !t_recv[k];
  for (uint64_t k = warmup; k < total; ++k) {
    if (!t_subm[k]) {  // missed step: never sent
      if (p.stream.per_step) put(step_late, nullptr), put(step_latency, nullptr);
      continue;
    }
    ++sent_measured;
    // Signed: a timer may wake (and the step go out) before its due time.
    late.push_back(clk.to_ns(static_cast<double>(static_cast<int64_t>(t_subm[k] - timer.due(k)))));
    if (p.stream.per_step) put(step_late, &late.back());
    if (!t_recv[k]) {
      if (p.stream.per_step) put(step_latency, nullptr);
      ++lost;
      continue;
    }
    double ns = c.sync.probed ? fit.to_local(report.clock.mono_ns(t_recv[k])) - clk.ticks_to_mono_ns(timer.due(k))
                            : clk.to_ns(static_cast<double>(static_cast<int64_t>(t_recv[k] - timer.due(k))));
    if (c.sync.probed) earliest = std::min(earliest, ns - clk.to_ns(static_cast<double>(static_cast<int64_t>(t_subm[k] - timer.due(k)))));
    if (p.stream.per_step) put(step_latency, &ns);
    latency.push_back(ns);
    over_deadline += ns > deadline_ns;
  }
  c.sync.check_arrival(earliest);
  const uint64_t steps_measured = total - warmup;
  out.fields.add("rate_hz", rate).add("values", values)
      .add("iterations", static_cast<uint64_t>(latency.size()))
      .add("achieved_rate_hz", report.recv_span_ns > 0 && report.received > 1
                                   ? static_cast<double>(report.received - 1) / report.recv_span_ns * 1e9
                                   : 0.0)
      .add("sent", sent_measured).add("received", static_cast<uint64_t>(latency.size()))
      .add("missed_steps", missed_measured)
      .add("missed_pct", 100.0 * static_cast<double>(missed_measured) / static_cast<double>(steps_measured))
      .add("lost", lost).add("warmup_lost", warmup_lost).add("duplicated", report.duplicated)
      .add("reordered", report.reordered).add("corrupted", report.corrupted)
      .add("deadline_us", deadline_ns / 1e3)
      .add("deadline_miss_pct",
           latency.empty() ? 0.0 : 100.0 * static_cast<double>(over_deadline) / static_cast<double>(latency.size()))
      .add("latency_kind", "one-way (receive - scheduled step time)")
      .add("source_late_ns", to_json(summarize(late.data(), late.size())))
      .add("timer", p.stream.timer).add("sink", sink).add("clock", c.sync.json());
  if (c.step0_ns) out.fields.add("step0_mono_ns", c.step0_ns);
  if (p.stream.per_step) out.fields.add_raw("step_late_ns", step_late + "]").add_raw("step_latency_ns", step_latency + "]");
  add_latency(out, p, "latency_ns", std::move(latency));
  add_samples_kind(out, keep_raw(p));
  return st;
}

// One message at the sink, counted into r. The header is read only when the
// message holds one (the sink checks the rest of the length): a short or
// lying sample never makes us read past its end.
[[gnu::always_inline]] inline void sink_arrival(const std::byte* data, uint32_t len, uint64_t now, uint64_t total,
                                                uint64_t* t_recv, Sink& sink, SinkReport& r, uint64_t& last_seq) {
  SampleHeader h;
  if (len < sizeof h) {
    ++r.corrupted;
    return;
  }
  std::memcpy(&h, data, sizeof h);
  if (h.seq < total && !t_recv[h.seq]) {
    t_recv[h.seq] = now;
    ++r.received;
    r.corrupted += !sink.take(h.seq, h.origin, now, data + sizeof h, h.values, len);
  } else {
    ++r.duplicated;
  }
  r.reordered += h.seq < last_seq;
  last_seq = h.seq;
}

template <Transport T, Poll P>
Status stream_server(T& t, Ctx& c, uint64_t rate, uint64_t values) {
  const Params& p = c.p;
  const Clock& clk = c.clk;
  const uint64_t warmup = stream_warmup(p, rate), total = warmup + stream_steps(p, rate);
  uint64_t* t_recv;
  std::string blob = stamp_report<SinkReport>(total, &t_recv);
  Sink sink(p.stream.sink, clk, values);
  Guard g(c);
  SinkReport r{};
  r.total = total;
  uint64_t arrivals = 0, last_seq = 0, first = 0, last = 0;
  // Arrivals before the first measured step's: the client may skip steps, so the sequence tells.
  uint64_t warm_arrivals = warmup ? UINT64_MAX : 0;
  if (!warmup) c.cpu.begin();
  const auto take = [&](const RecvMsg& m) __attribute__((always_inline)) {
    // ---- hot path ----
    const uint64_t now = clk.ticks();
    sink_arrival(m.data, m.len, now, total, t_recv, sink, r, last_seq);
    t.release(m);
    if (!first) first = now;
    last = now;
    if (++arrivals, warm_arrivals == UINT64_MAX && last_seq >= warmup) c.cpu.begin(), warm_arrivals = arrivals - 1;
    return g.tick(t);
  };
  // Status::timeout: the rest is lost.
  if (const Status st = receive_counted<P>(t, c, g, "stream sent count", take, [&] { return arrivals - r.duplicated; });
      st != Status::ok && st != Status::timeout)
    return st;
  const uint64_t measured = arrivals - std::min(arrivals, warm_arrivals);
  c.cpu.end(measured, "message", sat_mul(measured, stream_size(values)));
  r.recv_span_ns = clk.to_ns(static_cast<double>(last - first));
  r.clock = ClockInfo::of(clk);
  sink.finish(r);
  std::memcpy(blob.data(), &r, sizeof r);
  c.ctrl.send(CtrlType::exchange, blob);
  if (r.to_file) send_sink_file(c.ctrl, sink.path(), r.file_bytes);
  if (c.sync.probed) probe_clock(c);
  return Status::ok;
}

// A file sink's in-process ring, its two 4 MiB chunk buffers and the send-back chunk.
constexpr double kFileSinkBytes = (64.0 + 8.0 + 1.0) * (1 << 20);

struct StreamExperiment : ExperimentDefaults {
  static constexpr const char* name = "stream";
  static constexpr bool kRemoteClock = true;
  static void validate(const Params& p) {
    validate_rates(p);
    if (p.stream.values.empty() || p.stream.values.size() > 64) usage_error("--values takes 1 to 64 values");
    for (uint64_t v : p.stream.values)
      if (v < 1 || v > (1u << 20)) usage_error("--values must be between 1 and 1048576");
    if (p.stream.per_step)
      for (uint64_t rate : p.rate)
        if (stream_steps(p, rate) + stream_warmup(p, rate) > StreamOptions::kMaxPerStep)
          usage_error("--per-step lists at most " + std::to_string(StreamOptions::kMaxPerStep) +
                      " steps a point, warm-up included; " + std::to_string(rate) + " Hz makes " +
                      std::to_string(stream_steps(p, rate) + stream_warmup(p, rate)) +
                      " (lower --count, --duration or --warmup)");
  }
  // The grid of rates x sample widths.
  static std::vector<Point> plan(const Params& p, const Caps&) {
    std::vector<Point> plan;
    for (uint64_t rate : p.rate)
      for (uint64_t values : p.stream.values)
        plan.push_back({.size = stream_size(values), .rate = rate, .values = values,
                        .iterations = stream_steps(p, rate), .warmup = stream_warmup(p, rate)});
    return plan;
  }
  static uint64_t report_bytes(const Params& p, const Point& pt) {
    const uint64_t stamps = stamp_report_bytes<SinkReport>(sat_add(pt.warmup, pt.iterations));
    // A file sink's CSV comes back in chunks after its point's report.
    return writes_file(p) ? std::max<uint64_t>(stamps, kSinkChunk) : stamps;
  }
  static void check_caps(const Params& p, const Caps& caps) {
    for (uint64_t values : p.stream.values)
      if (stream_size(values) > caps.max_msg_size)
        usage_error(p.transport + ": a sample of " + std::to_string(values) + " values (" +
                    std::to_string(stream_size(values)) + " B) exceeds the transport's maximum message of " +
                    std::to_string(caps.max_msg_size) + " B");
  }
  static bool writes_file(const Params& p) { return p.stream.sink != "memory"; }
  static PointCost cost(const Params& p, const Caps&, const Point& pt) {
    const double rate = static_cast<double>(pt.rate);
    const double steps =
        p.count ? static_cast<double>(p.count) : std::max(1.0, (p.duration > 0 ? p.duration : 1.0) * rate);
    const double total = steps + static_cast<double>(pt.warmup);
    return {8 * total + (writes_file(p) ? kFileSinkBytes : 0),  // the receive stamps, the file sink
            total / rate, 8 * total};                              // the client's send stamps
  }
  template <Transport T, Poll P>
  static Status client(T& t, Ctx& c, const Point& pt, PointOut& out) {
    return stream_client<T, P>(t, c, pt.rate, pt.values, out);
  }
  template <Transport T, Poll P>
  static Status server(T& t, Ctx& c, const Point& pt, PointOut&) {
    return stream_server<T, P>(t, c, pt.rate, pt.values);
  }
};

}  // namespace fm
