// fabmeter-delay-line: a packet delay line on a netfilter queue, for tests.
//
// This kernel has no netem, so a test that needs "100 us more on this link"
// sends the link's packets to a netfilter queue (iptables ... -j NFQUEUE;
// tests/delay_line.py) and this program holds each one for a fixed delay:
//
//   fabmeter-delay-line --delay-us D [--queue N (0)] [--limit PACKETS (10000)]
//
// Each packet is accepted at (the time this program read it) + D on
// CLOCK_MONOTONIC, in arrival order: the delay is the same for all, so a
// FIFO is also due-time order and nothing is reordered. The queue's own
// netlink round trip comes on top of D. With --limit packets held, further
// ones are dropped and counted. Prints {"event":"ready",...} once the queue
// is bound; on SIGTERM or SIGINT accepts what it still holds at once, in
// order ("flushed"), and prints its counters as one JSON line. Exit 2 on bad
// arguments, 3 when the queue cannot be bound (not root, queue taken).
//
// No NFQA_CFG_F_FAIL_OPEN: fail-open accepts packets the kernel cannot
// queue (queue full, socket buffer full) at once, ahead of the held ones,
// which reorders them and silently removes the delay. Without it the kernel
// drops them and counts them (/proc/net/netfilter/nfnetlink_queue), and this
// program reports that count as kernel_dropped.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "fabmeter/error.hpp"
#include "fabmeter/histogram.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/signals.hpp"
#include "tool_main.hpp"

namespace {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

uint64_t parse_count(std::string_view opt, std::string_view v) {
  uint64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    fm::usage_error(std::string(opt) + ": expected a non-negative integer, got '" + std::string(v) + "'");
  return x;
}

struct Options {
  uint16_t queue = 0;
  uint64_t delay_us = 0;
  size_t limit = 10'000;
};

Options parse(int argc, char** argv) {
  Options o;
  bool have_delay = false;
  for (int i = 1; i < argc; i++) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) fm::usage_error("missing value after " + std::string(a));
    const std::string_view v = argv[++i];
    if (a == "--delay-us") {
      o.delay_us = parse_count(a, v);
      have_delay = true;
    } else if (a == "--queue") {
      const uint64_t q = parse_count(a, v);
      if (q > 65535) fm::usage_error("--queue: at most 65535");
      o.queue = static_cast<uint16_t>(q);
    } else if (a == "--limit") {
      o.limit = parse_count(a, v);
      if (o.limit == 0 || o.limit > 1'000'000) fm::usage_error("--limit: 1 to 1000000");
    } else {
      fm::usage_error("unknown argument " + std::string(a));
    }
  }
  if (!have_delay) fm::usage_error("usage: fabmeter-delay-line --delay-us D [--queue N] [--limit PACKETS]");
  if (o.delay_us > 10'000'000) fm::usage_error("--delay-us: at most 10 s");
  return o;
}

// The kernel's own drops on our queue: "queue full" and "could not deliver
// to the socket" (the 6th and 7th columns of its line).
uint64_t kernel_drops(uint16_t queue) {
  std::ifstream f("/proc/net/netfilter/nfnetlink_queue");
  for (std::string line; std::getline(f, line);) {
    std::istringstream in(line);
    uint64_t num, portid, total, mode, range, queue_dropped, user_dropped;
    if (in >> num >> portid >> total >> mode >> range >> queue_dropped >> user_dropped && num == queue)
      return queue_dropped + user_dropped;
  }
  return 0;
}

