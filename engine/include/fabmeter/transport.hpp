// The transport contract, checked by the compiler: the `Transport` concept
// below. Every transport is a concrete class; experiments are templates over
// it, instantiated per transport and picked from a table at run time
// (src/session/registry.cpp, run_points.hpp), so the hot path has no virtual call (as UCX
// perftest). Construction and caps are the registry's business:
//
//   T(const G&..., const Use&);                 // allocate; no I/O yet
//   static Caps caps(const G&...);              // what it can do, before connecting
//
// and, where they apply, the session's hooks (optional; the generated unit
// checks their signatures when a class has them):
//
//   static void server_claim(G&..., const ServerPlaces&);  // below
//   static double queued_bytes(const G&..., uint64_t size); // below
//   static FabricPort fabric_port(const G&...);             // below
//
// G...: the option groups it reads beyond common (params.hpp), as its
// fm_transport line in engine/CMakeLists.txt lists them; the registry calls
// each with exactly those. A transport never sees the whole Params: what the
// experiment asks of it is in Use. connect() then exchanges addresses over
// the control channel.
#pragma once
#include <algorithm>
#include <cstddef>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "fabmeter/clock.hpp"
#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"

namespace fm {

enum class Role { client, server };

struct Caps {
  uint64_t max_msg_size;      // largest message a post_send accepts
  uint32_t max_inline;        // 0 = no inline sends
  bool reliable;              // every message arrives (or the run fails)
  bool ordered;               // in the order sent
  bool supports_write;        // RDMA write (--op write-imm, write)
  bool send_completions;      // reports when a send finished (gives t_comp)
  bool same_host_only;        // both ends must share memory
  // One-sided ops (--op read, atomics): the client's poll_recv returns each
  // post's own answer, the server's CPU sees nothing; only lat and bw run.
  bool one_sided = false;
  // Several threads may read one connection, each through a reader() of its
  // own (load --server-rx shared).
  bool shared_rx = false;
  uint64_t fixed_msg_size = 0;      // atomics: every message is exactly this many bytes
  const char* busy_only = nullptr;  // why --poll event cannot work here (nullptr: it can)
  // Why the two sides cannot poll in different modes (--poll-recv and
  // --poll-send differ): no event channel on the send side of its own;
  // nullptr: each side waits on its own.
  const char* one_poll_mode = nullptr;
  // Why a sleeping end (--poll event) wakes only when the other end, in event
  // mode too, wakes it: both ends of a connection must wait alike (a
  // forwarding hop's end takes its session's mode); nullptr: the kernel or
  // the device wakes it whatever the other end does.
  const char* woken_by_remote = nullptr;
  std::string max_msg_note = "";  // what sets max_msg_size, for the message refusing a larger --size
  // Why this transport, as configured, carries one connection per session
  // (--flows, load's --conns refused with it); nullptr: it opens several.
  const char* one_connection = nullptr;
  // The call that registers memory with the device (setup --what mr times
  // it through register_memory, below); nullptr: the transport registers none.
  const char* registration = nullptr;
  // Each connection may carry an --op of its own (--ops with several ops).
  bool ops_per_connection = false;
};

// One step of a connect() and how long it took (the optional connect_phases, below).
struct ConnectPhase {
  const char* name;
  uint64_t ns;
};

// A connect()'s steps as it goes: start() as it begins, step(name) as each
// ends, timed from the end of the one before (so setup's phases_ns names every
// microsecond); at most N, later ones folded into none.
template <size_t N>
class ConnectSteps {
 public:
  void start() {
    n_ = 0;
    last_ns_ = Clock::mono_ns();
  }
  void step(const char* name) {
    const uint64_t now = Clock::mono_ns();
    if (n_ < N) steps_[n_++] = {name, now - last_ns_};
    last_ns_ = now;
  }
  std::span<const ConnectPhase> phases() const { return {steps_, n_}; }

