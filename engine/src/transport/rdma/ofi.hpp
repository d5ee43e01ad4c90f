// ofi: libfabric, any provider (tcp, udp, shm, verbs, ...) and endpoint type
// (msg, rdm, dgram). This header is the data path; ofi.cpp is the control
// plane (fi_getinfo, fabric/domain/CQ/AV/EP/MR setup, address exchange).
//
// Receives: rx_slots registered buffers, pre-posted; release() reposts them
// in batches of --rq-refill. Sends: at most the send window asked for
// (bw: --tx-depth; else sq_depth) outstanding; with
// FI_SELECTIVE_COMPLETION only every --signal-every-th send asks for a
// completion, which then frees it and every send before it (as verbs).
// --inline: fi_inject (no completion) up to N bytes.
// --op write-imm: fi_writedata into the other end's receive slots with remote CQ data
// carrying slot and length; the receiver returns credits (released count) as
// 8-byte writes with CQ data, so a slot is rewritten only after the receiver
// let go of as many messages as it has slots. Refill and credit counting are
// shared with verbs (credits.hpp).
#pragma once
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstring>
#include <string>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/results.hpp"
#include "fabmeter/transport.hpp"
#include "transport/rdma/credits.hpp"

namespace fm {

class OfiTransport {
 public:
  OfiTransport(const QueueOptions& q, const RdmaOptions& r, const OfiOptions& o, const Use& use);
  ~OfiTransport();
  OfiTransport(const OfiTransport&) = delete;

  // Asks the provider (fi_getinfo, cached) and refuses what it cannot do.
  static Caps caps(const QueueOptions& q, const RdmaOptions& r, const OfiOptions& o);
  static double queued_bytes(const QueueOptions& q, const RdmaOptions&, const OfiOptions&, uint64_t size) {
    return ring_pair_bytes(q, size);
  }
  void connect(Ctrl& ctrl, uint64_t max_msg);
  void describe(JsonObj& o) const;
  // setup: what connect() does, and fi_mr_reg on the domain (nullptr with errno set when refused).
  const char* connect_covers() const;
  void* register_memory(void* buf, size_t len);
  int deregister_memory(void* mr);
  // Receives given back but not yet reposted; sends posted, not yet seen completed.
  Pools pools() const { return {"work requests", refill_.held(), rx_slots_, tx_posted_ - tx_freed_, send_window_}; }
  // A CQ error, or (msg endpoints) the other end's FI_SHUTDOWN on the EQ.
  const char* failure() const {
    if (eq_ && !failure_) check_eq();
    return failure_;
  }

  // ---- data path ----
  [[gnu::always_inline]] bool post_send(const void* buf, uint32_t len, uint32_t flags, uint64_t wr_id) {
    uint64_t rma_addr = 0, data = 0;
    if (write_) {
      if (credits_.full(remote_released_, remote_slots_) && !take_credits()) return false;
      rma_addr = remote_base_ + credits_.slot() * remote_slot_size_;
      data = (credits_.slot() << remote_len_bits_) | len;
    }
    const bool want = flags & kSendSignaled;
    if (len <= inline_max_ && !want) {
      ssize_t rc = write_ ? fi_inject_writedata(ep_, buf, len, data, remote_, rma_addr, remote_key_)
                          : fi_inject(ep_, buf, len, remote_);
      if (rc != 0) [[unlikely]] return post_failed(rc, "fi_inject");
      if (write_) credits_.wrote(remote_slots_);
      return true;
    }
    if (tx_posted_ - tx_freed_ >= send_window_) {
      reap_tx(-1);
      if (tx_posted_ - tx_freed_ >= send_window_) return false;
    }
    const bool signaled = !selective_ || want || unsignaled_run_ + 1 >= signal_every_;
    TxSlot& s = tx_slots_[tx_posted_ & tx_mask_];
    s.wr_id = wr_id;
    s.seq = tx_posted_;
    void* desc = nullptr;
    {  // our copy, which the provider may read until the send completes
      std::byte* b = bounce_ + (tx_posted_ & tx_mask_) * slot_size_;
      if (fill_.needs_copy(tx_posted_, tx_mask_ + 1, buf, len, flags & kSameBytes)) std::memcpy(b, buf, len);
      buf = b;
      desc = bounce_desc_;
    }
    ssize_t rc;
    if (selective_ && signaled) {
      iovec iov{const_cast<void*>(buf), len};
      if (write_) {
        fi_rma_iov rma{rma_addr, len, remote_key_};
        fi_msg_rma m{&iov, &desc, 1, remote_, &rma, 1, &s.ctx, data};
        rc = fi_writemsg(ep_, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA);
      } else {
        fi_msg m{&iov, &desc, 1, remote_, &s.ctx, 0};
        rc = fi_sendmsg(ep_, &m, FI_COMPLETION);
      }
    } else {
      rc = write_ ? fi_writedata(ep_, buf, len, desc, data, remote_, rma_addr, remote_key_, &s.ctx)
                  : fi_send(ep_, buf, len, desc, remote_, &s.ctx);
    }
    if (rc != 0) [[unlikely]] return post_failed(rc, write_ ? "fi_writedata" : "fi_send");
    ++tx_posted_;
    if (signaled) {
      unsignaled_run_ = 0;
      signal_mark_ = tx_posted_;
    } else {
      ++unsignaled_run_;
    }
    if (write_) credits_.wrote(remote_slots_);
    return true;
  }

