// verbs: RDMA through libibverbs, the thesis' InfiniBand node-type. Service
// RC, UC or UD; connected by rdma_cm, or "raw": QP numbers, GIDs and rkeys
// over the control channel and the QP moved to RTS by hand. Ops (--op):
//   send       send with immediate (every service);
//   write-imm  RDMA write with immediate into the other end's ring slot: the
//              immediate names the slot, a receive WR is consumed (RC/UC);
//   write      plain RDMA write, as perftest's ib_write_*: no receive WR, no
//              receive completion; the receiver polls the slot's last byte,
//              which the write sets last (RC/UC, busy polling);
//   read, atomic-fadd, atomic-cswap
//              one-sided (RC): the client reads (or adds to, compares and
//              swaps) the server's ring, its poll_recv returns each op's
//              answer from the send CQ; the server's CPU takes no part.
//              Every op is signaled, except that one posted with kSendMore
//              (bw: all but its last warm-up op and its last op) follows
//              --signal-every, as perftest's cq_mod, unless it fills the
//              answer ring: a completion answers every op up to it.
//   write with --passive-rx (bw, RC)
//              one-sided too, as perftest's ib_write_bw: the writer
//              overwrites the other end's ring with no credits, no mark and no
//              trailer, and each write's answer is its acknowledgement
//              (its completion); the receiver's CPU takes no part.
//
// This header is the datapath (post_send, poll_recv, release,
// poll_send_comp: inline, no allocation or system call of ours in busy mode;
// a software provider such as rxe rings the kernel inside ibv_post_send);
// verbs.cpp is the control plane (device, PD, CQs, QP, memory, connection).
//
// Memory: every buffer is registered. Non-inline sends are copied into a
// registered send ring (one slot per WR in flight), so the caller's buffer is
// free again when post_send returns; inline sends go straight from it. lat
// and oneway copy before their send timestamp (prepare_send), as perftest.
// Receives use a ring of rq_depth slots, reposted in batches of rq_refill.
// RDMA writes target the other end's ring slot for their sequence number; a
// writer may use a slot only after the other end reposted (write: released) it,
// which the other end tells by RDMA-writing its count into the writer's credit
// word. Refill and credit counting are shared with ofi (credits.hpp).
//
// A plain write ends where the other end's slot ends, and its last byte is a lap
// mark: message n's is (n / slots) % 255 + 1, never the mark of the slot's
// last lap nor the zeroed ring's. The receiver sees the mark change only
// after the rest of the write: RC and UC place a message's bytes in order
// (perftest relies on it too). When both ends know every message's size
// (fix_message_size: lat, bw) the write is the payload alone, its last byte
// replaced by the mark, as perftest's; from kPiggyBytes on, the 7 bytes
// before the mark carry the writer's count of the other end's messages it has
// read, so two ends that write to each other (lat, bw --bidir) need no
// credit writes: [... payload | count u56 | mark u8]. Where sizes vary
// (check, bw --size-spread; Use::fixed_sizes false) a trailer follows the
// payload, [... payload | len u32 | 3 B | mark u8], and the slots have room
// for it. One-sided answers land in the client's own ring, slot n mod slots.
#pragma once
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <span>
#include <cstring>
#include <string>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/rdma/credits.hpp"

