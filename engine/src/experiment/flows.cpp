// --flows: the flow threads, the session thread's relay of their control
// frames, and the client's merge of what they measured (flows.hpp).
#include "experiment/flows.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

#include "fabmeter/clock.hpp"
#include "fabmeter/cpu.hpp"

namespace fm {

double jain_index(const std::vector<double>& x) {
  double sum = 0, squares = 0;
  for (double v : x) {
    sum += v;
    squares += v * v;
  }
  return squares > 0 ? sum * sum / (static_cast<double>(x.size()) * squares) : std::nan("");
}

namespace {

// What one flow thread left behind.
struct FlowEnd {
  Status status = Status::ok;
  std::string failure;
  PointOut out;
  int cpu = -1;              // where it ran, read from the kernel at its end; -1: unpinned
  CpuWindow window;          // its measured window (the process's CPU: every flow's)
  int64_t began_ns = 0, ended_ns = 0;  // CLOCK_MONOTONIC around its loop (warm-up included)
  uint64_t ended_seq = 0;    // order in which failing flows ended (the first is the cause)
  std::exception_ptr usage;  // a refusal (usage error) thrown in the flow: the session's to report
};

// A flow's frame crosses the control channel as an exchange frame
// "FLOW TYPE BODY", FLOW and TYPE in decimal (and kFlowsDone, below).
std::string tag_frame(uint32_t flow, CtrlType type, const std::string& body) {
  return std::to_string(flow) + " " + std::to_string(static_cast<unsigned>(type)) + " " + body;
}

// The other end's tagged frame, checked: a flow of this point, a type a flow sends.
struct Tagged {
  uint32_t flow;
  CtrlType type;
  std::string_view body;
};
Tagged untag_frame(std::string_view frame, uint32_t flows) {
  const size_t a = frame.find(' ');
  const size_t b = a == std::string_view::npos ? a : frame.find(' ', a + 1);
  if (b == std::string_view::npos) runtime_error("flows: malformed frame from the other end: '" + remote_excerpt(frame) + "'");
  Tagged t;
  t.flow = static_cast<uint32_t>(parse_remote_u64(frame.substr(0, a), "flow number", flows - 1));
  const uint64_t type = parse_remote_u64(frame.substr(a + 1, b - a - 1), "flow frame type", kCtrlTypeMax);
  t.type = static_cast<CtrlType>(type);
  if (t.type != CtrlType::end_point && t.type != CtrlType::exchange)
    runtime_error("flows: the other end's flow sent a frame of type " + std::to_string(type) + " (only end_point, exchange)");
  t.body = frame.substr(b + 1);
  return t;
}

// The type byte of the frame waiting on a flow's channel (peek() said one
// is there; our own thread wrote it): picks the recv() that checks it.
uint8_t waiting_type(const Ctrl& ch) {
  unsigned char hdr[kFrameHeaderBytes];
  if (::recv(ch.fd(), hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof hdr))
    runtime_error("flows: a frame header is short");
  return hdr[4];
}

// How the relay ended, beside the flows' own ends.
struct RelayEnd {
  std::exception_ptr error;  // a frame from the other end that could not be read (a refusal, a failure, an invalid frame)
  bool remote_closed = false;  // the other end closed the control channel: every flow's end follows from it
  bool remote_failed = false;  // the other end's flows ended early (kFlowsDone 1) and ended ours
};

// Each session thread ends its relay with kFlowsDone (then 0: its flows
// ended ok, 1: not) once all its flows have ended, after every frame of
// theirs, and leaves the relay once it has the other end's too: so neither reads
// a frame of the session's next step (the next point's barrier) as a
// flow's, and a failure on one end ends the other end's flows.
constexpr std::string_view kFlowsDone = "done ";

// The session thread's part while the flows run: relays frames both ways
// and the other end's heartbeats, ends every flow when one fails or the other end
// goes. Returns when every flow's channel is closed (its thread is ending)
// and the other end's flows are done too.
RelayEnd relay(Ctx& c, std::vector<Ctrl>& ch, const std::atomic<bool>& failing) {
  const uint32_t n = static_cast<uint32_t>(ch.size());
  std::vector<bool> open(n, true);
  uint32_t live = n;
  bool ctrl_open = true, ended = false, said_done = false, remote_done = false;
  RelayEnd end;
  uint64_t heard = c.ctrl.frames_in();
  auto end_all = [&] {
    if (ended) return;
    ended = true;
    for (uint32_t i = 0; i < n; ++i)
      if (open[i]) ::shutdown(ch[i].fd(), SHUT_RDWR);
  };
  auto give_up = [&](std::exception_ptr e) {
    if (!end.error) end.error = e;
    ctrl_open = false;
    end_all();
  };
  std::vector<pollfd> fds;
  while (live || (ctrl_open && !remote_done)) {
    fds.clear();
    fds.push_back({ctrl_open && !remote_done ? c.ctrl.fd() : -1, POLLIN, 0});
    for (uint32_t i = 0; i < n; ++i) fds.push_back({open[i] ? ch[i].fd() : -1, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), kWaitSliceMs) < 0 && errno != EINTR) sys_error("flows: poll");
    if (fds[0].revents) {
      try {
        const Ctrl::Peek peek = c.ctrl.peek();
        if (peek == Ctrl::Peek::closed) {
          ctrl_open = false;
          end.remote_closed = true;
          end_all();
        } else if (peek == Ctrl::Peek::message) {
          const std::string frame = c.ctrl.recv(CtrlType::exchange, "a flow's frame");
          if (std::string_view(frame).substr(0, kFlowsDone.size()) == kFlowsDone) {
            remote_done = true;
            if (parse_remote_u64(std::string_view(frame).substr(kFlowsDone.size()), "flows' end", 1) && !ended) {
              end.remote_failed = !failing.load(std::memory_order_acquire);
              end_all();
            }
          } else if (const Tagged t = untag_frame(frame, n); open[t.flow] && !ended) {
            try {
              ch[t.flow].send(t.type, t.body);
            } catch (const Error&) {  // the flow ended meanwhile: nobody reads it
            }
          }
        }
      } catch (const Error&) {
        give_up(std::current_exception());
      }
    }
    // The other end's heartbeats (consumed by peek) go on to every flow's Guard.
    if (c.ctrl.frames_in() != heard) {
      heard = c.ctrl.frames_in();
      for (uint32_t i = 0; i < n; ++i)
        if (open[i]) ch[i].send_heartbeat();
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (!open[i] || !fds[i + 1].revents) continue;
      const Ctrl::Peek peek = ch[i].peek();
      if (peek == Ctrl::Peek::closed) {
        open[i] = false;
        --live;
        if (failing.load(std::memory_order_acquire)) end_all();
        continue;
      }
      if (peek != Ctrl::Peek::message) continue;
      try {
        const auto type = static_cast<CtrlType>(waiting_type(ch[i]));
        const std::string body = ch[i].recv(type, "a flow's frame");
        if (ctrl_open) c.ctrl.send(CtrlType::exchange, tag_frame(i, type, body));
      } catch (const Error&) {
        give_up(std::current_exception());
      }
    }
    if (!live && !said_done && ctrl_open) {
      said_done = true;
      try {
        c.ctrl.send(CtrlType::exchange, std::string(kFlowsDone) + (failing.load() || ended ? "1" : "0"));
      } catch (const Error&) {
        give_up(std::current_exception());
      }
    }
  }
  return end;
}

nlohmann::json fields_of(const PointOut& out) {
  return nlohmann::json::parse(out.fields.str(), nullptr, false);
}

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

uint64_t count(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

JsonObj flow_entry(uint32_t i, const FlowEnd& e) {
  JsonObj o;
  o.add("flow", static_cast<uint64_t>(i));
  if (e.cpu >= 0) o.add("cpu", e.cpu);
  else o.add_raw("cpu", "null");
  if (e.status != Status::ok) o.add("status", status_name(e.status));
  return o;
}

// How much the flows ran at once: the time all their loops ran together
// over the time any ran (warm-up included). Near 1, the sum of their rates
// is a rate they reached together; far below (flows that took turns on a
// shared CPU), it is not.
void add_overlap(JsonObj& f, const std::vector<FlowEnd>& ends) {
  int64_t first = INT64_MAX, last = INT64_MIN, all_began = INT64_MIN, first_ended = INT64_MAX;
  for (const FlowEnd& e : ends) {
    first = std::min(first, e.began_ns);
    last = std::max(last, e.ended_ns);
    all_began = std::max(all_began, e.began_ns);
    first_ended = std::min(first_ended, e.ended_ns);
  }
  const double span = static_cast<double>(last - first);
  f.add("overlap", span > 0 ? static_cast<double>(std::max<int64_t>(0, first_ended - all_began)) / span : 0.0);
}

void add_jain(JsonObj& f, const std::vector<double>& rates) {
  const double j = jain_index(rates);
  if (std::isfinite(j)) f.add("jain_index", j);
  else f.add_raw("jain_index", "null");
}

// lat: each flow's round trips, their sum, and one summary over every
// flow's round trips (their raw samples merged).
void merge_lat(const Point& pt, std::vector<FlowEnd>& ends, PointOut& out) {
  std::vector<double> rtt;
  std::vector<double> rates;
  std::string list;
  uint64_t iterations = 0, lost = 0, warmup_lost = 0;
  bool locked = true;
  for (uint32_t i = 0; i < ends.size(); ++i) {
    FlowEnd& e = ends[i];
    const nlohmann::json f = fields_of(e.out);
    const uint64_t it = count(f, "iterations");
    iterations += it;
    lost += count(f, "lost");
    warmup_lost += count(f, "warmup_lost");
    locked = locked && f.value("samples_locked", false);
    const double mean_rtt = f.contains("rtt_ns") ? num(f["rtt_ns"], "mean") : 0;
    // A flow's rate: its round trips over the time they took (no --gap-us).
    const double rate = mean_rtt > 0 ? 1e9 / mean_rtt : 0;
    rates.push_back(rate);
    JsonObj o = flow_entry(i, e);
    o.add("iterations", it).add("bytes", it * pt.size).add("lost", count(f, "lost"))
        .add("round_trips_per_s", rate);
    if (f.contains("latency_ns")) o.add_raw("latency_ns", f["latency_ns"].dump());
    if (f.contains("rtt_ns")) o.add_raw("rtt_ns", f["rtt_ns"].dump());
    list += (list.empty() ? "" : ", ") + o.str();
    for (auto& [name, values] : e.out.arrays)
      if (name == "rtt_ns") rtt.insert(rtt.end(), values.begin(), values.end());
  }
  std::vector<double> half(rtt.size());
  for (size_t k = 0; k < rtt.size(); ++k) half[k] = rtt[k] / 2;
  double rate_sum = 0;
  for (double r : rates) rate_sum += r;
  out.fields.add("iterations", iterations).add("bytes", iterations * pt.size).add("lost", lost)
      .add("warmup_lost", warmup_lost).add("latency_kind", "rtt/2");
  add_samples_kind(out, true);
  out.fields.add("latency_ns", to_json(summarize(half.data(), half.size())))
      .add("rtt_ns", to_json(summarize(rtt.data(), rtt.size())))
      .add("samples_locked", locked).add("round_trips_per_s", rate_sum)
      .add("aggregate", "latency: every flow's round trips in one summary; rates: the flows' sum");
  add_jain(out.fields, rates);
  add_overlap(out.fields, ends);
  out.fields.add_raw("flows", "[" + list + "]");
  out.arrays.emplace_back("rtt_ns", std::move(rtt));
}

// --ops: each op's flows summed (flow i ran op i mod their count).
std::string ops_list(const std::vector<std::string>& ops, const std::vector<nlohmann::json>& fields) {
  std::string list;
  for (size_t k = 0; k < ops.size(); ++k) {
    uint64_t flows = 0, iterations = 0, bytes = 0;
    double gbps = 0, msg_rate = 0;
    std::string measured_at;
    for (size_t i = k; i < fields.size(); i += ops.size()) {
      const nlohmann::json& f = fields[i];
      ++flows;
      iterations += count(f, "iterations");
      bytes += static_cast<uint64_t>(std::llround(static_cast<double>(count(f, "iterations")) * num(f, "mean_size")));
      gbps += num(f, "gbps");
      msg_rate += num(f, "msg_rate");
      measured_at = f.value("measured_at", std::string("receiver"));
    }
    JsonObj o;
    o.add("op", ops[k]).add("flows", flows).add("iterations", iterations).add("bytes", bytes).add("gbps", gbps)
        .add("msg_rate", msg_rate).add("measured_at", measured_at);
    list += (list.empty() ? "" : ", ") + o.str();
  }
  return "[" + list + "]";
}

// bw: each flow's counts and rates, and their sums (and each op's, --ops).
void merge_bw(const std::vector<std::string>& ops, std::vector<FlowEnd>& ends, PointOut& out) {
  std::vector<nlohmann::json> fields;
  std::vector<double> rates;
  std::string list;
  uint64_t iterations = 0, lost = 0, warmup_lost = 0, bytes = 0, credit_writes = 0, credits_carried = 0;
  double gbps = 0, msg_rate = 0, offered = 0, c2s = 0, s2c = 0;
  nlohmann::json first;
  bool has_credits = false;
  for (uint32_t i = 0; i < ends.size(); ++i) {
    FlowEnd& e = ends[i];
    const nlohmann::json& f = fields.emplace_back(fields_of(e.out));
    if (i == 0) first = f;
    const uint64_t it = count(f, "iterations");
    const uint64_t b = static_cast<uint64_t>(std::llround(static_cast<double>(it) * num(f, "mean_size")));
    iterations += it;
    bytes += b;
    lost += count(f, "lost");
    warmup_lost += count(f, "warmup_lost");
    gbps += num(f, "gbps");
    msg_rate += num(f, "msg_rate");
    offered += num(f, "offered_msg_rate");
    c2s += num(f, "gbps_c2s");
    s2c += num(f, "gbps_s2c");
    if (f.contains("credit_writes")) {
      has_credits = true;
      credit_writes += count(f, "credit_writes");
      credits_carried += count(f, "credits_carried");
    }
    rates.push_back(num(f, "gbps"));
    JsonObj o = flow_entry(i, e);
    if (!ops.empty()) o.add("op", ops[i % ops.size()]);
    o.add("iterations", it).add("bytes", b).add("lost", count(f, "lost")).add("gbps", num(f, "gbps"))
        .add("msg_rate", num(f, "msg_rate"));
    list += (list.empty() ? "" : ", ") + o.str();
  }
  const bool bidir = first.value("bidir", false);
  out.fields.add("iterations", iterations).add("bytes", bytes).add("lost", lost).add("warmup_lost", warmup_lost);
  if (bidir) out.fields.add("gbps_c2s", c2s).add("gbps_s2c", s2c);
  out.fields.add("gbps", gbps).add("msg_rate", msg_rate).add("offered_msg_rate", offered).add("bidir", bidir)
      .add("tx_depth", count(first, "tx_depth")).add("size_spread", count(first, "size_spread"))
      .add("mean_size", iterations ? static_cast<double>(bytes) / static_cast<double>(iterations) : 0.0)
      .add("measured_at", ops.empty() ? first.value("measured_at", std::string("receiver")) : "per op (ops)")
      .add("aggregate", "the sum of the flows' rates, each over its own measured window");
  if (!ops.empty()) out.fields.add_raw("ops", ops_list(ops, fields));
  if (has_credits) out.fields.add("credit_writes", credit_writes).add("credits_carried", credits_carried);
  add_jain(out.fields, rates);
  add_overlap(out.fields, ends);
  out.fields.add_raw("flows", "[" + list + "]");
}

}  // namespace

Status run_flows(Ctx& c, const Point& pt, uint32_t n, Flows merge, const FlowLoop& loop, PointOut& out) {
  // Each flow's control channel: flow[i] is the flow thread's end, mine[i]
  // the session thread's.
  std::vector<Ctrl> flow(n), mine(n);
  for (uint32_t i = 0; i < n; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) sys_error("flows: socketpair");
    flow[i] = Ctrl(sv[0], c.ctrl.timeout_ms());
    mine[i] = Ctrl(sv[1], c.ctrl.timeout_ms());
    flow[i].set_max_frame(c.ctrl.max_frame());
    mine[i].set_max_frame(c.ctrl.max_frame());
    flow[i].expect_heartbeats(c.ctrl.silence_ms());
  }
  std::vector<FlowEnd> ends(n);
  std::atomic<uint32_t> ready{0};
  std::atomic<bool> go{false}, failing{false};
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (uint32_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      FlowEnd& e = ends[i];
      try {
        if (!c.cpus.empty()) pin_to_cpu(c.cpus[i % c.cpus.size()]);
        Ctx fc{c.p, c.clk, flow[i], c.role, c.op_caps.empty() ? c.caps : c.op_caps[i % c.op_caps.size()], c.same_host, {}, {}};
        fc.spin_ticks = c.spin_ticks;
        // Every flow starts its warm-up at once (the same count each, so
        // their measured windows start together too).
        ready.fetch_add(1, std::memory_order_acq_rel);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        e.began_ns = monotonic_ns();
        e.status = loop(i, fc, e.out);
        e.ended_ns = monotonic_ns();
        e.failure = fc.failure;
        e.window = fc.cpu;
        std::atomic_ref<uint64_t>(c.sleeps).fetch_add(fc.sleeps, std::memory_order_relaxed);
        if (!c.cpus.empty()) e.cpu = sched_getcpu();
      } catch (const Error& err) {
        e.status = Status::failed;
        e.failure = err.what();
        if (err.kind == ErrorKind::usage) e.usage = std::current_exception();
      } catch (const std::exception& err) {
        e.status = Status::failed;
        e.failure = err.what();
      }
      if (e.status != Status::ok) {
        e.ended_seq = failures.fetch_add(1) + 1;
        failing.store(true, std::memory_order_release);
      }
      ::shutdown(flow[i].fd(), SHUT_RDWR);  // the session thread sees this flow end
    });
  while (ready.load(std::memory_order_acquire) < n) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  const RelayEnd relayed = relay(c, mine, failing);
  const std::exception_ptr error = relayed.error;
  for (std::thread& t : threads) t.join();
  for (const FlowEnd& e : ends) c.cpu.add_flow(e.window);

  for (const FlowEnd& e : ends)
    if (e.usage) std::rethrow_exception(e.usage);
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& err) {
      if (err.kind == ErrorKind::usage) throw;
      if (c.failure.empty()) c.failure = err.what();
    }
  }
  // The point's status: the first flow that failed, the others having been
  // ended by it (or all interrupted alike).
  Status st = error ? Status::failed : Status::ok;
  if (relayed.remote_closed && !error) {
    st = Status::peer_lost;
    c.failure = "the other end closed the control channel (process ended?)";
    c.failure_echoes_remote = true;
  } else if (relayed.remote_failed && !error) {
    st = Status::peer_lost;
    c.failure = "the other end's flows ended the point early (failed or interrupted)";
    c.failure_echoes_remote = true;
  }
  uint32_t first = n;
  for (uint32_t i = 0; i < n; ++i)
    if (ends[i].status != Status::ok && (first == n || ends[i].ended_seq < ends[first].ended_seq)) first = i;
  if (st == Status::ok && first < n) {
    st = ends[first].status;
    if (!ends[first].failure.empty()) c.failure = "flow " + std::to_string(first) + ": " + ends[first].failure;
  }
  if (c.role == Role::client) {
    if (merge == Flows::round_trips) merge_lat(pt, ends, out);
    else merge_bw(c.p.rdma.ops, ends, out);
    for (const FlowEnd& e : ends) out.partial = out.partial || e.out.partial;
  }
  return st;
}

}  // namespace fm
