// verbs' connection: endpoint info swapped over the control channel, then
// the QP connected by rdma_cm, or raw (RESET -> INIT -> RTR -> RTS by hand);
// UD address handles.
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/remote_parse.hpp"
#include "transport/rdma/verbs.hpp"
#include "transport/rdma/verbs_device.hpp"
#include "transport/sock/sock.hpp"

namespace fm {

using namespace verbs;

verbs::EndpointInfo VerbsTransport::local_info() const {
  verbs::EndpointInfo e{};
  e.qpn = qp_->qp_num;
  e.psn = psn_;
  e.lid = port_attr_.lid;
  e.active_mtu = static_cast<uint8_t>(port_attr_.active_mtu);
  std::memcpy(e.gid, gid_.raw, 16);
  e.ring_slots = rx_slots_;
  e.ring_rkey = rx_mr_->rkey;
  e.ring_addr = reinterpret_cast<uintptr_t>(rx_ring_);
  e.slot_size = rx_slot_size_;
  e.credit_rkey = credit_mr_->rkey;
  e.credit_addr = reinterpret_cast<uintptr_t>(credit_in_);
  if (ud_) {
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    if (ibv_query_qp(qp_, &a, IBV_QP_QKEY, &ia) != 0) sys_error("verbs: ibv_query_qp");
    e.qkey = a.qkey;
  }
  return e;
}

ibv_ah_attr VerbsTransport::ah_attr_to_remote() const {
  ibv_ah_attr ah{};
  ah.dlid = remote_.lid;
  ah.port_num = static_cast<uint8_t>(port_);
  // RoCE always routes by GID; InfiniBand only when a GID index is asked for.
  if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET || verbs_.gid_index >= 0) {
    ah.is_global = 1;
    std::memcpy(ah.grh.dgid.raw, remote_.gid, 16);
    ah.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    ah.grh.hop_limit = 64;
  }
  return ah;
}

void VerbsTransport::make_ah(const ibv_ah_attr& attr) {
  ibv_ah_attr a = attr;
  ah_ = ibv_create_ah(pd_, &a);
  if (!ah_) sys_error("verbs: ibv_create_ah (UD address handle to the other end)");
}

namespace {
std::string info_blob(const verbs::EndpointInfo& e) { return std::string(reinterpret_cast<const char*>(&e), sizeof e); }
verbs::EndpointInfo info_of(const std::string& s) {
  if (s.size() != sizeof(verbs::EndpointInfo)) runtime_error("verbs: malformed endpoint info from the other end (version mismatch?)");
  verbs::EndpointInfo e;
  std::memcpy(&e, s.data(), sizeof e);
  // active_mtu becomes an ibv_mtu and a byte count; QP numbers are 24 bits.
  if (e.active_mtu < IBV_MTU_256 || e.active_mtu > IBV_MTU_4096 || e.qpn > 0xffffff)
    runtime_error("verbs: impossible endpoint info from the other end (mtu code " + std::to_string(e.active_mtu) + ", qpn " +
                  std::to_string(e.qpn) + ")");
  return e;
}
void modify(ibv_qp* qp, ibv_qp_attr& a, int mask, const char* to) {
  if (int rc = ibv_modify_qp(qp, &a, mask); rc != 0)
    runtime_error(std::string("verbs: moving the QP to ") + to + " failed: " + std::strerror(rc));
}
}  // namespace