namespace fm {

namespace verbs {

constexpr uint32_t kGrhBytes = 40;          // UD receives start with the sender's global route header
constexpr int kCqBatch = 16;                // completions taken per ibv_poll_cq
constexpr uint64_t kRingBudget = 64ull << 20;  // bytes per buffer ring; deeper rings for big messages are cut
constexpr uint64_t kMaxMsg = 1ull << 30;    // RC/UC, unless the device allows less
constexpr uint64_t kNoReport = UINT64_MAX;  // send-ring entry of an internal WR (credit write)
constexpr uint32_t kTrailerBytes = 8;       // a plain write's length and lap mark, after its payload
constexpr uint32_t kMinFixedBytes = 8;      // smaller fixed sizes keep the trailer (the mark would hit UC's sequence number)
constexpr uint32_t kPiggyBytes = 16;        // fixed sizes from which a plain write carries its writer's credit (clear of the sequence number)
constexpr uint64_t kPiggyMask = (uint64_t{1} << 56) - 1;  // that count's bits, below the mark in the write's last 8 bytes
constexpr uint32_t kPiggyWait = 256;        // polls a due credit waits for a write of ours to carry it before it goes alone
constexpr uint32_t kAtomicBytes = 8;
constexpr uint32_t kMaxRdAtomic = 255;      // reads/atomics in flight: the device's most, as perftest's -o default (a u8 in rdma_cm)
constexpr uint32_t kSkipAhead = 4;          // UC plain write: later slots looked at when one is missing

enum class Op : uint8_t { send, write_imm, write, read, fadd, cswap };
Op op_of(const std::string& name);
inline bool is_atomic(Op op) { return op == Op::fadd || op == Op::cswap; }
inline bool is_one_sided(Op op) { return op == Op::read || is_atomic(op); }
inline uint8_t lap_mark(uint64_t n, uint64_t slots) { return static_cast<uint8_t>((n / slots) % 255 + 1); }

// What one end tells the other over the control channel: raw mode needs all
// of it; with rdma_cm, writes use the ring and credit addresses and a UD
// server its client's QP number, Q_Key and GID.
struct EndpointInfo {
  uint32_t qpn, psn, qkey;
  uint16_t lid;
  uint8_t active_mtu;       // enum ibv_mtu
  uint8_t gid[16];
  uint32_t ring_slots, ring_rkey, credit_rkey;
  uint64_t ring_addr, slot_size, credit_addr;
};

// An end's credits to a writer: sent as RDMA writes of their own, and carried
// by its own plain writes while one was due.
struct CreditCounts {
  uint64_t writes = 0, carried = 0;
};

}  // namespace verbs

class VerbsTransport {
 public:
  VerbsTransport(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v, const Use& use);
  ~VerbsTransport();
  VerbsTransport(const VerbsTransport&) = delete;

  // Refuses impossible knob combinations (usage errors); works without any
  // RDMA device (connect then says there is none).
  static Caps caps(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v);
  static double queued_bytes(const QueueOptions& q, const RdmaOptions&, const VerbsOptions&, uint64_t size) {
    return ring_pair_bytes(q, size);
  }
  static FabricPort fabric_port(const QueueOptions&, const RdmaOptions&, const VerbsOptions& v) {
    return {v.device, v.port, v.gid_index};
  }
  void connect(Ctrl& ctrl, uint64_t max_msg);
  void describe(JsonObj& o) const;
  // The port's active and largest MTU (bytes) and its device's hardware
  // version and part id, as ibv_query_port/ibv_query_device say; "" if the
  // device cannot be opened.
  static std::string port_facts(const std::string& device, unsigned port);
  // setup: what connect() does, its steps and their times, and memory registration on the PD.
  const char* connect_covers() const;
  std::span<const ConnectPhase> connect_phases() const { return steps_.phases(); }
  void* register_memory(void* buf, size_t len);
  int deregister_memory(void* mr);
  // Receives given back but not yet reposted; sends posted, not yet seen completed.
  Pools pools() const { return {"work requests", refill_.held(), rq_granted_, posted_ - completed_, sq_limit_}; }
  // Slow-path check (the measuring loops' guard calls it): completion errors
  // seen by the datapath, and every 16th call the device's async events and
  // rdma_cm events (QP fatal, disconnect).
  const char* failure() const {
    if (!failure_ && (++checks_ & 15) == 0) check_events();
    return failure_;
  }

  // ---- data path ----

