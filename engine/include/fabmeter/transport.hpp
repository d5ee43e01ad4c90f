// The transport contract. Every transport is a concrete class with these
// members; experiments are templates over it, instantiated per transport and
// picked from a table at run time (src/experiment/session.cpp), so the hot
// path has no virtual call (as UCX perftest).
//
//   T(const G&..., const Use&);                 // allocate; no I/O yet
//   static Caps caps(const G&...);              // what it can do, before connecting
//        G...: the option groups it reads beyond common (params.hpp), as its
//        fm_transport line in engine/CMakeLists.txt lists them. It never
//        sees the whole Params: what the experiment asks of it is in Use.
//   void connect(Ctrl&, uint64_t max_msg);      // exchange addresses over the control channel
//   nlohmann-free description of what was granted:
//   void describe(JsonObject&) const;           // socket buffers, ring slots, ... for run.json
//
//   Data path (never blocks, never allocates):
//   bool post_send(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id);
//        false = no room now (ring full, socket buffer full, send still in
//        flight): call poll_recv/poll_send_comp and retry. The caller may
//        reuse `buf` as soon as post_send returns: a transport whose device
//        reads the data later (verbs, ofi) sends from a copy of its own.
//   bool poll_recv(RecvMsg&);                   // next message if one is there
//   void release(const RecvMsg&);               // give the buffer back; before the next poll_recv
//   int  poll_send_comp(uint64_t* wr_ids, int max); // wr_ids of completed signaled sends; also drives progress
//        Which sends are signaled is the transport's policy (--signal-every),
//        plus every send posted with kSendSignaled.
//
//   Optional: bool tx_idle() const;  false while posted bytes still wait in
//        the transport itself (tcp's partial send); experiments flush before
//        they announce the end of a point. Without it a transport is idle.
//
//   Event mode (Poll::event), each bounded by a short slice (<= kWaitSliceMs)
//   so the caller can look at its guard between waits:
//   bool wait_recv(RecvMsg&);                   // sleep until a message arrives; false on slice timeout
//   void wait_send();                           // sleep until post_send may succeed
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "fabmeter/params.hpp"

namespace fm {

enum class Role { client, server };

struct Caps {
  uint64_t max_msg_size;      // largest message a post_send accepts
  uint32_t max_inline;        // 0 = no inline sends
  bool reliable;              // every message arrives (or the run fails)
  bool ordered;               // in the order sent
  bool supports_write;        // RDMA write with immediate
  bool send_completions;      // reports when a send finished (gives t_comp)
  bool same_host_only;        // both ends must share memory
  std::string max_msg_note = "";  // what sets max_msg_size, for the message refusing a larger --size
};

// What the experiment asks of a transport, beside the transport's own options.
struct Use {
  Role role;
  Poll poll;
  uint32_t send_window;       // most sends posted and not completed (bw: --tx-depth); 0 = as the send queue allows
  uint32_t loss_timeout_ms;   // a reply not seen after this long is lost: waits end by then
};

enum SendFlags : uint32_t {
  kSendSignaled = 1u << 0,    // ask for a send completion
  kSendInline = 1u << 1,
};

struct RecvMsg {
  const std::byte* data;
  uint32_t len;
  uint32_t imm;
  uint64_t slot;              // transport's own bookkeeping for release()
};

constexpr int kWaitSliceMs = 50;

}  // namespace fm