 private:
  ConnectPhase steps_[N];
  size_t n_ = 0;
  uint64_t last_ns_ = 0;
};

// What the experiment asks of a transport, beside the transport's own options.
struct Use {
  Role role;
  Poll poll;                  // the receive side's (--poll-recv)
  Poll poll_send;             // the send side's: its completions and waits for room (--poll-send)
  uint32_t send_window;       // most sends posted and not completed (bw: --tx-depth); 0 = as the send queue allows
  uint32_t in_flight;         // most messages the experiment has in flight each way (lat: 1); 0 = no bound
  bool fixed_sizes;           // every message of a point has the point's size (lat; bw without --size-spread)
  uint32_t loss_timeout_ms;   // a reply not seen after this long is lost: waits end by then
};

enum SendFlags : uint32_t {
  kSendSignaled = 1u << 0,    // ask for a send completion
  kSendInline = 1u << 1,
  // More posts follow this one (bw): a one-sided op's answer may then show
  // only with a later op's completion, so it may go unsignaled (--signal-every).
  kSendMore = 1u << 2,
  // The bytes at buf are those of the previous post, from the same buf with
  // the same length (bw's payload): a transport that copies into a ring of
  // send slots may skip a slot that this run of posts has filled already.
  kSameBytes = 1u << 3,
};

// Where oneway's time thread writes t_send into a payload (the optional
// deferred_read, below): clear of the sequence number of unreliable
// transports (bytes 0-3), 8-byte aligned in a send slot aligned to 64.
constexpr uint32_t kSendStampOffset = 8;
constexpr uint32_t kSendStampEnd = kSendStampOffset + 8;

struct RecvMsg {
  const std::byte* data;
  uint32_t len;
  uint32_t imm;
  uint64_t slot;              // transport's own bookkeeping for release()
};

// What a server session offers a transport's server_claim, which rewrites
// the client's options of the transport before anything opens them, so that
// every path and address the server uses is one the server named: the
// address the client reached the server at, and a directory of the
// session's own (mode 0711, so clients of other users reach sockets in it;
// made at the first call, removed with the session).
struct ServerPlaces {
  std::string ctrl_addr;
  std::function<std::string()> own_dir;
};

// queued_bytes: what a transport holds beyond the payload buffers, per
// connection, for messages of `size` bytes (the server's --max-memory
// estimate); without it, nothing. A transport with a receive and a send ring
// of --rq-depth slots, which it cuts to about kRingCap bytes for big
// messages (shm, verbs, ofi), holds ring_pair_bytes.
constexpr double kRingCap = 256.0 * (1 << 20);
inline double ring_pair_bytes(const QueueOptions& q, uint64_t size) {
  const double s = static_cast<double>(size);
  return 2 * std::min(static_cast<double>(q.rq_depth) * s, std::max(2 * s, kRingCap));
}

// fabric_port: the RDMA device port the transport's options name, whose
// facts each end records (fabric.hpp); without it, none is named.
struct FabricPort {
  std::string device;  // "" = the device holding the control connection's address
  unsigned port = 1;
  int gid_index = -1;  // -1 = the control address's GID
};

// A transport's buffer pools at one moment (the optional pools(), below):
// receive buffers holding data or waiting to be reposted, and sends not yet
// completed, each beside its capacity, in the transport's own unit.
struct Pools {
  const char* unit;        // "work requests" (verbs, ofi) or "bytes" (socket buffers)
  uint64_t rx_used, rx_capacity;
  uint64_t tx_used, tx_capacity;
};

// Event-mode waits (wait_recv, wait_send) return after at most this long, so
// the caller can look at its guard between waits.
constexpr int kWaitSliceMs = 50;

template <class T>
concept Transport = requires(T& t, const T& ct, Ctrl& ctrl, JsonObj& info, const void* buf,
                             uint32_t len, uint32_t flags, uint64_t wr_id, uint64_t max_msg, RecvMsg& m, const RecvMsg& cm,
                             uint64_t* wr_ids, int max) {
  // Exchange addresses over the control channel; max_msg: the plan's largest message.
  t.connect(ctrl, max_msg);
  // What was granted (socket buffers, ring slots, ...), for run.json.
  ct.describe(info);
  // Why the transport broke, or nullptr; the slow path (the guard) asks.
  { ct.failure() } -> std::convertible_to<const char*>;

  // Data path: never blocks, never allocates.
  // false = no room now (ring full, socket buffer full, send still in flight):
  // call poll_recv/poll_send_comp and retry. The caller may reuse `buf` as
  // soon as post_send returns: a transport whose device reads the data later
  // (verbs, ofi) sends from a copy of its own.
  { t.post_send(buf, len, flags, wr_id) } -> std::same_as<bool>;
  // The next message, if one is there.
  { t.poll_recv(m) } -> std::same_as<bool>;
  // Gives the message's buffer back; before the next poll_recv.
  t.release(cm);
  // wr_ids of completed signaled sends (which are signaled is the transport's
  // policy, --signal-every, plus every send posted with kSendSignaled); also
  // drives progress.
  { t.poll_send_comp(wr_ids, max) } -> std::same_as<int>;

  // Event mode (Poll::event), each wait bounded by kWaitSliceMs:
  // sleep until a message arrives (false: the slice ended first) ...
  { t.wait_recv(m) } -> std::same_as<bool>;
  // ... or until post_send may succeed.
  t.wait_send();
} && (
  // Optional: false while posted bytes still wait in the transport itself
  // (tcp's partial send); experiments flush before they announce the end of
  // a point, their last send posted with kSendSignaled (a transport that
  // signals selectively sees unsignaled sends done only through a later
  // signaled one). Without it a transport is always idle.
  !requires(const T& ct) { ct.tx_idle(); } || requires(const T& ct) {
    { ct.tx_idle() } -> std::same_as<bool>;
  }) && (
  // Optional: the pools now (load's server samples them on its slow path,
  // as the RAMCloud notes watch their buffer pools). Without it, none.
  !requires(const T& ct) { ct.pools(); } || requires(const T& ct) {
    { ct.pools() } -> std::same_as<Pools>;
  }) && (
  // Optional: the next post_send(buf, len, flags)'s payload copied now into
  // the buffer the device reads, so that post_send copies none (lat and
  // oneway call it before their send timestamp, common.hpp's prepare_send).
  // The caller leaves buf's bytes as they are until that post. Without it,
  // post_send copies what it must.
  !requires(T& t) { t.prepare_send(static_cast<const void*>(nullptr), uint32_t{}, uint32_t{}); } ||
  requires(T& t) {
    { t.prepare_send(static_cast<const void*>(nullptr), uint32_t{}, uint32_t{}) } -> std::same_as<void>;
  }) && (
  // Optional: every message from now on has this many bytes, both ways
  // (lat and bw call it before each point; common.hpp's fix_message_size).
  !requires(T& t) { t.fix_message_size(uint32_t{}); } || requires(T& t) {
    { t.fix_message_size(uint32_t{}) } -> std::same_as<void>;
  }) && (
  // Optional, with Caps::shared_rx: a transport of this kind reading and
  // writing this connected one's socket, with a receive buffer of its own,
  // so that several threads can serve one connection (load --server-rx shared).
  !requires(T& t) { t.reader(); } || requires(T& t) {
    { t.reader() } -> std::same_as<std::unique_ptr<T>>;
  }) && (
  // Optional (oneway's t_send): where the device reads the payload of the
  // next post_send(len, flags) after the call returned, a buffer of the
  // transport's own that stays put until the send completes; nullptr and
  // *why (a sentence) where nothing reads it after the call (inline sends).
  // Without it, nothing does (the call copies the payload).
  !requires(const T& ct, const char** why) { ct.deferred_read(uint32_t{}, uint32_t{}, why); } ||
  requires(const T& ct, const char** why) {
    { ct.deferred_read(uint32_t{}, uint32_t{}, why) } -> std::same_as<std::byte*>;
  }) && (
  // Optional (setup): what connect() covers, in words, once connected.
  // Without it: "the transport's connect()".
  !requires(const T& ct) { ct.connect_covers(); } || requires(const T& ct) {
    { ct.connect_covers() } -> std::convertible_to<const char*>;
  }) && (
  // Optional (setup): the steps of the last connect() and their times.
  !requires(const T& ct) { ct.connect_phases(); } || requires(const T& ct) {
    { ct.connect_phases() } -> std::same_as<std::span<const ConnectPhase>>;
  }) && (
  // Optional (setup --what mr), with Caps::registration: registers len bytes
  // at buf on the connected transport's device (a handle; nullptr with errno
  // set when refused), and deregisters a handle (0, or an errno value).
  !requires(T& t, void* p) { t.register_memory(p, size_t{}); } || requires(T& t, void* p) {
    { t.register_memory(p, size_t{}) } -> std::same_as<void*>;
    { t.deregister_memory(p) } -> std::same_as<int>;
  });

}  // namespace fm