  [[gnu::always_inline]] bool post_send(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id) {
    if (posted_ - completed_ >= sq_limit_) [[unlikely]] return held_back();  // the SQ never overflows
    ibv_sge sge;
    ibv_send_wr wr;
    wr.next = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr_id = posted_;
    if (one_sided_) return post_one_sided(buf, len, flags, wr, sge);
    if (op_ == verbs::Op::write) return post_plain_write(buf, len, flags, wr_id, wr, sge);
    if (op_ == verbs::Op::write_imm) {
      // The other end's slot for this message must have been reposted (credits).
      if (credits_.full(remote_credit(), remote_.ring_slots)) [[unlikely]] return held_back();
      const uint32_t slot = static_cast<uint32_t>(credits_.slot());
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(slot);
      wr.wr.rdma.remote_addr = remote_.ring_addr + slot * remote_.slot_size;
      wr.wr.rdma.rkey = remote_.ring_rkey;
    } else {
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(len);
      if (ud_) {
        wr.wr.ud.ah = ah_;
        wr.wr.ud.remote_qpn = remote_.qpn;
        wr.wr.ud.remote_qkey = remote_.qkey;
      }
    }
    sge.length = len;
    const bool inl = goes_inline(len, flags);
    if (inl && post_list_ == 1) {
      wr.send_flags = IBV_SEND_INLINE;  // the provider copies the payload into the WQE
      sge.addr = reinterpret_cast<uintptr_t>(buf);
      sge.lkey = 0;
    } else {  // a listed WR is posted later: its payload must not be the caller's buffer
      std::byte* slot = tx_ring_ + (posted_ % tx_slots_) * tx_slot_size_;
      fill_slot(slot, buf, len, flags);
      wr.send_flags = inl ? IBV_SEND_INLINE : 0;
      sge.addr = reinterpret_cast<uintptr_t>(slot);
      sge.lkey = tx_mr_->lkey;
    }
    return post(wr, flags, wr_id);
  }

  [[gnu::always_inline]] bool poll_recv(RecvMsg& m) {
    if (one_sided_) return poll_answer(m);
    if (op_ == verbs::Op::write) return poll_plain_write(m);
    if (rx_next_ == rx_count_) {
      const int n = ibv_poll_cq(recv_cq_, verbs::kCqBatch, rx_wc_);
      if (n <= 0) [[likely]] {
        credit_if_due();
        if (n < 0) fail_text("ibv_poll_cq on the receive CQ failed");
        return false;
      }
      rx_next_ = 0;
      rx_count_ = n;
    }
    const ibv_wc& wc = rx_wc_[rx_next_++];
    if (wc.status != IBV_WC_SUCCESS) [[unlikely]] {
      fail_wc(wc, "receive");
      return false;
    }
    // Send: the data is in the WQE's own slot. Write: the immediate names the slot.
    const uint32_t slot = op_ == verbs::Op::write_imm ? ntohl(wc.imm_data) : static_cast<uint32_t>(wc.wr_id);
    if (slot >= rx_slots_) [[unlikely]] {
      fail_text("verbs: a received immediate names no ring slot (the two ends differ?)");
      return false;
    }
    m.data = rx_ring_ + slot * rx_slot_size_ + rx_offset_;
    m.len = wc.byte_len - rx_offset_;
    m.imm = ntohl(wc.imm_data);
    m.slot = slot;
    return true;
  }

  [[gnu::always_inline]] void release(const RecvMsg&) {
    if (one_sided_) return;  // an answer's slot is free once taken (post_one_sided counts them)
    if (refill_.release(rq_refill_)) [[unlikely]] repost_recvs();
  }

  // wr_ids of completed signaled sends; nullptr/0: reap, report none.
  int poll_send_comp(uint64_t* wr_ids, int max) {
    if (listed_) [[unlikely]] post_listed();
    if (posted_ != completed_) reap_sends();
    credit_if_due();
    int n = 0;
    if (!wr_ids || max <= 0) {
      done_head_ = done_tail_;
      return 0;
    }
    while (n < max && done_head_ != done_tail_) wr_ids[n++] = done_[done_head_++ & done_mask_];
    return n;
  }

