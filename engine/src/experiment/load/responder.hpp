// load: the server's point: its threads (LoadResponder), each answering
// every request on its connections, and their counts sent to the client.
#pragma once
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "experiment/load/common.hpp"
#include "experiment/load/server_stats.hpp"
#include "experiment/load/tx_path.hpp"

namespace fm {

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
    return stats_.tx_timed ? wait_for_buffer<true, P>(t, clk_, reply_.data(), len, stop, stats_.tx)
                           : wait_for_buffer<false, P>(t, clk_, reply_.data(), len, stop, stats_.tx);
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

}  // namespace fm