  // oneway's time thread (t_send): where the provider reads the payload of
  // the next post_send(len, flags) after the call, our registered copy;
  // nullptr and *why where it reads none then.
  std::byte* deferred_read(uint32_t len, uint32_t flags, const char** why) const {
    if (len <= inline_max_ && !(flags & kSendSignaled)) {
      *why = "inline sends (fi_inject): the provider copies the payload inside the call";
      return nullptr;
    }
    return bounce_ + (tx_posted_ & tx_mask_) * slot_size_;
  }

  // Every send up to the last signaled one has completed: unsignaled sends
  // after it are not seen, so an end that flushes posts its last send with
  // kSendSignaled. Providers with manual progress (tcp) move a message only
  // while we poll the send CQ, so flush_sends polls until then; a sender
  // that instead went to wait on the control channel would stall its tail.
  bool tx_idle() const { return tx_freed_ >= signal_mark_; }

  [[gnu::always_inline]] bool poll_recv(RecvMsg& m) {
    if (rxq_head_ == rxq_tail_ && !fill_rx(-1)) return false;
    m = rxq_[rxq_head_++ & kQueueMask];
    return true;
  }

  [[gnu::always_inline]] void release(const RecvMsg& m) {
    if (write_) {
      if (refill_.release(rq_refill_)) send_credit();
      return;
    }
    repost_[refill_.held()] = static_cast<uint32_t>(m.slot);
    if (refill_.release(rq_refill_)) repost();
  }

  // wr_ids of completed signaled sends. nullptr/0: reap (frees the send
  // queue) and report none.
  int poll_send_comp(uint64_t* wr_ids, int max) {
    if (!wr_ids || max <= 0) {
      reap_tx(-1);
      txq_head_ = txq_tail_;
      return 0;
    }
    if (txq_head_ == txq_tail_) reap_tx(-1);
    int n = 0;
    while (n < max && txq_head_ != txq_tail_) wr_ids[n++] = txq_[txq_head_++ & kQueueMask];
    return n;
  }

  bool wait_recv(RecvMsg& m) {
    if (rxq_head_ == rxq_tail_ && !fill_rx(kWaitSliceMs)) return false;
    m = rxq_[rxq_head_++ & kQueueMask];
    return true;
  }
  void wait_send();

 private:
  static constexpr uint32_t kQueueSize = 64;  // completions read but not yet handed out
  static constexpr uint32_t kQueueMask = kQueueSize - 1;
  static constexpr size_t kCqBatch = 16;

  struct TxSlot {
    fi_context2 ctx;  // first: op_context points here (FI_CONTEXT/FI_CONTEXT2 modes)
    uint64_t wr_id;
    uint64_t seq;
  };

  // Reads receive completions into rxq_ (timeout_ms < 0: don't wait).
  // Credits are consumed here and never reach the caller.
  bool fill_rx(int timeout_ms) {
    const uint32_t room = kQueueSize - (rxq_tail_ - rxq_head_);
    if (room == 0) return true;
    fi_cq_data_entry e[kCqBatch];
    const size_t want = room < kCqBatch ? room : kCqBatch;
    ssize_t n = timeout_ms < 0 ? fi_cq_read(rx_cq_, e, want) : fi_cq_sread(rx_cq_, e, want, nullptr, timeout_ms);
    if (n <= 0) {
      if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT) [[unlikely]] cq_error(rx_cq_, n, "receive");
      if (refill_.credit_due) [[unlikely]] send_credit();
      return false;
    }
    for (ssize_t i = 0; i < n; ++i) {
      uint64_t slot;
      uint32_t len;
      if (e[i].flags & FI_REMOTE_CQ_DATA) {
        if (rx_cq_data_mode_) repost_cq_data_recv();
        if (e[i].data & credit_flag_) {
          // Credits carry the low bits of the other end's released count.
          remote_released_ += ((e[i].data & credit_mask_) - (remote_released_ & credit_mask_)) & credit_mask_;
          continue;
        }
        slot = e[i].data >> len_bits_;
        len = static_cast<uint32_t>(e[i].data & len_mask_);
      } else {
        slot = static_cast<uint64_t>(static_cast<fi_context2*>(e[i].op_context) - rx_ctx_.data());
        len = static_cast<uint32_t>(e[i].len);
      }
      rxq_[rxq_tail_++ & kQueueMask] = RecvMsg{rx_base_ + slot * slot_size_, len, 0, slot};
    }
    return rxq_head_ != rxq_tail_;
  }

