#include "experiment/forward.hpp"

#include <utility>

#include "fabmeter/clock.hpp"
#include "fabmeter/cpu.hpp"

namespace fm {

namespace {

// Posts m on `to`, then gives its buffer back to `from`. False: stopped
// while `to` had no room, or an end broke.
bool pass_on(HopEnd& from, HopEnd& to, const RecvMsg& m, Poll poll, const std::atomic<bool>& stop) {
  while (!to.post_send(m.data, m.len)) {
    if (poll == Poll::event) to.wait_send();
    else cpu_relax();
    to.progress();
    if (stop.load(std::memory_order_relaxed) || to.failure()) return false;
  }
  from.release(m);
  return true;
}

std::string broken(const HopEnd& in, const HopEnd& out) {
  if (const char* why = in.failure()) return std::string("the client's side: ") + why;
  if (const char* why = out.failure()) return std::string("the server's side: ") + why;
  return "";
}

}  // namespace

std::string forward_loop(HopEnd& in, HopEnd& out, bool both_ways, Poll poll, int cpu, const std::atomic<bool>& stop) {
  if (cpu >= 0) pin_to_cpu(cpu);
  HopEnd* from = &in;
  HopEnd* to = &out;
  for (uint64_t turn = 0; !stop.load(std::memory_order_relaxed); ++turn) {
    RecvMsg m{};
    if (poll == Poll::busy ? from->poll_recv(m) : from->wait_recv(m)) {
      if (!pass_on(*from, *to, m, poll, stop)) break;
    } else if (poll == Poll::busy) {
      cpu_relax();
    }
    to->progress();
    if (both_ways) std::swap(from, to);
    // The slow path, now and then: a broken end ends the hop.
    if ((turn & 1023) == 0 || poll == Poll::event)
      if (std::string why = broken(in, out); !why.empty()) return why;
  }
  return broken(in, out);
}

}  // namespace fm
