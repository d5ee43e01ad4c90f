// verbs: RDMA through libibverbs, the thesis' InfiniBand node-type. Service
// RC, UC or UD; send with immediate, or RDMA write with immediate into the
// peer's receive ring (RC/UC); connected by rdma_cm, or "raw": QP numbers,
// GIDs and rkeys over the control channel and the QP moved to RTS by hand.
//
// This header is the datapath (post_send, poll_recv, release,
// poll_send_comp: inline, no allocation or system call of ours in busy mode;
// a software provider such as rxe rings the kernel inside ibv_post_send);
// verbs.cpp is the control plane (device, PD, CQs, QP, memory, connection).
//
// Memory: every buffer is registered. Non-inline sends are copied into a
// registered send ring (one slot per WR in flight), so the caller's buffer is
// free again when post_send returns; inline sends go straight from it.
// Receives use a ring of rq_depth slots, reposted in batches of rq_refill.
// RDMA writes target the peer's ring slot for their sequence number; a
// writer may use a slot only after the peer reposted it, which the peer tells
// by RDMA-writing its repost count into the writer's credit word. Refill and
// credit counting are shared with ofi (credits.hpp).
#pragma once
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

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

}  // namespace verbs

class VerbsTransport {
 public:
  VerbsTransport(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v, const Use& use);
  ~VerbsTransport();
  VerbsTransport(const VerbsTransport&) = delete;