  // Reads send completions (timeout_ms < 0: don't wait): frees the send
  // queue up to each one and queues its wr_id (dropping the oldest if nobody
  // asks for them).
  void reap_tx(int timeout_ms) {
    fi_cq_data_entry e[kCqBatch];
    ssize_t n = timeout_ms < 0 ? fi_cq_read(tx_cq_, e, kCqBatch) : fi_cq_sread(tx_cq_, e, kCqBatch, nullptr, timeout_ms);
    if (n <= 0) {
      if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT) [[unlikely]] cq_error(tx_cq_, n, "send");
      return;
    }
    for (ssize_t i = 0; i < n; ++i) {
      const TxSlot* s = static_cast<const TxSlot*>(e[i].op_context);
      if (s->seq + 1 > tx_freed_) tx_freed_ = s->seq + 1;
      txq_[txq_tail_++ & kQueueMask] = s->wr_id;
    }
    if (txq_tail_ - txq_head_ > kQueueSize) txq_head_ = txq_tail_ - kQueueSize;
  }

  bool take_credits() {
    fill_rx(-1);
    return !credits_.full(remote_released_, remote_slots_);
  }

  bool post_failed(ssize_t rc, const char* what) {
    if (rc == -FI_EAGAIN) reap_tx(-1);  // progress for providers that need the app to drive it
    else fail_rc(rc, what);
    return false;
  }

  void repost();
  void repost_cq_data_recv();
  void send_credit();
  void cq_error(fid_cq* cq, ssize_t rc, const char* what);
  void fail_rc(ssize_t rc, const char* what);
  void check_eq() const;

  // ---- setup (ofi.cpp) ----
  void open_domain_and_ep(fi_info* info);
  void register_memory();
  void post_receives();
  void connect_msg(Ctrl& ctrl);
  void connect_connectionless(Ctrl& ctrl);
  void exchange_rma(Ctrl& ctrl);
  void handshake(const Ctrl& ctrl);

  // Hot members first.
  fid_ep* ep_ = nullptr;
  fid_cq* tx_cq_ = nullptr;
  fid_cq* rx_cq_ = nullptr;
  fi_addr_t remote_ = FI_ADDR_UNSPEC;
  bool write_;
  bool selective_ = false;
  bool rx_cq_data_mode_ = false;
  uint32_t inline_max_ = 0;
  uint32_t sq_depth_ = 0;
  uint32_t send_window_ = 0;  // most sends outstanding: Use::send_window, within sq_depth_
  uint32_t signal_every_ = 1;
  uint32_t unsignaled_run_ = 0;
  uint32_t rq_refill_ = 1;
  uint64_t tx_posted_ = 0, tx_freed_ = 0, signal_mark_ = 0;
  uint64_t tx_mask_ = 0;
  std::vector<TxSlot> tx_slots_;
  std::byte* bounce_ = nullptr;
  void* bounce_desc_ = nullptr;

  std::byte* rx_base_ = nullptr;   // first receive slot
  uint64_t slot_size_ = 0;
  uint32_t rx_slots_ = 0;
  std::vector<fi_context2> rx_ctx_;
  std::vector<uint32_t> repost_;      // released slots not yet reposted (send mode)
  rdma::RecvRefill refill_;            // send: reposts; --op write-imm: credits (released count) sent
  RecvMsg rxq_[kQueueSize];
  uint32_t rxq_head_ = 0, rxq_tail_ = 0;
  uint64_t txq_[kQueueSize];
  uint32_t txq_head_ = 0, txq_tail_ = 0;

  // --op write-imm
  uint64_t remote_base_ = 0, remote_key_ = 0, remote_slot_size_ = 0, remote_credit_addr_ = 0;
  uint64_t remote_slots_ = 0, remote_len_bits_ = 0;
  rdma::WriteCredits credits_;
  rdma::SlotFill fill_;  // which bounce slots hold bw's payload already
  uint64_t remote_released_ = 0;
  uint64_t credit_flag_ = 0, credit_mask_ = 0;
  uint64_t len_bits_ = 0, len_mask_ = 0;
  uint64_t credit_src_ = 0;
  uint32_t cq_data_next_ = 0;

  mutable const char* failure_ = nullptr;
  mutable std::string failure_text_;

  // ---- control plane ----
  const QueueOptions queue_;
  const RdmaOptions rdma_;
  const OfiOptions ofi_;
  Role role_;
  bool event_;
  fi_info* info_ = nullptr;
  uint64_t next_mr_key_ = 1 << 20;  // setup's registrations, clear of the rings' keys
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_pep* pep_ = nullptr;
  fid_av* av_ = nullptr;
  fid_mr* rx_mr_ = nullptr;
  fid_mr* bounce_mr_ = nullptr;
  void* rx_region_ = nullptr;      // credit word, then the receive slots
  size_t rx_region_bytes_ = 0;
  void* bounce_region_ = nullptr;
  size_t bounce_bytes_ = 0;
};

}  // namespace fm