// One bound queue and the packets it holds.
class DelayLine {
 public:
  explicit DelayLine(const Options& o) : queue_num_(o.queue), delay_ns_(o.delay_us * 1000), limit_(o.limit) {
    handle_ = nfq_open();
    if (!handle_) fm::sys_error("nfq_open (needs CAP_NET_ADMIN)");
    queue_ = nfq_create_queue(handle_, o.queue, on_packet, this);
    if (!queue_) {
      nfq_close(handle_);
      fm::sys_error("cannot bind netfilter queue " + std::to_string(o.queue) + " (taken?)");
    }
    // Only the packet id comes up: the verdict is all this program gives.
    // The kernel queue holds the held packets plus those not yet read, so
    // it is longer than --limit by a socket buffer's worth: this program,
    // not the kernel, decides the drops.
    // GSO packets come up whole, as the rule counted them (this program
    // never reads a payload, so their partial checksums do not matter).
    if (nfq_set_mode(queue_, NFQNL_COPY_META, 0) < 0 ||
        nfq_set_queue_maxlen(queue_, static_cast<uint32_t>(o.limit + 4096)) < 0 ||
        nfq_set_queue_flags(queue_, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0)
      fm::sys_error("configuring netfilter queue " + std::to_string(o.queue));
  }
  ~DelayLine() {
    nfq_destroy_queue(queue_);
    nfq_close(handle_);
  }
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  int fd() const { return nfq_fd(handle_); }

  // Handles what one recv returns (one or more packets); false when there
  // was nothing to read. ENOBUFS: the kernel dropped packets it could not
  // deliver; they are counted in kernel_drops().
  bool read_packets() {
    alignas(nlmsghdr) static char buf[1 << 16];
    const ssize_t n = recv(fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
      if (errno == ENOBUFS) return true;
      fm::sys_error("recv from the netfilter queue");
    }
    nfq_handle_packet(handle_, buf, static_cast<int>(n));
    return true;
  }

  // Accepts every packet that is due; returns the ns until the next one is,
  // or -1 when none is held.
  int64_t release_due() {
    const int64_t now = now_ns();
    while (!held_.empty() && held_.front().due_ns <= now) {
      lateness_ns_.record(now - held_.front().due_ns);
      verdict(held_.front().id, NF_ACCEPT);
      held_.pop_front();
      delayed_++;
    }
    return held_.empty() ? -1 : held_.front().due_ns - now;
  }

  // At exit: what was sent up but not read yet, then everything held, all
  // accepted at once in arrival order.
  void flush() {
    while (read_packets()) {
    }
    for (const Held& h : held_) verdict(h.id, NF_ACCEPT);
    flushed_ += held_.size();
    held_.clear();
  }

  fm::JsonObj counters() const {
    fm::JsonObj late;
    late.add("p50", lateness_ns_.value_at_percentile(50)).add("p99", lateness_ns_.value_at_percentile(99));
    late.add("max", lateness_ns_.max());
    fm::JsonObj o;
    o.add("event", "end").add("queue", static_cast<unsigned>(queue_num_));
    o.add("packets", packets_).add("delayed", delayed_).add("flushed", flushed_).add("dropped", dropped_);
    o.add("kernel_dropped", kernel_drops(queue_num_)).add("max_held", static_cast<uint64_t>(max_held_));
    o.add("lateness_ns", late);
    return o;
  }

 private:
  struct Held {
    uint32_t id;
    int64_t due_ns;
  };

  static int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* nfa, void* self) {
    static_cast<DelayLine*>(self)->arrive(ntohl(nfq_get_msg_packet_hdr(nfa)->packet_id));
    return 0;
  }

  void arrive(uint32_t id) {
    packets_++;
    if (held_.size() >= limit_) {
      dropped_++;
      verdict(id, NF_DROP);
      return;
    }
    held_.push_back({id, now_ns() + delay_ns_});
    if (held_.size() > max_held_) max_held_ = held_.size();
  }

  void verdict(uint32_t id, uint32_t v) {
    if (nfq_set_verdict(queue_, id, v, 0, nullptr) < 0) fm::sys_error("nfq_set_verdict");
  }

  const uint16_t queue_num_;
  const int64_t delay_ns_;
  const size_t limit_;
  nfq_handle* handle_ = nullptr;
  nfq_q_handle* queue_ = nullptr;
  std::deque<Held> held_;  // oldest first: arrival order is due order
  uint64_t packets_ = 0, delayed_ = 0, flushed_ = 0, dropped_ = 0;
  size_t max_held_ = 0;
  fm::Histogram lateness_ns_;  // release time minus due time
};

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // The default timer slack (50 us) would be half of a 100 us delay.
  prctl(PR_SET_TIMERSLACK, 1);
  // SIGTERM and SIGINT get in only inside ppoll, so a stop cannot fall
  // between the check of the flag and the wait.
  sigset_t stop_signals, wait_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, &wait_mask);
  fm::install_stop_handler();

  DelayLine line(o);
  fm::JsonObj ready;
  ready.add("event", "ready").add("queue", static_cast<unsigned>(o.queue)).add("delay_us", o.delay_us);
  ready.add("limit", static_cast<uint64_t>(o.limit));
  fm::emit_line(ready);

  pollfd pfd{line.fd(), POLLIN, 0};
  while (!fm::stop_requested()) {
    const int64_t wait_ns = line.release_due();
    const timespec wait{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
    const int n = ppoll(&pfd, 1, wait_ns < 0 ? nullptr : &wait, &wait_mask);
    if (n < 0 && errno != EINTR) fm::sys_error("ppoll");
    // One recv per turn, so releases are never starved by a burst.
    if (n > 0) line.read_packets();
  }
  line.flush();
  fm::emit_line(line.counters());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main("fabmeter-delay-line", [&] { return run(argc, argv); });
}