  // oneway's time thread (t_send): where the HCA reads the payload of the
  // next post_send(len, flags) after the call, its send slot; nullptr and
  // *why where it reads none then.
  std::byte* deferred_read(uint32_t len, uint32_t flags, const char** why) const {
    const uint32_t bytes = marked_write() && !msg_size_ ? len + verbs::kTrailerBytes : len;
    if (goes_inline(bytes, flags)) {
      *why = "inline sends: the payload travels in the work request, the HCA reads no send buffer after the post";
      return nullptr;
    }
    if (one_sided_ && op_ != verbs::Op::write) {
      *why = "a one-sided read or atomic carries no payload of ours";
      return nullptr;
    }
    if (piggy_ && len < kSendStampEnd + 8) {
      *why = "a plain write under 24 B: its last 8 bytes carry the credit, over the stamp's";
      return nullptr;
    }
    return tx_ring_ + (posted_ % tx_slots_) * tx_slot_size_;
  }

  // lat and oneway, before their send timestamp: the next post_send(buf,
  // len, flags)'s payload copied into its send slot now, as perftest fills
  // its buffer before its timed loop, so that post_send copies nothing. Not
  // where the payload goes inline from buf or the slot may still be in flight.
  void prepare_send(const void* buf, uint32_t len, uint32_t flags) {
    if (one_sided_ && op_ != verbs::Op::write) return;  // a read or atomic carries no payload of ours
    if (op_ != verbs::Op::write && goes_inline(len, flags) && post_list_ == 1) return;
    if (posted_ - completed_ >= sq_limit_ || len > tx_slot_size_) return;
    std::memcpy(tx_ring_ + (posted_ % tx_slots_) * tx_slot_size_, buf, len);
    prepared_ = posted_ + 1;
  }

  // lat and bw: every message has `len` bytes until the next call.
  void fix_message_size(uint32_t len) {
    msg_size_ = marked_write() && len >= verbs::kMinFixedBytes ? len : 0;
    piggy_ = msg_size_ >= verbs::kPiggyBytes;
  }

  // Credits so far: sent as RDMA writes of their own, and carried by a plain
  // write while one was due.
  verbs::CreditCounts credit_counts() const { return {credit_writes_, credits_carried_}; }

  // --post-list: nothing held back in a list not yet posted.
  bool tx_idle() const { return listed_ == 0; }

  bool wait_recv(RecvMsg& m);
  void wait_send();

 private:
  // The other end's count of our messages it has read: the word its credit writes
  // set, or what its last plain write carried, whichever is further.
  [[gnu::always_inline]] uint64_t remote_credit() const {
    return std::max(piggy_in_, __atomic_load_n(credit_in_, __ATOMIC_ACQUIRE));
  }
  // A credit due goes now, unless one of our writes may carry it soon: an
  // end that writes to the other end waits kPiggyWait polls for that.
  [[gnu::always_inline]] void credit_if_due() {
    if (!refill_.credit_due) [[likely]] return;
    if (piggy_ && ++credit_wait_ < verbs::kPiggyWait) return;
    post_credit();
  }

  // A plain write whose receiver polls its slot's mark (and trailer): --op write without --passive-rx.
  bool marked_write() const { return op_ == verbs::Op::write && !one_sided_; }

  // Up to --inline bytes, or up to what the device granted when the caller asks.
  [[gnu::always_inline]] bool goes_inline(uint32_t len, uint32_t flags) const {
    return len <= inline_size_ || ((flags & kSendInline) && len <= max_inline_);
  }

  // Signals per --signal-every (or when asked) and posts.
  [[gnu::always_inline]] bool post(ibv_send_wr& wr, uint32_t flags, uint64_t wr_id) {
    const bool signaled = (flags & kSendSignaled) || ++unsignaled_ >= signal_every_;
    if (signaled) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      unsignaled_ = 0;
    }
    wr_ids_[posted_ & wr_mask_] = signaled ? wr_id : verbs::kNoReport;
    if (!submit(wr)) [[unlikely]] return false;
    if (op_ != verbs::Op::send) credits_.wrote(remote_.ring_slots);
    return true;
  }

  // The payload into its send slot, unless prepare_send put it there for
  // this post, or bw's run of posts filled the slot already (kSameBytes).
  [[gnu::always_inline]] void fill_slot(std::byte* slot, const void* buf, uint32_t len, uint32_t flags) {
    if (prepared_ == posted_ + 1) return;
    if (fill_.needs_copy(posted_, tx_slots_, buf, len, flags & kSameBytes)) std::memcpy(slot, buf, len);
  }

