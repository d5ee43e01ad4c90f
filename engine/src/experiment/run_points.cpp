// The parts of run_points (run_points.hpp) that are the same for every transport.
#include "experiment/run_points.hpp"

#include <poll.h>

#include <chrono>

#include "fabmeter/error.hpp"

namespace fm {

const ExperimentEntry& experiment_for(const std::string& name) {
  if (const ExperimentEntry* e = find_experiment(name)) return *e;
  usage_error("unknown experiment '" + name + "' (one of " + kExperiments + ")");
}

void validate_run(const Params& p) {
  validate(p);
  experiment_for(p.experiment).validate(p);
}

// A sample file that cannot be written (a full disk) loses the samples, not
// the point: its statistics are in hand and go out with `samples_error`.
void write_arrays(const std::string& out_dir, const std::string& stem, PointOut& out) {
  if (out_dir.empty() || out.arrays.empty()) return;
  JsonObj files;
  std::string error;
  for (auto& [name, values] : out.arrays) {
    std::string file = stem + "." + name + ".npy";
    try {
      write_npy_f64(out_dir + "/" + file, values.data(), values.size());
      files.add(name, file);
    } catch (const Error& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (!files.empty()) out.fields.add("samples", files);
  if (!error.empty()) out.fields.add("samples_error", error);
}

// A control frame arrived mid-point (Status::ctrl_pending left a loop, or
// the client's point failed and the server's reason follows): the server's
// fail when its watchdog or its own failure ended the session, whose
// one-line reason recv() throws; anything else ends the session as failed.
// Where this end's point failed on its own (a flow's error, not an echo of
// the other end's), that failure is the cause and the other end's word its
// consequence: the error says both.
Status end_mid_point(Ctx& ctx) {
  try {
    ctx.ctrl.recv(CtrlType::bye, "the other end's message mid-point");
  } catch (const Error& e) {
    if (e.kind != ErrorKind::runtime || ctx.failure.empty() || ctx.failure_echoes_remote) throw;
    runtime_error(ctx.failure + "; then " + e.what());
  }
  ctx.failure = "the other end ended the session in the middle of a point";
  return Status::failed;
}

// The data path failed on the client: a server whose watchdog ended the
// session closes its transports first and then sends its reason, so give
// the reason a moment to arrive. True if a control frame is waiting.
bool reason_follows(const Ctrl& ctrl) {
  constexpr int kReasonGraceMs = 500;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReasonGraceMs);
  for (;;) {
    switch (ctrl.peek()) {
      case Ctrl::Peek::message: return true;
      case Ctrl::Peek::closed: return false;
      case Ctrl::Peek::nothing: break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{ctrl.fd(), POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(left.count()));
  }
}

std::string exchange_cpu_cost(Ctx& ctx, Status st) {
  // A point its experiment did not mark (setup, a one-sided server that only sleeps) counts no messages.
  ctx.cpu.close_point(0);
  if (st != Status::ok) return "null";
  if (ctx.role == Role::server) {
    ctx.ctrl.send(CtrlType::cpu_cost, ctx.cpu.side().str());
    return "null";
  }
  // The server counts what our side sent it, and its window may open before
  // the warm-up's end (a receiver that cannot tell it): the warm-up's on top.
  const Params& p = ctx.p;
  const uint64_t warmup = std::max<uint64_t>(p.warmup > 0 ? static_cast<uint64_t>(p.warmup) : 0,
                                             CommonOptions::kDefaultWarmup);
  const CpuSidePlan plan{.threads = std::max(p.flows, p.load.server_threads) + CpuSidePlan::kOwnThreads,
                         .max_count = ctx.cpu.units() + warmup};
  return decode_cpu_side(ctx.ctrl.recv(CtrlType::cpu_cost, "the server's cpu cost of the point"), plan);
}

// What the experiment asks of the transport.
Caps merge_op_caps(const Params& p, const std::vector<Caps>& each) {
  if (each.size() > 1 && !each[0].ops_per_connection)
    usage_error(p.transport + ": " + op_option(p.rdma) + ": its connections run one op each point (several ops at once: "
                "verbs); give one op");
  Caps c = each[0];
  for (const Caps& o : each) {
    if (o.max_msg_size < c.max_msg_size) c.max_msg_size = o.max_msg_size, c.max_msg_note = o.max_msg_note;
    c.max_inline = std::min(c.max_inline, o.max_inline);
    c.reliable = c.reliable && o.reliable;
    c.ordered = c.ordered && o.ordered;
    c.supports_write = c.supports_write && o.supports_write;
    c.send_completions = c.send_completions && o.send_completions;
    c.same_host_only = c.same_host_only || o.same_host_only;
    c.one_sided = c.one_sided || o.one_sided;
    c.shared_rx = c.shared_rx && o.shared_rx;
    c.fixed_msg_size = std::max(c.fixed_msg_size, o.fixed_msg_size);
    for (auto why : {&Caps::busy_only, &Caps::one_poll_mode, &Caps::woken_by_remote, &Caps::one_connection})
      if (!(c.*why)) c.*why = o.*why;
  }
  return c;
}

Use use_of(const Params& p, const ExperimentEntry& experiment, Role role) {
  return {.role = role,
          .poll = p.poll,
          .poll_send = p.poll_send,
          .send_window = experiment.send_window(p),
          .in_flight = experiment.in_flight,
          .fixed_sizes = experiment.fixed_sizes(p),
          .loss_timeout_ms = p.loss_timeout_ms};
}

}  // namespace fm