void VerbsTransport::connect_raw(Ctrl& ctrl) {
  ibv_qp_init_attr ia = qp_init_attr();
  steps_.step("device, PD, CQs and rings");
  qp_ = ibv_create_qp(pd_, &ia);
  steps_.step("ibv_create_qp");
  if (!qp_)
    sys_error("verbs: ibv_create_qp (" + verbs_.service + ", sq " + std::to_string(ia.cap.max_send_wr) + ", rq " +
              std::to_string(ia.cap.max_recv_wr) + ", inline " + std::to_string(ia.cap.max_inline_data) +
              " B: more than " + device_name_ + " grants?)");

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port_);
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (ud_) {
    a.qkey = kRawQkey;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags = remote_access() & ~IBV_ACCESS_LOCAL_WRITE;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  modify(qp_, a, mask, "INIT");
  steps_.step("to INIT");
  after_qp_created(ia);  // posts the receives (allowed from INIT on)

  remote_ = info_of(ctrl.exchange(info_blob(local_info()), "verbs endpoint info"));
  steps_.step("receives posted, endpoint info swapped");

  a = {};
  a.qp_state = IBV_QPS_RTR;
  mask = IBV_QP_STATE;
  if (!ud_) {
    path_mtu_ = std::min(path_mtu_, static_cast<ibv_mtu>(remote_.active_mtu));
    a.path_mtu = path_mtu_;
    a.dest_qp_num = remote_.qpn;
    a.rq_psn = remote_.psn;
    a.ah_attr = ah_attr_to_remote();
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (verbs_.service == "rc") {
      a.max_dest_rd_atomic = static_cast<uint8_t>(rd_atomic_);
      a.min_rnr_timer = 12;  // 0.64 ms, perftest's
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  modify(qp_, a, mask, "RTR");
  steps_.step("to RTR");

  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn_;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (verbs_.service == "rc") {
    a.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try
    a.retry_cnt = 7;
    a.rnr_retry = 7;  // retry forever while the other end has no receive posted
    a.max_rd_atomic = static_cast<uint8_t>(rd_atomic_);
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  modify(qp_, a, mask, "RTS");
  steps_.step("to RTS");

  if (ud_) {
    ud_max_msg_ = std::min(ud_max_msg_, mtu_bytes(static_cast<ibv_mtu>(remote_.active_mtu)));
    make_ah(ah_attr_to_remote());
  }
}

rdma_cm_event* VerbsTransport::wait_cm_event(const Ctrl& ctrl, rdma_cm_event_type want, const char* what,
                                             uint32_t timeout_ms) {
  const auto now = [] { return std::chrono::steady_clock::now(); };
  const auto deadline = now() + std::chrono::milliseconds(timeout_ms);
  // rdma_cm never hears of an end that died or froze before its connect: the
  // control channel (EOF, or no heartbeat for kSilenceMs) tells.
  RemoteWatch watch(ctrl);
  for (;;) {
    rdma_cm_event* ev;
    if (rdma_get_cm_event(cm_channel_, &ev) == 0) {
      if (ev->event == want) return ev;
      std::string msg = std::string("verbs: rdma_cm: waiting for ") + what + ", got " + rdma_event_str(ev->event);
      if (ev->status) msg += " (status " + std::to_string(ev->status) + ")";
      rdma_ack_cm_event(ev);
      runtime_error(msg);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) sys_error("verbs: rdma_get_cm_event");
    watch.check(std::string("verbs: rdma_cm ") + what);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now());
    if (left.count() <= 0)
      runtime_error(std::string("verbs: rdma_cm: no ") + what + " within " + std::to_string(timeout_ms) + " ms");
    pollfd pfd{cm_channel_->fd, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), kWaitSliceMs)));
  }
}