  // One WR to the SQ, or (--post-list) into the list, posted as one chain
  // when full. A listed WR counts as posted: its slot and SQ entry are taken.
  [[gnu::always_inline]] bool submit(const ibv_send_wr& wr) {
    if (post_list_ > 1) {
      ibv_send_wr& w = list_wr_[listed_];
      list_sge_[listed_] = *wr.sg_list;
      w = wr;
      w.sg_list = &list_sge_[listed_];
      if (listed_) list_wr_[listed_ - 1].next = &w;
      ++posted_;
      return ++listed_ < post_list_ || post_listed();
    }
    ibv_send_wr* bad;
    if (int rc = ibv_post_send(qp_, const_cast<ibv_send_wr*>(&wr), &bad); rc != 0) [[unlikely]] {
      fail_errno("ibv_post_send", rc);
      return false;
    }
    ++posted_;
    return true;
  }
  bool post_listed();  // the list so far, as one chain
  // No room for another WR: what a list holds back must go, or no room ever comes.
  bool held_back() {
    if (listed_) post_listed();
    return false;
  }

  // Plain write: copied into the send slot with its mark (and trailer, if the
  // size is not fixed), ending where the other end's slot ends (inline if it fits).
  [[gnu::always_inline]] bool post_plain_write(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id,
                                               ibv_send_wr& wr, ibv_sge& sge) {
    if (credits_.full(remote_credit(), remote_.ring_slots)) [[unlikely]] {
      // No write of ours goes until the other end's credit comes, which may wait on
      // ours (--bidir): a due credit goes alone now, not after kPiggyWait polls.
      if (refill_.credit_due) post_credit();
      return held_back();
    }
    const uint64_t slot = credits_.slot();
    std::byte* src = tx_ring_ + (posted_ % tx_slots_) * tx_slot_size_;
    // The mark below overwrites the last byte on every lap, never the rest.
    fill_slot(src, buf, len, flags);
    const uint8_t mark = verbs::lap_mark(credits_.written(), remote_.ring_slots);
    uint32_t total = len;
    if (msg_size_) {
      if (len != msg_size_) [[unlikely]] {
        fail_text("verbs: a message of " + std::to_string(len) + " B in a point of " + std::to_string(msg_size_) + " B");
        return false;
      }
      if (piggy_) {
        // Our count of the other end's messages read rides along: the credit due, if any, goes with it.
        const uint64_t word = (refill_.released() & verbs::kPiggyMask) | uint64_t{mark} << 56;
        std::memcpy(src + len - sizeof word, &word, sizeof word);
        credits_carried_ += refill_.credit_due;
        refill_.credit_due = false;
        credit_wait_ = 0;
      } else {
        src[len - 1] = static_cast<std::byte>(mark);
      }
    } else {
      if (len + verbs::kTrailerBytes > tx_slot_size_) [[unlikely]] {  // slots sized for fixed sizes (Use::fixed_sizes)
        fail_text("verbs: a plain write of " + std::to_string(len) + " B has no room for its length in a " +
                  std::to_string(tx_slot_size_) + " B slot (a size the point did not fix)");
        return false;
      }
      const uint32_t trailer[2] = {len, static_cast<uint32_t>(mark) << 24};
      std::memcpy(src + len, trailer, sizeof trailer);
      total += verbs::kTrailerBytes;
    }
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = remote_.ring_addr + (slot + 1) * remote_.slot_size - total;
    wr.wr.rdma.rkey = remote_.ring_rkey;
    sge.addr = reinterpret_cast<uintptr_t>(src);
    sge.length = total;
    sge.lkey = tx_mr_->lkey;
    wr.send_flags = goes_inline(total, flags) ? IBV_SEND_INLINE : 0;
    return post(wr, flags, wr_id);
  }

