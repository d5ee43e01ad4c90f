// verbs control plane: caps and the knobs refused, protection domain,
// CQs and completion channel, registered rings, the QP's sizes, errors and the
// slow parts of the data path (device helpers: verbs_device.cpp; the
// connection: verbs_connect.cpp).
#include "transport/rdma/verbs.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/pages.hpp"
#include "fabmeter/remote_parse.hpp"
#include "transport/rdma/verbs_device.hpp"
#include "transport/sock/sock.hpp"

#ifndef FM_LIBIBVERBS_VERSION
#define FM_LIBIBVERBS_VERSION "unknown"
#endif

namespace fm {

using namespace verbs;

namespace {

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
uint64_t pow2_at_least(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// Impossible combinations, refused on both ends before anything connects.
void check_knobs(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v) {
  const bool ud = v.service == "ud";
  const verbs::Op op = verbs::op_of(r.op);
  const bool one_sided = verbs::is_one_sided(op);
  if (ud && op != verbs::Op::send)
    usage_error("verbs: --op " + r.op + " needs a connected service (--service rc" + (one_sided ? "" : " or uc") +
                "): UD has only send");
  if (v.service == "uc" && one_sided)
    usage_error("verbs: --op " + r.op + " needs --service rc: UC has no RDMA read or atomics");
  if (v.cm == "rdma_cm" && v.service == "uc")
    usage_error("verbs: rdma_cm cannot connect UC queue pairs; use --cm raw (the default for uc)");
  if (v.mtu != 0 && v.mtu != 256 && v.mtu != 512 && v.mtu != 1024 && v.mtu != 2048 && v.mtu != 4096)
    usage_error("verbs: --mtu must be 256, 512, 1024, 2048 or 4096 (0: the port's active MTU)");
  if (v.mtu != 0 && !ud && uses_rdma_cm(v))
    usage_error("verbs: with rdma_cm the route decides the path MTU; --mtu needs --cm raw");
  if (v.gid_index >= 0 && uses_rdma_cm(v))
    usage_error("verbs: rdma_cm uses the GID of the address it binds; --gid-index needs --cm raw");
  if (r.signal_every > r.sq_depth)
    usage_error("verbs: --signal-every " + std::to_string(r.signal_every) + " exceeds --sq-depth " +
                std::to_string(r.sq_depth) + " (the send queue would fill with no completion to wait for)");
  if (v.post_list == 0 || v.post_list > r.sq_depth)
    usage_error("verbs: --post-list must be between 1 and --sq-depth (" + std::to_string(r.sq_depth) + "), got " +
                std::to_string(v.post_list));
  if (v.passive_rx && (op != verbs::Op::write || v.service != "rc"))
    usage_error("verbs: --passive-rx needs --op write on --service rc: only RC acknowledges a write, and the "
                "writer's acknowledgements are all a passive receiver's rate is taken from");
  if (r.rq_refill > q.rq_depth)
    usage_error("verbs: --rq-refill " + std::to_string(r.rq_refill) + " exceeds --rq-depth " + std::to_string(q.rq_depth));
}

}  // namespace

Caps VerbsTransport::caps(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v) {
  check_knobs(q, r, v);
  const DeviceProbe d = probe_device(v.device, v.port);
  // No device at all is connect()'s error (it names the Soft-RoCE guest).
  if (!d.found && !d.names.empty())
    usage_error("verbs: no RDMA device " + (v.device.empty() ? std::string("with") : "named '" + v.device + "' with") +
                " port " + std::to_string(v.port) + " (this host has: " + d.names + ")");
  uint64_t max = verbs::kMaxMsg;
  if (d.found && d.max_msg_sz) max = std::min<uint64_t>(max, d.max_msg_sz);
  if (v.service == "ud") {
    // One UD message is one packet: at most the path MTU (the 40 B GRH is
    // the receiver's, not counted). connect() checks the real path.
    const uint32_t active = d.found ? mtu_bytes(d.active_mtu) : 4096;
    max = v.mtu ? std::min(v.mtu, active) : active;
  }
  const verbs::Op op = verbs::op_of(r.op);
  const bool atomic = verbs::is_atomic(op);
  if (atomic && d.found && d.atomic_cap == IBV_ATOMIC_NONE)
    usage_error("verbs: " + (v.device.empty() ? std::string("the device") : v.device) + " has no atomics (atomic_cap none)");
  const bool marked_write = op == verbs::Op::write && !v.passive_rx;  // the receiver polls a mark (and trailer)
  if (marked_write) max -= verbs::kTrailerBytes;  // the trailer shares the message's slot
  Caps c{.max_msg_size = atomic ? verbs::kAtomicBytes : max, .max_inline = r.inline_size,
         .reliable = v.service == "rc", .ordered = v.service != "ud", .supports_write = v.service != "ud",
         .send_completions = true, .same_host_only = false,
         .max_msg_note = atomic ? "an atomic: 8 bytes"
                         : v.service == "ud" ? "the path MTU: a UD message is one packet (the receiver's 40 B GRH is "
                                               "extra); use rc or uc for larger messages"
                                             : "the device's max_msg_sz"};
  // --passive-rx: the writer's completions (RC acknowledgements) are its answers, as a read's.
  c.one_sided = verbs::is_one_sided(op) || v.passive_rx;
  c.fixed_msg_size = atomic ? verbs::kAtomicBytes : 0;
  c.registration = "ibv_reg_mr";
  c.ops_per_connection = true;
  if (marked_write)
    c.busy_only = "--op write completes nothing at the receiver, which polls memory (use --op write-imm to sleep on completions)";
  else if (c.one_sided)
    c.busy_only = "one-sided ops are polled, as perftest's";
  return c;
}

verbs::Op verbs::op_of(const std::string& name) {
  if (name == "send") return Op::send;
  if (name == "write-imm") return Op::write_imm;
  if (name == "write") return Op::write;
  if (name == "read") return Op::read;
  if (name == "atomic-fadd") return Op::fadd;
  if (name == "atomic-cswap") return Op::cswap;
  usage_error("verbs: no --op " + name);
}

VerbsTransport::VerbsTransport(const QueueOptions& q, const RdmaOptions& r, const VerbsOptions& v, const Use& use)
    : queue_(q), rdma_(r), verbs_(v), send_window_(use.send_window), in_flight_(use.in_flight),
      fixed_sizes_(use.fixed_sizes), role_(use.role), ud_(v.service == "ud"), event_recv_(use.poll == Poll::event),
      event_send_(use.poll_send == Poll::event),
      op_(verbs::op_of(r.op)), one_sided_(verbs::is_one_sided(op_) || v.passive_rx), reliable_(v.service == "rc") {}

VerbsTransport::~VerbsTransport() {
  if (use_cm_ && cm_id_ && qp_ && !ud_) rdma_disconnect(cm_id_);
  if (qp_) {
    if (use_cm_) rdma_destroy_qp(cm_id_);
    else ibv_destroy_qp(qp_);
  }
  if (ah_) ibv_destroy_ah(ah_);
  for (ibv_mr* mr : {tx_mr_, rx_mr_, credit_mr_})
    if (mr) ibv_dereg_mr(mr);
  if (tx_mem_) munmap(tx_mem_, tx_bytes_);
  if (rx_mem_) munmap(rx_mem_, rx_bytes_);
  if (credit_page_) munmap(credit_page_, 4096);
  if (send_cq_) ibv_destroy_cq(send_cq_);
  if (recv_cq_) ibv_destroy_cq(recv_cq_);
  for (ibv_comp_channel* ch : {recv_channel_, send_channel_})
    if (ch) ibv_destroy_comp_channel(ch);
  if (pd_) ibv_dealloc_pd(pd_);
  if (cm_id_) rdma_destroy_id(cm_id_);
  if (listen_id_) rdma_destroy_id(listen_id_);
  if (cm_channel_) rdma_destroy_event_channel(cm_channel_);
  if (!use_cm_ && ctx_) ibv_close_device(ctx_);
  if (dev_list_) ibv_free_device_list(dev_list_);
}

// ---- errors ----

void VerbsTransport::fail_text(const std::string& text) const {
  if (failure_) return;  // the first error is the cause; flushes follow it
  failure_text_ = text;
  failure_ = failure_text_.c_str();
}

void VerbsTransport::fail_wc(const ibv_wc& wc, const char* what) {
  fail_text(std::string("verbs: ") + what + " completion error: " + ibv_wc_status_str(wc.status) +
            " (status " + std::to_string(wc.status) + ", vendor error " + std::to_string(wc.vendor_err) + ")");
}

void VerbsTransport::fail_errno(const char* what, int err) {
  fail_text(std::string("verbs: ") + what + ": " + std::strerror(err));
}

void VerbsTransport::check_events() const {
  pollfd fds[2];
  nfds_t n = 0;
  if (ctx_) fds[n++] = {ctx_->async_fd, POLLIN, 0};
  if (cm_channel_) fds[n++] = {cm_channel_->fd, POLLIN, 0};
  if (n == 0 || ::poll(fds, n, 0) <= 0) return;
  ibv_async_event ae;
  while (ctx_ && ibv_get_async_event(ctx_, &ae) == 0) {
    switch (ae.event_type) {
      case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_CQ_ERR: case IBV_EVENT_DEVICE_FATAL: case IBV_EVENT_PORT_ERR:
        fail_text(std::string("verbs: async event: ") + ibv_event_type_str(ae.event_type));
        break;
      default:
        break;
    }
    ibv_ack_async_event(&ae);
  }
  rdma_cm_event* ev;
  while (cm_channel_ && rdma_get_cm_event(cm_channel_, &ev) == 0) {
    if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
      fail_text(std::string("verbs: rdma_cm: ") + rdma_event_str(ev->event) + " (the other end went away?)");
    rdma_ack_cm_event(ev);
  }
}

// ---- slow parts of the data path ----

void VerbsTransport::repost_recvs() {
  const uint32_t batch = refill_.held();
  if (op_ != verbs::Op::write) {  // a plain write's slot needs no receive WR, only the credit
    for (uint32_t j = 0; j < batch; ++j) {
      const uint32_t i = (rx_repost_at_ + j) % rx_slots_;
      recv_wrs_[i].next = j + 1 < batch ? &recv_wrs_[(i + 1) % rx_slots_] : nullptr;
    }
    ibv_recv_wr* bad;
    if (int rc = ibv_post_recv(qp_, &recv_wrs_[rx_repost_at_], &bad); rc != 0) {
      fail_errno("ibv_post_recv", rc);
      return;
    }
    rx_repost_at_ = (rx_repost_at_ + batch) % rx_slots_;
  }
  refill_.gave_back(batch);
  if (op_ == verbs::Op::send) return;
  // An end that has written to the other end since the last batch will likely
  // write again soon, and that write carries the credit (piggy_).
  const bool writing = piggy_ && credits_.written() != written_at_refill_;
  written_at_refill_ = credits_.written();
  if (writing) {
    refill_.credit_due = true;
    credit_wait_ = 0;
    return;
  }
  post_credit();
}

// UC plain write: if one of the next few slots holds its message, the ones
// before it were lost; they are given back as if taken.
bool VerbsTransport::skip_lost() {
  for (uint64_t ahead = 1; ahead <= verbs::kSkipAhead; ++ahead) {
    if (!slot_marked(rx_seq_ + ahead)) continue;
    for (uint64_t k = 0; k < ahead; ++k) release(RecvMsg{});
    rx_seq_ += ahead;
    return true;
  }
  return false;
}

bool VerbsTransport::post_listed() {
  const uint32_t n = listed_;
  if (!n) return true;
  listed_ = 0;
  list_wr_[n - 1].next = nullptr;
  ibv_send_wr* bad;
  if (int rc = ibv_post_send(qp_, list_wr_.data(), &bad); rc != 0) {
    fail_errno("ibv_post_send (a list)", rc);
    return false;
  }
  return true;
}

void VerbsTransport::post_credit() {
  post_listed();  // the credit's WR number comes after theirs: completions must come in that order
  if (posted_ - completed_ >= sq_limit_) {
    reap_sends();
    if (posted_ - completed_ >= sq_limit_) {
      refill_.credit_due = true;  // retried from poll_recv / poll_send_comp
      return;
    }
  }
  refill_.credit_due = false;
  credit_wait_ = 0;
  ++credit_writes_;
  credit_page_[1] = refill_.given_back();  // monotonic: a later value overwriting an unsent one is still right
  ibv_sge sge{reinterpret_cast<uintptr_t>(&credit_page_[1]), 8, credit_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = posted_;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = remote_.credit_addr;
  wr.wr.rdma.rkey = remote_.credit_rkey;
  wr.send_flags = max_inline_ >= 8 ? IBV_SEND_INLINE : 0;
  if (++unsignaled_ >= signal_every_) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_ = 0;
  }
  wr_ids_[posted_ & wr_mask_] = verbs::kNoReport;
  ibv_send_wr* bad;
  if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0) {
    fail_errno("ibv_post_send (credit write)", rc);
    return;
  }
  ++posted_;
}

bool VerbsTransport::wait_channel(ibv_comp_channel* ch, int ms) {
  pollfd pfd{ch->fd, POLLIN, 0};
  if (::poll(&pfd, 1, ms) <= 0) return false;
  bool woke = false;
  ibv_cq* cq;
  void* cq_ctx;
  while (ibv_get_cq_event(ch, &cq, &cq_ctx) == 0) {  // non-blocking fd: drains what is there
    ibv_ack_cq_events(cq, 1);
    woke = true;
  }
  return woke;
}

bool VerbsTransport::wait_recv(RecvMsg& m) {
  if (poll_recv(m)) return true;
  if (failure_) return false;
  if (int rc = ibv_req_notify_cq(recv_cq_, 0); rc != 0) {
    fail_errno("ibv_req_notify_cq", rc);
    return false;
  }
  if (poll_recv(m)) return true;  // it arrived before the CQ was armed
  wait_channel(recv_channel_, kWaitSliceMs);
  return poll_recv(m);            // poll again after waking, as the thesis' event mode
}

void VerbsTransport::wait_send() {
  if (reap_sends() > 0 || failure_) return;
  if (posted_ - completed_ >= sq_limit_) {
    if (int rc = ibv_req_notify_cq(send_cq_, 0); rc != 0) {
      fail_errno("ibv_req_notify_cq", rc);
      return;
    }
    if (reap_sends() > 0) return;
    wait_channel(send_channel_, kWaitSliceMs);
    reap_sends();
    return;
  }
  // Waiting for the other end's credits: they come by RDMA write, which raises no
  // completion here, so sleep briefly and let the caller look again.
  timespec ts{0, 20'000};
  nanosleep(&ts, nullptr);
}

// ---- control plane ----

void VerbsTransport::setup(uint64_t max_msg) {
  device_name_ = ibv_get_device_name(ctx_->device);
  if (ibv_query_port(ctx_, static_cast<uint8_t>(port_), &port_attr_) != 0)
    usage_error("verbs: " + device_name_ + " has no port " + std::to_string(port_));
  if (port_attr_.state != IBV_PORT_ACTIVE)
    runtime_error("verbs: " + device_name_ + " port " + std::to_string(port_) + " is not active (" +
                  ibv_port_state_str(port_attr_.state) + ")");
  ibv_device_attr da;
  if (ibv_query_device(ctx_, &da) != 0) sys_error("verbs: ibv_query_device");
  set_nonblock(ctx_->async_fd);
  // rdma_cm uses the GID of the address it bound; raw mode: --gid-index, or auto.
  gid_index_ = verbs_.gid_index >= 0 ? verbs_.gid_index : auto_gid_index(ctx_, port_, have_local_gid_ ? &local_gid_ : nullptr);
  if (ibv_query_gid(ctx_, static_cast<uint8_t>(port_), gid_index_, &gid_) != 0)
    usage_error("verbs: " + device_name_ + " port " + std::to_string(port_) + " has no GID index " + std::to_string(gid_index_));

  path_mtu_ = port_attr_.active_mtu;
  if (verbs_.mtu) path_mtu_ = std::min(path_mtu_, mtu_enum(verbs_.mtu));
  if (ud_) {
    ud_max_msg_ = mtu_bytes(path_mtu_);
    if (max_msg > ud_max_msg_)
      usage_error("verbs: UD messages are one packet: " + std::to_string(max_msg) + " B exceeds the path MTU of " +
                  std::to_string(ud_max_msg_) + " B on " + device_name_);
  }

  pd_ = ibv_alloc_pd(ctx_);
  if (!pd_) sys_error("verbs: ibv_alloc_pd");
  // Each CQ sleeps on a channel of its own where its side is event-driven
  // (--poll-recv, --poll-send: the thesis' busy receive queue beside an
  // event-driven send completion queue).
  auto channel = [&](bool event) -> ibv_comp_channel* {
    if (!event) return nullptr;
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
    if (!ch) sys_error("verbs: ibv_create_comp_channel");
    set_nonblock(ch->fd);
    return ch;
  };
  recv_channel_ = channel(event_recv_);
  send_channel_ = channel(event_send_);

  // Rings: one slot per WR, cut to kRingBudget bytes for big messages. A
  // read or atomic with a bound on what is in flight (lat: 1) takes no more
  // send WRs and answer slots, so that each op reuses the same WQE, CQE and
  // slots, as perftest's lat runs (tx depth 1) do, instead of cycling through
  // pages of them (docs/performance.md). Sends and writes keep their queues
  // (--signal-every needs room to leave WRs unsignaled; a smaller queue
  // measured no faster for them), and so does bw (a ring cut to its window
  // measured no faster either).
  sq_want_ = std::min<uint32_t>(rdma_.sq_depth, static_cast<uint32_t>(da.max_qp_wr));
  uint32_t rq_want = std::min<uint32_t>(queue_.rq_depth, static_cast<uint32_t>(da.max_qp_wr));
  if (one_sided_ && in_flight_) {
    sq_want_ = std::min(sq_want_, in_flight_);
    rq_want = std::min(rq_want, in_flight_);
  }
  rx_offset_ = ud_ ? verbs::kGrhBytes : 0;
  // A plain write's trailer (its length) only where sizes vary: with fixed
  // sizes the slots stay a multiple of 64 B that pages hold whole (1 KiB:
  // 4 a page, where 1088 B slots put every fourth write across two pages,
  // about 1 % slower in the Soft-RoCE guest); a point under kMinFixedBytes
  // still takes the trailer, which a 64 B slot holds.
  const uint64_t trailer = marked_write() && !fixed_sizes_ ? verbs::kTrailerBytes : 0;
  rx_slot_size_ = round_up((ud_ ? verbs::kGrhBytes + ud_max_msg_ : max_msg + trailer), 64);
  rx_slots_ = static_cast<uint32_t>(std::min<uint64_t>(rq_want, std::max<uint64_t>(2, verbs::kRingBudget / rx_slot_size_)));
  tx_slot_size_ = round_up(max_msg + trailer, 64);
  if (verbs::is_one_sided(op_))
    rd_atomic_ = std::max(1u, std::min({verbs::kMaxRdAtomic, static_cast<uint32_t>(da.max_qp_rd_atom),
                                      static_cast<uint32_t>(da.max_qp_init_rd_atom)}));
  tx_slots_ = static_cast<uint32_t>(std::min<uint64_t>(sq_want_, std::max<uint64_t>(1, verbs::kRingBudget / tx_slot_size_)));

  send_cq_ = ibv_create_cq(ctx_, static_cast<int>(sq_want_), nullptr, send_channel_, 0);
  recv_cq_ = ibv_create_cq(ctx_, static_cast<int>(rx_slots_), nullptr, recv_channel_, 0);
  if (!send_cq_ || !recv_cq_) sys_error("verbs: ibv_create_cq");

  auto map = [](size_t bytes) {
    void* m = map_faulted_in(bytes, -1, nullptr);  // registration pins it
    if (m == MAP_FAILED) sys_error("verbs: cannot allocate " + std::to_string(bytes) + " bytes of buffers");
    return m;
  };
  auto reg = [&](void* addr, size_t bytes, int access, const char* what) {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, bytes, access);
    if (!mr)
      sys_error(std::string("verbs: cannot register the ") + what + " (" + std::to_string(bytes) +
                " B; raise `ulimit -l` or lower --rq-depth/--sq-depth)");
    return mr;
  };
  rx_bytes_ = rx_slots_ * rx_slot_size_;
  tx_bytes_ = tx_slots_ * tx_slot_size_;
  rx_mem_ = map(rx_bytes_);
  tx_mem_ = map(tx_bytes_);
  credit_page_ = static_cast<uint64_t*>(map(4096));
  rx_ring_ = static_cast<std::byte*>(rx_mem_);
  tx_ring_ = static_cast<std::byte*>(tx_mem_);
  credit_in_ = &credit_page_[0];
  rx_mr_ = reg(rx_mem_, rx_bytes_, remote_access(), "receive ring");
  tx_mr_ = reg(tx_mem_, tx_bytes_, IBV_ACCESS_LOCAL_WRITE, "send ring");
  credit_mr_ = reg(credit_page_, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "credit word");

  // Receive WRs, one per slot, posted as chains. Write mode needs no buffer
  // in the WR: the data lands where the writer put it.
  recv_wrs_.resize(rx_slots_);
  recv_sges_.resize(rx_slots_);
  for (uint32_t i = 0; i < rx_slots_; ++i) {
    recv_sges_[i] = {reinterpret_cast<uintptr_t>(rx_ring_ + i * rx_slot_size_), static_cast<uint32_t>(rx_slot_size_),
                     rx_mr_->lkey};
    recv_wrs_[i] = {};
    recv_wrs_[i].wr_id = i;
    recv_wrs_[i].sg_list = op_ == verbs::Op::write_imm ? nullptr : &recv_sges_[i];
    recv_wrs_[i].num_sge = op_ == verbs::Op::write_imm ? 0 : 1;
  }
  os_len_.assign(rx_slots_, 0);
  psn_ = std::random_device{}() & 0xffffff;
}

ibv_qp_init_attr VerbsTransport::qp_init_attr() const {
  ibv_qp_init_attr a{};
  a.send_cq = send_cq_;
  a.recv_cq = recv_cq_;
  a.cap.max_send_wr = std::min<uint32_t>(sq_want_, static_cast<uint32_t>(send_cq_->cqe));
  a.cap.max_recv_wr = rx_slots_;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = rdma_.inline_size;
  a.qp_type = verbs_.service == "rc" ? IBV_QPT_RC : verbs_.service == "uc" ? IBV_QPT_UC : IBV_QPT_UD;
  a.sq_sig_all = 0;
  return a;
}

void VerbsTransport::after_qp_created(const ibv_qp_init_attr& granted) {
  sq_granted_ = granted.cap.max_send_wr;
  rq_granted_ = granted.cap.max_recv_wr;
  max_inline_ = granted.cap.max_inline_data;
  inline_size_ = rdma_.inline_size;
  // WRs in flight at most: the SQ, the send ring, and the send window asked for (bw: --tx-depth).
  sq_limit_ = std::min(sq_granted_, tx_slots_);
  if (send_window_) sq_limit_ = std::min(sq_limit_, send_window_);
  sq_limit_ = std::max(sq_limit_, 1u);
  // A signaled WR within every sq_limit_ posts, so a full SQ always has a
  // completion coming.
  signal_every_ = rdma_.signal_every ? std::min(rdma_.signal_every, sq_limit_) : std::max(1u, sq_limit_ / 2);
  post_list_ = std::min(verbs_.post_list, sq_limit_);
  list_wr_.assign(post_list_, ibv_send_wr{});
  list_sge_.assign(post_list_, ibv_sge{});
  rq_refill_ = rdma_.rq_refill ? std::min(rdma_.rq_refill, rx_slots_) : std::max(1u, rx_slots_ / 4);
  wr_ids_.assign(pow2_at_least(sq_limit_), 0);
  wr_mask_ = wr_ids_.size() - 1;
  done_.assign(pow2_at_least(sq_limit_), 0);
  done_mask_ = done_.size() - 1;

  if (op_ != verbs::Op::send && op_ != verbs::Op::write_imm) return;  // nothing consumes a receive WR
  recv_wrs_.back().next = nullptr;
  for (uint32_t i = 0; i + 1 < rx_slots_; ++i) recv_wrs_[i].next = &recv_wrs_[i + 1];
  ibv_recv_wr* bad;
  if (int rc = ibv_post_recv(qp_, recv_wrs_.data(), &bad); rc != 0)
    runtime_error(std::string("verbs: posting the first receives failed: ") + std::strerror(rc));
}

const char* VerbsTransport::connect_covers() const {
  if (use_cm_)
    return "rdma_cm: an event channel and id; server: bind, listen, its port over the control channel, the connect "
           "request; client: address and route resolution; both: PD, CQs, the send and receive rings mapped and "
           "registered, rdma_create_qp, receives posted, rdma_connect/rdma_accept to ESTABLISHED, endpoint info "
           "swapped over the control channel, a control-channel barrier (3 control-channel round trips)";
  return "raw: the device opened (the one holding the control address), PD, CQs, the send and receive rings mapped "
         "and registered, ibv_create_qp, INIT, receives posted, QP number, GID and PSN swapped over the control "
         "channel, RTR, RTS, a control-channel barrier (2 control-channel round trips)";
}

void* VerbsTransport::register_memory(void* buf, size_t len) {
  return ibv_reg_mr(pd_, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

int VerbsTransport::deregister_memory(void* mr) { return ibv_dereg_mr(static_cast<ibv_mr*>(mr)); }

void VerbsTransport::describe(JsonObj& o) const {
  o.add("device", device_name_).add("port", port_).add("gid_index", gid_index_).add("gid", gid_str(gid_))
      .add("link_layer", port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET ? "ethernet" : "infiniband")
      .add("recv_cq", event_recv_ ? "event channel" : "busy-polled")
      .add("send_cq", event_send_ ? "event channel" : "busy-polled").add("service", verbs_.service).add("op", rdma_.op).add("cm", use_cm_ ? "rdma_cm" : "raw")
      .add("path_mtu", mtu_bytes(path_mtu_)).add("active_mtu", mtu_bytes(port_attr_.active_mtu))
      .add("inline_requested", rdma_.inline_size).add("max_inline_granted", max_inline_)
      .add("sq_depth_granted", sq_granted_).add("rq_depth_granted", rq_granted_)
      .add("send_window", sq_limit_).add("signal_every", signal_every_).add("post_list", post_list_).add("rq_refill", rq_refill_)
      .add("recv_slots", rx_slots_).add("recv_slot_bytes", rx_slot_size_)
      .add("send_slots", tx_slots_).add("send_slot_bytes", tx_slot_size_);
  if (ud_) o.add("grh_bytes", verbs::kGrhBytes).add("max_msg_size", ud_max_msg_).add("qkey", remote_.qkey);
  if (op_ == verbs::Op::write_imm) o.add("write_credits", "the receiver RDMA-writes its repost count every rq_refill receives");
  if (marked_write())
    o.add("passive_rx", false).add("write_credits", "the receiver RDMA-writes its count of slots read every rq_refill messages, unless its writes carry "
                           "it (fixed sizes from 16 B)")
        .add("write_completion", "receiver polls the slot's last byte (a lap mark after the payload, and after its "
                                 "length where sizes vary)");
  else if (op_ == verbs::Op::write)
    o.add("passive_rx", true)
        .add("write_completion", "the writer's RC acknowledgement; the receiver takes no part and the writer "
                                 "overwrites its ring without credits (perftest's ib_write_bw)");
  if (verbs::is_one_sided(op_)) o.add("rd_atomic", rd_atomic_);
  o.add("libibverbs_built_with", FM_LIBIBVERBS_VERSION);
}

}  // namespace fm