void VerbsTransport::connect_cm(Ctrl& ctrl, uint64_t max_msg) {
  cm_channel_ = rdma_create_event_channel();
  if (!cm_channel_) sys_error("verbs: rdma_create_event_channel");
  set_nonblock(cm_channel_->fd);
  const rdma_port_space ps = ud_ ? RDMA_PS_UDP : RDMA_PS_TCP;
  const uint32_t tmo = ctrl.timeout_ms();
  sockaddr_storage src;
  sockaddr_storage dst;
  sock::to_sockaddr(ctrl.local_addr(), 0, &src);

  if (role_ == Role::server) {
    // Listen on the control connection's address: that picks the device.
    if (rdma_create_id(cm_channel_, &listen_id_, nullptr, ps) != 0) sys_error("verbs: rdma_create_id");
    if (rdma_bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&src)) != 0)
      sys_error("verbs: rdma_cm cannot bind " + ctrl.local_addr() + " (no RDMA device has this address?)");
    if (rdma_listen(listen_id_, 1) != 0) sys_error("verbs: rdma_listen");
    ctrl.exchange(std::to_string(ntohs(rdma_get_src_port(listen_id_))), "rdma_cm port");
    rdma_cm_event* ev = wait_cm_event(ctrl, RDMA_CM_EVENT_CONNECT_REQUEST, "the client's connect request", tmo);
    cm_id_ = ev->id;
    rdma_ack_cm_event(ev);
  } else {
    if (rdma_create_id(cm_channel_, &cm_id_, nullptr, ps) != 0) sys_error("verbs: rdma_create_id");
    const uint16_t port = static_cast<uint16_t>(parse_remote_u64(ctrl.exchange("", "rdma_cm port"), "rdma_cm port", 65535));
    sock::to_sockaddr(ctrl.remote_addr(), port, &dst);
    if (rdma_resolve_addr(cm_id_, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                          static_cast<int>(tmo)) != 0)
      sys_error("verbs: rdma_resolve_addr " + ctrl.remote_addr());
    rdma_ack_cm_event(wait_cm_event(ctrl, RDMA_CM_EVENT_ADDR_RESOLVED, "address resolution", tmo));
    steps_.step("port swapped, rdma_resolve_addr");
    if (rdma_resolve_route(cm_id_, static_cast<int>(tmo)) != 0) sys_error("verbs: rdma_resolve_route");
    rdma_ack_cm_event(wait_cm_event(ctrl, RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution", tmo));
    steps_.step("rdma_resolve_route");
  }

  ctx_ = cm_id_->verbs;
  port_ = cm_id_->port_num;
  const std::string chosen = ibv_get_device_name(ctx_->device);
  if (!verbs_.device.empty() && verbs_.device != chosen)
    usage_error("verbs: rdma_cm reaches " + ctrl.remote_addr() + " through " + chosen + ", not --device " + verbs_.device +
                " (use --cm raw to choose the device yourself)");
  setup(max_msg);
  steps_.step("PD, CQs and rings");
  ibv_qp_init_attr ia = qp_init_attr();
  if (rdma_create_qp(cm_id_, pd_, &ia) != 0)
    sys_error("verbs: rdma_create_qp (" + verbs_.service + ", sq " + std::to_string(ia.cap.max_send_wr) + ", rq " +
              std::to_string(ia.cap.max_recv_wr) + ", inline " + std::to_string(ia.cap.max_inline_data) +
              " B: more than " + device_name_ + " grants?)");
  qp_ = cm_id_->qp;
  after_qp_created(ia);
  steps_.step("rdma_create_qp, receives posted");

  rdma_conn_param cp{};
  cp.responder_resources = static_cast<uint8_t>(rd_atomic_);
  cp.initiator_depth = static_cast<uint8_t>(rd_atomic_);
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  ibv_ah_attr cm_ah{};
  if (role_ == Role::server) {
    if (rdma_accept(cm_id_, &cp) != 0) sys_error("verbs: rdma_accept");
    if (!ud_) rdma_ack_cm_event(wait_cm_event(ctrl, RDMA_CM_EVENT_ESTABLISHED, "the connection", tmo));
  } else {
    if (rdma_connect(cm_id_, &cp) != 0) sys_error("verbs: rdma_connect");
    rdma_cm_event* ev = wait_cm_event(ctrl, RDMA_CM_EVENT_ESTABLISHED, "the connection", tmo);
    if (ud_) cm_ah = ev->param.ud.ah_attr;  // from the server's SIDR reply
    rdma_ack_cm_event(ev);
    steps_.step("rdma_connect to ESTABLISHED");
  }
  remote_ = info_of(ctrl.exchange(info_blob(local_info()), "verbs endpoint info"));
  if (ud_) {
    // The client has the address handle rdma_cm resolved; the server builds
    // one from the client's GID (a SIDR request carries no return path).
    ud_max_msg_ = std::min(ud_max_msg_, mtu_bytes(static_cast<ibv_mtu>(remote_.active_mtu)));
    make_ah(role_ == Role::client ? cm_ah : ah_attr_to_remote());
  } else {
    ibv_qp_attr a;
    ibv_qp_init_attr qa;
    if (ibv_query_qp(qp_, &a, IBV_QP_PATH_MTU, &qa) == 0) path_mtu_ = a.path_mtu;
  }
}

void VerbsTransport::connect(Ctrl& ctrl, uint64_t max_msg) {
  steps_.start();
  int n = 0;
  if (ibv_device** list = ibv_get_device_list(&n)) ibv_free_device_list(list);
  if (n == 0) runtime_error(kNoDevice);
  use_cm_ = uses_rdma_cm(verbs_);
  have_local_gid_ = addr_to_gid(ctrl.local_addr(), &local_gid_);
  if (use_cm_) {
    connect_cm(ctrl, max_msg);
  } else {
    open_raw_device(ctrl);
    setup(max_msg);
    connect_raw(ctrl);
  }
  // Both ends have posted their receives before either sends.
  ctrl.barrier("verbs connected");
  steps_.step("the rest, the connected barrier");
}

}  // namespace fm