  // Read or atomic on the other end's slot n mod slots, answered into ours; or a
  // passive write into it from our send slot. Its answer is in when a
  // completion of it or of a later op comes.
  [[gnu::always_inline]] bool post_one_sided(const void* buf, uint32_t len, uint32_t flags, ibv_send_wr& wr,
                                             ibv_sge& sge) {
    if (os_posted_ - os_taken_ >= rx_slots_) [[unlikely]] return held_back();  // answers not yet taken fill our ring
    const uint64_t mine = os_posted_ % rx_slots_;
    const uint64_t remote = remote_.ring_addr + (os_posted_ % remote_.ring_slots) * remote_.slot_size;
    // A read or atomic's answer lands in our slot; a passive write goes from our send slot.
    sge.addr = reinterpret_cast<uintptr_t>(rx_ring_ + mine * rx_slot_size_);
    sge.lkey = rx_mr_->lkey;
    wr.send_flags = 0;
    if (op_ == verbs::Op::write) {
      std::byte* src = tx_ring_ + (posted_ % tx_slots_) * tx_slot_size_;
      fill_slot(src, buf, len, flags);
      sge.addr = reinterpret_cast<uintptr_t>(src);
      sge.lkey = tx_mr_->lkey;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = remote;
      wr.wr.rdma.rkey = remote_.ring_rkey;
      if (goes_inline(len, flags)) wr.send_flags = IBV_SEND_INLINE;
    } else if (op_ == verbs::Op::read) {
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = remote;
      wr.wr.rdma.rkey = remote_.ring_rkey;
    } else {
      wr.opcode = op_ == verbs::Op::fadd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic.remote_addr = remote;
      wr.wr.atomic.rkey = remote_.ring_rkey;
      wr.wr.atomic.compare_add = op_ == verbs::Op::fadd ? 1 : 0;
      wr.wr.atomic.swap = 0;  // compare 0, swap 0: always succeeds, the same work every time (as perftest)
    }
    sge.length = len;
    // The op that fills our answer ring is signaled too, or no room would come back.
    const bool signaled = !(flags & kSendMore) || ++unsignaled_ >= signal_every_ || os_posted_ + 1 - os_taken_ >= rx_slots_;
    if (signaled) {
      unsignaled_ = 0;
      wr.send_flags |= IBV_SEND_SIGNALED;
    }
    wr_ids_[posted_ & wr_mask_] = verbs::kNoReport;  // answers go to poll_recv, not poll_send_comp
    os_len_[mine] = len;
    ++os_posted_;
    return submit(wr);
  }

  // The next slot's mark says a plain write is complete in it. On UC a lost
  // write never comes: a later slot complete says the ones before are lost.
  [[gnu::always_inline]] bool poll_plain_write(RecvMsg& m) {
    if (!slot_marked(rx_seq_)) [[likely]] {
      credit_if_due();
      if (reliable_ || !skip_lost()) return false;
    }
    const uint64_t slot = rx_seq_ % rx_slots_;
    const std::byte* end = rx_ring_ + (slot + 1) * rx_slot_size_;
    uint32_t len = msg_size_;
    if (!msg_size_) {
      std::memcpy(&len, end - verbs::kTrailerBytes, sizeof len);
      if (len > rx_slot_size_ - verbs::kTrailerBytes) [[unlikely]] {
        fail_text("verbs: a plain write's length exceeds its ring slot (the two ends differ?)");
        return false;
      }
      end -= verbs::kTrailerBytes;
    }
    if (piggy_) {
      uint64_t word;
      std::memcpy(&word, end - sizeof word, sizeof word);
      piggy_in_ = std::max(piggy_in_, word & verbs::kPiggyMask);
    }
    m.data = end - len;
    m.len = len;
    m.imm = 0;
    m.slot = slot;
    ++rx_seq_;
    return true;
  }
  [[gnu::always_inline]] bool slot_marked(uint64_t n) const {
    const auto* mark = reinterpret_cast<const uint8_t*>(rx_ring_ + (n % rx_slots_ + 1) * rx_slot_size_ - 1);
    return __atomic_load_n(mark, __ATOMIC_ACQUIRE) == verbs::lap_mark(n, rx_slots_);
  }
  bool skip_lost();