  // Refuses impossible knob combinations (usage errors); works without any
  // RDMA device (connect then says there is none).
  static Caps caps(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v);
  void connect(Ctrl& ctrl, uint64_t max_msg);
  void describe(JsonObj& o) const;
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
    if (posted_ - completed_ >= sq_limit_) [[unlikely]] return false;  // the SQ never overflows
    ibv_sge sge;
    ibv_send_wr wr;
    wr.next = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr_id = posted_;
    if (write_) {
      // The peer's slot for this message must have been reposted (credits).
      if (credits_.full(__atomic_load_n(credit_in_, __ATOMIC_ACQUIRE), peer_.ring_slots)) [[unlikely]] return false;
      const uint32_t slot = static_cast<uint32_t>(credits_.slot());
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(slot);
      wr.wr.rdma.remote_addr = peer_.ring_addr + slot * peer_.slot_size;
      wr.wr.rdma.rkey = peer_.ring_rkey;
    } else {
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(len);
      if (ud_) {
        wr.wr.ud.ah = ah_;
        wr.wr.ud.remote_qpn = peer_.qpn;
        wr.wr.ud.remote_qkey = peer_.qkey;
      }
    }
    sge.length = len;
    if (len <= inline_size_ || ((flags & kSendInline) && len <= max_inline_)) {
      wr.send_flags = IBV_SEND_INLINE;  // the provider copies the payload into the WQE
      sge.addr = reinterpret_cast<uintptr_t>(buf);
      sge.lkey = 0;
    } else {
      std::byte* slot = tx_ring_ + (posted_ % tx_slots_) * tx_slot_size_;
      std::memcpy(slot, buf, len);
      wr.send_flags = 0;
      sge.addr = reinterpret_cast<uintptr_t>(slot);
      sge.lkey = tx_mr_->lkey;
    }
    const bool signaled = (flags & kSendSignaled) || ++unsignaled_ >= signal_every_;
    if (signaled) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      unsignaled_ = 0;
    }
    wr_ids_[posted_ & wr_mask_] = signaled ? wr_id : verbs::kNoReport;
    ibv_send_wr* bad;
    if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0) [[unlikely]] {
      fail_errno("ibv_post_send", rc);
      return false;
    }
    ++posted_;
    if (write_) credits_.wrote(peer_.ring_slots);
    return true;
  }

  [[gnu::always_inline]] bool poll_recv(RecvMsg& m) {
    if (rx_next_ == rx_count_) {
      const int n = ibv_poll_cq(recv_cq_, verbs::kCqBatch, rx_wc_);
      if (n <= 0) [[likely]] {
        if (refill_.credit_due) [[unlikely]] post_credit();
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
    const uint32_t slot = write_ ? ntohl(wc.imm_data) : static_cast<uint32_t>(wc.wr_id);
    if (slot >= rx_slots_) [[unlikely]] {
      fail_text("verbs: a received immediate names no ring slot (peer mismatch?)");
      return false;
    }
    m.data = rx_ring_ + slot * rx_slot_size_ + rx_offset_;
    m.len = wc.byte_len - rx_offset_;
    m.imm = ntohl(wc.imm_data);
    m.slot = slot;
    return true;
  }

  [[gnu::always_inline]] void release(const RecvMsg&) {
    if (refill_.release(rq_refill_)) [[unlikely]] repost_recvs();
  }

  // wr_ids of completed signaled sends; nullptr/0: reap, report none.
  int poll_send_comp(uint64_t* wr_ids, int max) {
    if (posted_ != completed_) reap_sends();
    if (refill_.credit_due) [[unlikely]] post_credit();
    int n = 0;
    if (!wr_ids || max <= 0) {
      done_head_ = done_tail_;
      return 0;
    }
    while (n < max && done_head_ != done_tail_) wr_ids[n++] = done_[done_head_++ & done_mask_];
    return n;
  }

  bool wait_recv(RecvMsg& m);
  void wait_send();

 private:
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
      const uint64_t id = wr_ids_[wc[i].wr_id & wr_mask_];
      if (id == verbs::kNoReport) continue;
      if (done_tail_ - done_head_ > done_mask_) ++done_head_;  // nobody collects: drop the oldest
      done_[done_tail_++ & done_mask_] = id;
    }
    if (n < 0) fail_text("ibv_poll_cq on the send CQ failed");
    return n;
  }

  void repost_recvs();       // the held slots back to the RQ, then credits to a writer
  void post_credit();        // RDMA-write our repost count into the peer's credit word
  bool wait_channel(int ms); // one completion-channel wake-up (either CQ), acked
  void check_events() const;
  void fail_wc(const ibv_wc& wc, const char* what);
  void fail_errno(const char* what, int err);
  void fail_text(const std::string& text) const;

  // control plane (verbs.cpp)
  void open_raw_device(const Ctrl& ctrl);
  void setup(uint64_t max_msg);
  ibv_qp_init_attr qp_init_attr() const;
  void after_qp_created(const ibv_qp_init_attr& granted);
  verbs::EndpointInfo local_info() const;
  void connect_raw(Ctrl& ctrl);
  void connect_cm(Ctrl& ctrl, uint64_t max_msg);
  rdma_cm_event* wait_cm_event(const Ctrl& ctrl, rdma_cm_event_type want, const char* what, uint32_t timeout_ms);
  void make_ah(const ibv_ah_attr& attr);
  ibv_ah_attr ah_attr_to_peer() const;

  const QueueOptions queue_;
  const RdmaOptions rdma_;
  const VerbsOptions verbs_;
  const uint32_t send_window_;  // Use::send_window
  const Role role_;
  const bool ud_, write_, event_;
  bool use_cm_ = false;

  // data-path state, hot members first
  ibv_qp* qp_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  uint64_t posted_ = 0, completed_ = 0;
  rdma::WriteCredits credits_;
  uint32_t sq_limit_ = 1, signal_every_ = 1, unsignaled_ = 0;
  uint32_t inline_size_ = 0, max_inline_ = 0;
  std::byte* tx_ring_ = nullptr;
  uint64_t tx_slot_size_ = 0;
  uint32_t tx_slots_ = 1;
  ibv_mr* tx_mr_ = nullptr;
  ibv_ah* ah_ = nullptr;
  verbs::EndpointInfo peer_{};
  volatile uint64_t* credit_in_ = nullptr;  // written by the peer's RDMA writes
  std::vector<uint64_t> wr_ids_;            // caller's wr_id per SQ position
  uint64_t wr_mask_ = 0;
  std::vector<uint64_t> done_;              // completed signaled sends not yet collected
  uint64_t done_head_ = 0, done_tail_ = 0, done_mask_ = 0;

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
  ibv_comp_channel* channel_ = nullptr;
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
  uint32_t sq_granted_ = 0, rq_granted_ = 0, ud_max_msg_ = 0;
  uint32_t psn_ = 0;

  mutable unsigned checks_ = 0;
  mutable const char* failure_ = nullptr;
  mutable std::string failure_text_;
};

}  // namespace fm
