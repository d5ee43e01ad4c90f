// A forwarding hop's data path (fabmeter-engine forward, the thesis' gateway
// hop): what arrives on one connected transport is posted on another, both
// ways, by one thread. Each end is any transport, behind one virtual call
// per message (HopEnd), so any pair runs (tcp -> udp, shm -> tcp, verbs ->
// verbs) without an instance per pair; the session side (session/forward.cpp)
// connects the ends and relays the control frames around them.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <tuple>

#include "experiment/run_points.hpp"

namespace fm {

// One connected end of a hop.
class HopEnd {
 public:
  virtual ~HopEnd() = default;
  virtual bool poll_recv(RecvMsg& m) = 0;
  virtual bool wait_recv(RecvMsg& m) = 0;  // event mode: at most kWaitSliceMs
  virtual void release(const RecvMsg& m) = 0;
  virtual bool post_send(const void* buf, uint32_t len) = 0;
  virtual void progress() = 0;             // reaps send completions
  virtual void wait_send() = 0;
  virtual const char* failure() const = 0;
  virtual void describe(JsonObj& info) const = 0;
};

template <Transport T>
class HopEndOf final : public HopEnd {
 public:
  template <class... A>
  explicit HopEndOf(const A&... a) : t_(a...) {}
  T& transport() { return t_; }
  bool poll_recv(RecvMsg& m) override { return t_.poll_recv(m); }
  bool wait_recv(RecvMsg& m) override { return t_.wait_recv(m); }
  void release(const RecvMsg& m) override { t_.release(m); }
  bool post_send(const void* buf, uint32_t len) override { return t_.post_send(buf, len, 0, 0); }
  void progress() override {
    uint64_t ids[16];
    t_.poll_send_comp(ids, 16);
  }
  void wait_send() override { t_.wait_send(); }
  const char* failure() const override { return t_.failure(); }
  void describe(JsonObj& info) const override { t_.describe(info); }

 private:
  T t_;
};

// D's transport for `p` in `role`, connected over `ctrl` (the hop's side of
// that session: the server's toward the client, the client's toward the server).
template <class D>
std::unique_ptr<HopEnd> hop_end_of(const Params& p, Role role, Ctrl& ctrl, uint64_t max_msg) {
  using T = typename D::Type;
  auto end = std::apply([](const auto&... a) { return std::make_unique<HopEndOf<T>>(a...); },
                        std::tuple_cat(groups_for<D>(p), std::tuple<Use>(use_of(p, experiment_for(p.experiment), role))));
  end->transport().connect(ctrl, max_msg);
  return end;
}

// Forwards from `in` to `out`, and back where `both_ways` (a round trip),
// until `stop`, pinned to `cpu` (-1: unpinned): busy polls the ends messages
// come from; event sleeps in the wait of the end a message is expected from
// next (both ways: the other after each forwarded message or empty wait; one
// way: always `in`, as a wait on `out` would hold every message behind it).
// Returns "" when stopped, else why an end broke.
std::string forward_loop(HopEnd& in, HopEnd& out, bool both_ways, Poll poll, int cpu, const std::atomic<bool>& stop);

}  // namespace fm