  [[gnu::always_inline]] bool poll_answer(RecvMsg& m) {
    if (os_taken_ == os_done_) {
      if (posted_ != completed_) reap_sends();
      if (os_taken_ == os_done_) return false;
    }
    const uint64_t slot = os_taken_++ % rx_slots_;
    m.data = rx_ring_ + slot * rx_slot_size_;
    m.len = os_len_[slot];
    m.imm = 0;
    m.slot = slot;
    return true;
  }

  // Send CQ -> completed_ (a signaled WR completes every WR before it) and
  // the caller's ids of signaled sends into done_. Returns completions seen.
  int reap_sends() {
    ibv_wc wc[verbs::kCqBatch];
    const int n = ibv_poll_cq(send_cq_, verbs::kCqBatch, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) [[unlikely]] {
        fail_wc(wc[i], "send");
        continue;
      }
      completed_ = wc[i].wr_id + 1;
      if (one_sided_) os_done_ = completed_;  // a one-sided QP posts nothing else: WR n is op n
      const uint64_t id = wr_ids_[wc[i].wr_id & wr_mask_];
      if (id == verbs::kNoReport) continue;
      if (done_tail_ - done_head_ > done_mask_) ++done_head_;  // nobody collects: drop the oldest
      done_[done_tail_++ & done_mask_] = id;
    }
    if (n < 0) fail_text("ibv_poll_cq on the send CQ failed");
    return n;
  }

  void repost_recvs();       // the held slots back to the RQ, then credits to a writer
  void post_credit();        // RDMA-write our repost count into the other end's credit word
  bool wait_channel(ibv_comp_channel* ch, int ms);  // one wake-up of a CQ's channel, acked
  void check_events() const;
  void fail_wc(const ibv_wc& wc, const char* what);
  void fail_errno(const char* what, int err);
  void fail_text(const std::string& text) const;

  // control plane (verbs.cpp)
  int remote_access() const {
    int a = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (op_ == verbs::Op::read) a |= IBV_ACCESS_REMOTE_READ;
    if (verbs::is_atomic(op_)) a |= IBV_ACCESS_REMOTE_ATOMIC;
    return a;
  }
  void open_raw_device(const Ctrl& ctrl);
  void setup(uint64_t max_msg);
  ibv_qp_init_attr qp_init_attr() const;
  void after_qp_created(const ibv_qp_init_attr& granted);
  verbs::EndpointInfo local_info() const;
  void connect_raw(Ctrl& ctrl);
  void connect_cm(Ctrl& ctrl, uint64_t max_msg);
  rdma_cm_event* wait_cm_event(const Ctrl& ctrl, rdma_cm_event_type want, const char* what, uint32_t timeout_ms);
  void make_ah(const ibv_ah_attr& attr);
  ibv_ah_attr ah_attr_to_remote() const;

  const QueueOptions queue_;
  const RdmaOptions rdma_;
  const VerbsOptions verbs_;
  const uint32_t send_window_;  // Use::send_window
  const uint32_t in_flight_;    // Use::in_flight
  const bool fixed_sizes_;      // Use::fixed_sizes
  const Role role_;
  const bool ud_, event_recv_, event_send_;
  const verbs::Op op_;
  const bool one_sided_, reliable_;
  bool use_cm_ = false;
  ConnectSteps<8> steps_;  // connect()'s (setup)

  // data-path state, hot members first
  ibv_qp* qp_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  uint64_t posted_ = 0, completed_ = 0;
  rdma::WriteCredits credits_;
  rdma::SlotFill fill_;                     // which send slots hold bw's payload already
  uint64_t prepared_ = 0;                   // posted_ + 1 of the post whose slot prepare_send filled; 0: none
  uint32_t sq_limit_ = 1, signal_every_ = 1, unsignaled_ = 0;
  uint32_t post_list_ = 1, listed_ = 0;     // --post-list; WRs in list_wr_ not yet posted
  std::vector<ibv_send_wr> list_wr_;
  std::vector<ibv_sge> list_sge_;
  uint32_t inline_size_ = 0, max_inline_ = 0;
  std::byte* tx_ring_ = nullptr;
  uint64_t tx_slot_size_ = 0;
  uint32_t tx_slots_ = 1;
  ibv_mr* tx_mr_ = nullptr;
  ibv_ah* ah_ = nullptr;
  verbs::EndpointInfo remote_{};
  volatile uint64_t* credit_in_ = nullptr;  // written by the other end's RDMA writes
  std::vector<uint64_t> wr_ids_;            // caller's wr_id per SQ position
  uint64_t wr_mask_ = 0;
  std::vector<uint64_t> done_;              // completed signaled sends not yet collected
  uint64_t done_head_ = 0, done_tail_ = 0, done_mask_ = 0;

  uint64_t rx_seq_ = 0;                     // plain write: the next message's number
  uint32_t msg_size_ = 0;                   // plain write: every message's size (0: each carries its own)
  bool piggy_ = false;                      // plain write: each write carries our credit (fixed size >= kPiggyBytes)
  uint64_t piggy_in_ = 0;                   // the other end's credit, from the last of its writes that carried one
  uint32_t credit_wait_ = 0;                // polls a due credit has waited for a write to carry it
  uint64_t written_at_refill_ = 0;          // credits_.written() at the last refill: are we writing to the other end?
  uint64_t credit_writes_ = 0;              // credits sent as writes of their own
  uint64_t credits_carried_ = 0;            // due credits a plain write carried
  uint64_t os_posted_ = 0, os_done_ = 0, os_taken_ = 0;  // one-sided: posted, answered, taken by poll_recv
  std::vector<uint32_t> os_len_;            // one-sided: each answer slot's length
  ibv_wc rx_wc_[verbs::kCqBatch];
  int rx_next_ = 0, rx_count_ = 0;
  std::byte* rx_ring_ = nullptr;
  uint64_t rx_slot_size_ = 0;
  uint32_t rx_slots_ = 0, rx_offset_ = 0;  // rx_offset_: the GRH on UD
  uint32_t rq_refill_ = 1;
  uint32_t rx_repost_at_ = 0;               // next slot to repost
  rdma::RecvRefill refill_;                 // given back: slots reposted since the start (credits)

  // control plane
  ibv_device** dev_list_ = nullptr;
  ibv_context* ctx_ = nullptr;   // ours in raw mode; rdma_cm's otherwise
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* recv_channel_ = nullptr;  // --poll-recv event: the receive CQ's
  ibv_comp_channel* send_channel_ = nullptr;  // --poll-send event: the send CQ's
  ibv_mr* rx_mr_ = nullptr;
  ibv_mr* credit_mr_ = nullptr;
  uint64_t* credit_page_ = nullptr;   // [0] credits in, [1] credit source for our writes
  void* tx_mem_ = nullptr;
  void* rx_mem_ = nullptr;
  size_t tx_bytes_ = 0, rx_bytes_ = 0;
  std::vector<ibv_recv_wr> recv_wrs_;
  std::vector<ibv_sge> recv_sges_;
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  rdma_cm_id* cm_id_ = nullptr;
  std::string device_name_;
  uint32_t port_ = 1;
  int gid_index_ = 0;
  ibv_gid gid_{};
  ibv_gid local_gid_{};          // the control connection's address as a GID
  bool have_local_gid_ = false;
  ibv_port_attr port_attr_{};
  ibv_mtu path_mtu_ = IBV_MTU_1024;
  uint32_t sq_want_ = 0;         // send WRs asked for: --sq-depth (a lat read or atomic: 1, setup())
  uint32_t sq_granted_ = 0, rq_granted_ = 0, ud_max_msg_ = 0;
  uint32_t psn_ = 0;
  uint32_t rd_atomic_ = 1;       // reads/atomics in flight (initiator depth and responder resources)

  mutable unsigned checks_ = 0;
  mutable const char* failure_ = nullptr;
  mutable std::string failure_text_;
};

}  // namespace fm
