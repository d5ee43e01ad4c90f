#include "transport/rdma/ofi.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <bit>
#include <chrono>
#include <map>
#include <set>

#include "fabmeter/clock.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/pages.hpp"

namespace fm {
namespace {

constexpr uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
constexpr size_t kHeaderBytes = 4096;          // receive region: credit word, then page-aligned slots
constexpr size_t kMaxRegionBytes = 64ull << 20;  // fewer slots for large messages rather than gigabytes
constexpr uint64_t kMaxMsg = 1ull << 30;      // post_send takes a 32-bit length; keep it sane
constexpr uint64_t kRxKey = 1, kBounceKey = 2;  // requested keys when the provider does not pick them
// Memory-registration modes this code implements (anything else: the provider is not offered).
constexpr uint64_t kMrModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
constexpr uint64_t kModes = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;

fi_ep_type ep_type_of(const std::string& ep) {
  return ep == "msg" ? FI_EP_MSG : ep == "rdm" ? FI_EP_RDM : FI_EP_DGRAM;
}

const char* ep_name(fi_ep_type t) {
  switch (t) {
    case FI_EP_MSG: return "msg";
    case FI_EP_RDM: return "rdm";
    case FI_EP_DGRAM: return "dgram";
    default: return "other";
  }
}

std::string who(const OfiOptions& o) { return "ofi: provider " + o.provider + " (" + o.ep + ")"; }

struct InfoPtr {
  fi_info* i = nullptr;
  ~InfoPtr() { if (i) fi_freeinfo(i); }
};

fi_info* hints_for(const RdmaOptions& r, const OfiOptions& o) {
  fi_info* h = fi_allocinfo();
  if (!h) runtime_error("ofi: fi_allocinfo failed");
  h->fabric_attr->prov_name = strdup(o.provider.c_str());
  h->ep_attr->type = ep_type_of(o.ep);
  // Remote CQ data (--op write-imm) is no capability bit: cq_data_size says it.
  h->caps = FI_MSG | (r.op == "write-imm" ? FI_RMA : 0);
  h->mode = kModes;
  h->domain_attr->mr_mode = kMrModes;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  return h;
}

bool is_sockaddr(uint32_t fmt) { return fmt == FI_SOCKADDR || fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6; }

// Why fi_getinfo found nothing, said in terms of what the user asked for.
[[noreturn]] void explain_no_match(const RdmaOptions& r, const OfiOptions& o, int rc) {
  InfoPtr broad;
  fi_info* h = fi_allocinfo();
  h->fabric_attr->prov_name = strdup(o.provider.c_str());
  h->mode = ~0ull;
  h->domain_attr->mr_mode = kMrModes | FI_MR_RAW | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT | FI_MR_ENDPOINT | FI_MR_HMEM;
  fi_getinfo(kApiVersion, nullptr, nullptr, 0, h, &broad.i);
  fi_freeinfo(h);
  if (!broad.i) {
    InfoPtr all;
    fi_getinfo(kApiVersion, nullptr, nullptr, 0, nullptr, &all.i);
    std::set<std::string> names;
    for (fi_info* i = all.i; i; i = i->next) names.insert(i->fabric_attr->prov_name);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    usage_error("ofi: no libfabric provider '" + o.provider + "' here (fi_getinfo: " + fi_strerror(-rc) +
                "; available: " + list + ")");
  }
  std::set<std::string> eps;
  const fi_info* same_ep = nullptr;
  bool rma = false, cq_data = false;
  for (fi_info* i = broad.i; i; i = i->next) {
    eps.insert(ep_name(i->ep_attr->type));
    if (i->ep_attr->type != ep_type_of(o.ep)) continue;
    same_ep = i;
    rma |= (i->caps & FI_RMA) != 0;
    cq_data |= i->domain_attr->cq_data_size > 0;
  }
  if (!same_ep) {
    std::string list;
    for (const auto& e : eps) list += (list.empty() ? "" : ", ") + e;
    usage_error("ofi: provider " + o.provider + " offers no " + o.ep + " endpoints (it offers: " + list + ")");
  }
  if (r.op == "write-imm" && !rma) usage_error(who(o) + " cannot do --op write-imm: it offers no RMA (FI_RMA)");
  if (r.op == "write-imm" && !cq_data)
    usage_error(who(o) + " cannot do --op write-imm: it carries no remote CQ data (FI_REMOTE_CQ_DATA, cq_data_size 0)");
  // fi_tostr() returns one static buffer: copy each result before the next call.
  std::string mode = fi_tostr(&same_ep->mode, FI_TYPE_MODE);
  std::string mr_mode = fi_tostr(&same_ep->domain_attr->mr_mode, FI_TYPE_MR_MODE);
  usage_error(who(o) + " needs modes fabmeter does not implement (mode [" + mode + "], mr_mode [" + mr_mode + "])");
}

// What the provider grants for these parameters, before any connection.
struct Probe {
  uint64_t max_msg;
  size_t inject_size;
  bool local_only;
  bool ordered;
};

const Probe& probe(const RdmaOptions& r, const OfiOptions& o) {
  static std::map<std::string, Probe> cache;
  const std::string key = o.provider + "|" + o.ep + "|" + r.op;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  fi_info* h = hints_for(r, o);
  InfoPtr info;
  int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, h, &info.i);
  fi_freeinfo(h);
  if (rc != 0 || !info.i) explain_no_match(r, o, rc);
  const fi_info* i = info.i;
  if (r.op == "write-imm" && i->domain_attr->cq_data_size == 0)
    usage_error(who(o) + " cannot do --op write-imm: it carries no remote CQ data (cq_data_size 0)");
  // Utility providers (rxm, rxd) report neither FI_LOCAL_COMM nor
  // FI_REMOTE_COMM, and neither does shm: only an explicit "local only" counts.
  const bool local_only = i->ep_attr->protocol == FI_PROTO_SHM ||
                          ((i->caps & FI_LOCAL_COMM) && !(i->caps & FI_REMOTE_COMM));
  Probe pr{std::min<uint64_t>(i->ep_attr->max_msg_size, kMaxMsg), i->tx_attr->inject_size, local_only,
           i->ep_attr->type != FI_EP_DGRAM && (i->tx_attr->msg_order & FI_ORDER_SAS)};
  return cache.emplace(key, pr).first->second;
}

void* map_region(size_t bytes, const char* what) {
  bool locked;  // best effort: registration may pin it anyway
  void* m = map_faulted_in(bytes, -1, &locked);
  if (m == MAP_FAILED) sys_error(std::string("ofi: cannot map ") + what);
  return m;
}

template <class F>
void close_fid(F*& f) {
  if (f) fi_close(&f->fid);
  f = nullptr;
}

}  // namespace

Caps OfiTransport::caps(const QueueOptions& q, const RdmaOptions& r, const OfiOptions& o) {
  if (r.op != "send" && r.op != "write-imm")
    usage_error("ofi takes --op send or write-imm; --op " + r.op + " (plain write, read, atomics) is the verbs transport's");
  const Probe& pr = probe(r, o);
  if (r.inline_size > pr.inject_size)
    usage_error(who(o) + " injects at most " + std::to_string(pr.inject_size) + " B (inject_size); --inline " +
                std::to_string(r.inline_size) + " is more");
  if (r.op == "write-imm" && pr.inject_size < sizeof(uint64_t))
    usage_error(who(o) + " cannot do --op write-imm here: credits need an 8-byte fi_inject_writedata, inject_size is " +
                std::to_string(pr.inject_size));
  if (r.signal_every > r.sq_depth)
    usage_error("--signal-every " + std::to_string(r.signal_every) + " is larger than --sq-depth " +
                std::to_string(r.sq_depth) + ": the send queue would fill with nothing signaled to free it");
  if (r.rq_refill > q.rq_depth)
    usage_error("--rq-refill " + std::to_string(r.rq_refill) + " is larger than --rq-depth " + std::to_string(q.rq_depth));
  return {.max_msg_size = pr.max_msg, .max_inline = r.inline_size, .reliable = o.ep != "dgram", .ordered = pr.ordered,
          .supports_write = r.op == "write-imm", .send_completions = true, .same_host_only = pr.local_only,
          .one_poll_mode = "both completion queues open with one wait object (FI_WAIT_FD, or none for busy polling)",
          .max_msg_note = who(o).substr(5) + "'s max_msg_size", .registration = "fi_mr_reg"};
}

OfiTransport::OfiTransport(const QueueOptions& q, const RdmaOptions& r, const OfiOptions& o, const Use& use)
    : write_(r.op == "write-imm"), queue_(q), rdma_(r), ofi_(o), role_(use.role), event_(use.poll == Poll::event) {
  send_window_ = use.send_window;
}

OfiTransport::~OfiTransport() {
  close_fid(ep_);
  close_fid(pep_);
  close_fid(rx_mr_);
  close_fid(bounce_mr_);
  close_fid(av_);
  close_fid(tx_cq_);
  close_fid(rx_cq_);
  close_fid(eq_);
  close_fid(domain_);
  close_fid(fabric_);
  if (info_) fi_freeinfo(info_);
  if (rx_region_) munmap(rx_region_, rx_region_bytes_);
  if (bounce_region_) munmap(bounce_region_, bounce_bytes_);
}

void OfiTransport::connect(Ctrl& ctrl, uint64_t max_msg) {
  slot_size_ = (std::max<uint64_t>(max_msg, 1) + 63) / 64 * 64;
  if (ofi_.ep == "msg") connect_msg(ctrl);
  else connect_connectionless(ctrl);
  if (write_) exchange_rma(ctrl);
  ctrl.barrier("ofi receives posted");
  // rdm providers connect on the first message (rxm, rxd, shm map the other end
  // then): a ping-pong first, so no measured message waits for that. The
  // client alone starts it: both sending first would race two connections.
  if (ofi_.ep == "rdm") handshake(ctrl);
}

void OfiTransport::handshake(const Ctrl& ctrl) {
  static const std::byte hello[1]{};
  const uint32_t timeout_ms = ctrl.timeout_ms();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  RemoteWatch watch(ctrl);  // an end that died or froze is noticed, not waited for
  auto check = [&](const char* what) {
    if (failure_) runtime_error(failure_);
    watch.check(who(ofi_) + " " + what);
    if (std::chrono::steady_clock::now() > deadline)
      runtime_error(who(ofi_) + ": no " + what + " within " + std::to_string(timeout_ms) + " ms of connecting");
  };
  auto send = [&] {
    while (!post_send(hello, sizeof hello, kSendSignaled, 0)) check("room to send the first message");
  };
  if (role_ == Role::client) send();
  RecvMsg m{};
  while (!poll_recv(m)) {
    reap_tx(-1);
    check("first message from the other end");
  }
  release(m);
  if (role_ == Role::server) send();
  while (tx_freed_ < tx_posted_) {
    reap_tx(-1);
    check("completion of the first message");
  }
  txq_head_ = txq_tail_;
}

// This end's fi_info: for socket-addressed providers, on the address the
// control channel uses (so two-host runs need no extra flags).
static fi_info* local_info(const RdmaOptions& r, const OfiOptions& o, const Ctrl& ctrl) {
  fi_info* h = hints_for(r, o);
  fi_info* info = nullptr;
  int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, h, &info);
  if (rc == 0 && is_sockaddr(info->addr_format)) {
    fi_freeinfo(info);
    info = nullptr;
    rc = fi_getinfo(kApiVersion, ctrl.local_addr().c_str(), nullptr, FI_SOURCE, h, &info);
    if (rc != 0) {
      fi_freeinfo(h);
      runtime_error(who(o) + ": nothing on the control channel's address " + ctrl.local_addr() + " (fi_getinfo: " +
                    fi_strerror(-rc) + ")");
    }
  }
  fi_freeinfo(h);
  if (rc != 0) explain_no_match(r, o, rc);
  return info;
}

static std::string name_of(fid_t fid, const char* what) {
  std::string name(256, '\0');
  size_t len = name.size();
  int rc = fi_getname(fid, name.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    name.resize(len);
    rc = fi_getname(fid, name.data(), &len);
  }
  if (rc != 0) runtime_error(std::string("ofi: fi_getname of the ") + what + ": " + fi_strerror(-rc));
  name.resize(len);
  return name;
}

void OfiTransport::connect_msg(Ctrl& ctrl) {
  fi_eq_attr eq_attr{};
  eq_attr.size = 16;
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  auto wait_event = [&](uint32_t expect, fi_eq_cm_entry& entry, const char* what) {
    uint32_t event = 0;
    // In slices: an end that died or froze before its connect is noticed on
    // the control channel, not after the whole timeout.
    RemoteWatch watch(ctrl);
    const uint64_t deadline = Clock::mono_ns() + uint64_t(ctrl.timeout_ms()) * 1000000;
    ssize_t rc;
    while ((rc = fi_eq_sread(eq_, &event, &entry, sizeof entry, kWaitSliceMs, 0)) == -FI_EAGAIN ||
           rc == -FI_ETIMEDOUT) {
      watch.check(who(ofi_) + " " + what);
      if (Clock::mono_ns() > deadline) break;
    }
    if (rc == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      fi_eq_readerr(eq_, &err, 0);
      runtime_error(who(ofi_) + ": " + what + ": " + fi_strerror(err.err) + " (" +
                    fi_eq_strerror(eq_, err.prov_errno, err.err_data, nullptr, 0) + ")");
    }
    if (rc == -FI_EAGAIN || rc == -FI_ETIMEDOUT)
      runtime_error(who(ofi_) + ": no " + what + " within " + std::to_string(ctrl.timeout_ms()) + " ms");
    if (rc < 0) runtime_error(who(ofi_) + ": " + what + ": fi_eq_sread: " + fi_strerror(static_cast<int>(-rc)));
    if (event != expect) runtime_error(who(ofi_) + ": " + what + ": unexpected connection event " + std::to_string(event));
  };

  if (role_ == Role::server) {
    fi_info* pep_info = local_info(rdma_, ofi_, ctrl);
    const uint32_t pep_info_format = pep_info->addr_format;
    int rc = fi_fabric(pep_info->fabric_attr, &fabric_, nullptr);
    if (rc == 0) rc = fi_eq_open(fabric_, &eq_attr, &eq_, nullptr);
    if (rc == 0) rc = fi_passive_ep(fabric_, pep_info, &pep_, nullptr);
    if (rc == 0) rc = fi_pep_bind(pep_, &eq_->fid, 0);
    if (rc == 0) rc = fi_listen(pep_);
    fi_freeinfo(pep_info);
    if (rc != 0) runtime_error(who(ofi_) + ": cannot listen: " + fi_strerror(-rc));
    // The client needs the address format with the address (fabtests does the same).
    uint32_t fmt = pep_info_format;
    std::string blob(reinterpret_cast<const char*>(&fmt), sizeof fmt);
    ctrl.exchange(blob + name_of(&pep_->fid, "passive endpoint"), "ofi listen address");
    fi_eq_cm_entry entry{};
    wait_event(FI_CONNREQ, entry, "connection request");
    info_ = entry.info;
    open_domain_and_ep(info_);
    rc = fi_accept(ep_, nullptr, 0);
    if (rc != 0) runtime_error(who(ofi_) + ": fi_accept: " + fi_strerror(-rc));
    wait_event(FI_CONNECTED, entry, "established connection");
  } else {
    std::string blob = ctrl.exchange("", "ofi listen address");
    uint32_t fmt;
    if (blob.size() <= sizeof fmt || blob.size() > 4096) runtime_error("ofi: malformed listen address from the server");
    std::memcpy(&fmt, blob.data(), sizeof fmt);
    std::string server = blob.substr(sizeof fmt);
    fi_info* h = hints_for(rdma_, ofi_);
    h->addr_format = fmt;
    h->dest_addr = malloc(server.size());
    std::memcpy(h->dest_addr, server.data(), server.size());
    h->dest_addrlen = server.size();
    fi_info* info = nullptr;
    int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, h, &info);
    fi_freeinfo(h);
    if (rc != 0) runtime_error(who(ofi_) + ": cannot reach the server's address (fi_getinfo: " + fi_strerror(-rc) + ")");
    info_ = info;
    int frc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
    if (frc == 0) frc = fi_eq_open(fabric_, &eq_attr, &eq_, nullptr);
    if (frc != 0) runtime_error(who(ofi_) + ": fi_fabric/fi_eq_open: " + fi_strerror(-frc));
    open_domain_and_ep(info_);
    rc = fi_connect(ep_, server.data(), nullptr, 0);
    if (rc != 0) runtime_error(who(ofi_) + ": fi_connect: " + fi_strerror(-rc));
    fi_eq_cm_entry entry{};
    wait_event(FI_CONNECTED, entry, "connection to the server");
  }
}

void OfiTransport::connect_connectionless(Ctrl& ctrl) {
  info_ = local_info(rdma_, ofi_, ctrl);
  int rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
  if (rc != 0) runtime_error(who(ofi_) + ": fi_fabric: " + fi_strerror(-rc));
  open_domain_and_ep(info_);
  const std::string mine = name_of(&ep_->fid, "endpoint");
  std::string theirs = ctrl.exchange(mine, "ofi endpoint address");
  // fi_av_insert reads an address of this provider's length: the same as ours.
  if (theirs.size() != mine.size()) runtime_error("ofi: malformed endpoint address from the other end");
  rc = fi_av_insert(av_, theirs.data(), 1, &remote_, 0, nullptr);
  if (rc != 1) runtime_error(who(ofi_) + ": fi_av_insert of the other end's address failed (" + std::to_string(rc) + ")");
}

void OfiTransport::open_domain_and_ep(fi_info* info) {
  auto check = [&](int rc, const char* what) {
    if (rc != 0) runtime_error(who(ofi_) + ": " + what + ": " + fi_strerror(-rc));
  };
  check(fi_domain(fabric_, info, &domain_, nullptr), "fi_domain");

  sq_depth_ = static_cast<uint32_t>(std::min<uint64_t>(rdma_.sq_depth, info->tx_attr->size));
  // The send window asked for (bw: --tx-depth) within the queue; a
  // signaled send must come within it, or the window fills with none.
  send_window_ = send_window_ ? std::min(send_window_, sq_depth_) : sq_depth_;
  const bool signal_every_auto = rdma_.signal_every == 0;
  signal_every_ = signal_every_auto ? std::max<uint32_t>(1, send_window_ / 2) : std::min(rdma_.signal_every, send_window_);
  selective_ = signal_every_ > 1;
  inline_max_ = rdma_.inline_size;
  uint64_t ring = std::bit_ceil<uint64_t>(sq_depth_);
  tx_mask_ = ring - 1;
  tx_slots_.assign(ring, TxSlot{});
  rx_slots_ = static_cast<uint32_t>(std::min<uint64_t>({queue_.rq_depth, info->rx_attr->size,
                                                        std::max<uint64_t>(2, kMaxRegionBytes / slot_size_)}));
  rq_refill_ = std::min(rdma_.rq_refill ? rdma_.rq_refill : std::max<uint32_t>(1, rx_slots_ / 8), rx_slots_);
  rx_cq_data_mode_ = write_ && ((info->mode | info->rx_attr->mode) & FI_RX_CQ_DATA);

  if (write_) {
    // CQ data: [credit flag | slot | length]; the flag is its top bit.
    const uint64_t bits = std::min<uint64_t>(64, info->domain_attr->cq_data_size * 8);
    len_bits_ = std::bit_width(slot_size_);
    len_mask_ = (1ull << len_bits_) - 1;
    const uint64_t slot_bits = std::bit_width<uint64_t>(rx_slots_ - 1);
    if (len_bits_ + slot_bits + 1 > bits)
      usage_error(who(ofi_) + " carries " + std::to_string(info->domain_attr->cq_data_size) +
                  " B of remote CQ data: too few for slot and length at this size and --rq-depth (need " +
                  std::to_string(len_bits_ + slot_bits + 1) + " bits)");
    credit_flag_ = 1ull << (bits - 1);
    credit_mask_ = credit_flag_ - 1;
  }
  register_memory();

  fi_cq_attr cq{};
  cq.format = FI_CQ_FORMAT_DATA;
  // Event mode needs a wait that honours fi_cq_sread's timeout (so Ctrl-C
  // and the other end's loss are noticed): a file descriptor. Some providers' other
  // wait objects (shm's FI_WAIT_UNSPEC yields in a loop) ignore it.
  cq.wait_obj = event_ ? FI_WAIT_FD : FI_WAIT_NONE;
  cq.size = std::max<size_t>(info->tx_attr->size, sq_depth_);
  int rc = fi_cq_open(domain_, &cq, &tx_cq_, nullptr);
  if (rc == 0) {
    cq.size = std::max<size_t>(info->rx_attr->size, rx_slots_ * 2);
    rc = fi_cq_open(domain_, &cq, &rx_cq_, nullptr);
  }
  if (rc != 0 && event_)
    usage_error(who(ofi_) + " has no file-descriptor wait object for its completion queues (FI_WAIT_FD: " +
                fi_strerror(-rc) + "): --poll event is not available with it");
  check(rc, "fi_cq_open");
  if (info->ep_attr->type != FI_EP_MSG) {
    fi_av_attr av{};
    av.type = info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_TABLE;
    av.count = 2;
    check(fi_av_open(domain_, &av, &av_, nullptr), "fi_av_open");
  }
  check(fi_endpoint(domain_, info, &ep_, nullptr), "fi_endpoint");
  if (eq_) check(fi_ep_bind(ep_, &eq_->fid, 0), "fi_ep_bind (EQ)");
  if (av_) check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind (AV)");
  rc = fi_ep_bind(ep_, &tx_cq_->fid, FI_TRANSMIT | (selective_ ? FI_SELECTIVE_COMPLETION : 0));
  if (rc != 0 && selective_) {
    if (!signal_every_auto)
      usage_error(who(ofi_) + " has no selective completion (FI_SELECTIVE_COMPLETION) for --signal-every " +
                  std::to_string(signal_every_) + ": use --signal-every 1");
    selective_ = false;  // auto: every send signaled
    signal_every_ = 1;
    rc = fi_ep_bind(ep_, &tx_cq_->fid, FI_TRANSMIT);
  }
  check(rc, "fi_ep_bind (send CQ)");
  check(fi_ep_bind(ep_, &rx_cq_->fid, FI_RECV), "fi_ep_bind (receive CQ)");
  check(fi_enable(ep_), "fi_enable");
  post_receives();
}

void OfiTransport::register_memory() {
  const uint64_t mr_mode = info_->domain_attr->mr_mode;
  rx_region_bytes_ = kHeaderBytes + rx_slots_ * slot_size_;
  rx_region_ = map_region(rx_region_bytes_, "the receive slots");
  rx_base_ = static_cast<std::byte*>(rx_region_) + kHeaderBytes;
  repost_.assign(rx_slots_, 0);
  rx_ctx_.assign(rx_slots_, fi_context2{});
  auto reg = [&](void* buf, size_t len, uint64_t access, uint64_t key, fid_mr** mr, const char* what) {
    int rc = fi_mr_reg(domain_, buf, len, access, 0, (mr_mode & FI_MR_PROV_KEY) ? 0 : key, 0, mr, nullptr);
    if (rc != 0) runtime_error(who(ofi_) + ": cannot register " + what + ": " + fi_strerror(-rc));
  };
  if (write_ || (mr_mode & FI_MR_LOCAL))
    reg(rx_region_, rx_region_bytes_, FI_RECV | (write_ ? FI_REMOTE_WRITE : 0), kRxKey, &rx_mr_, "the receive slots");
  // Sends always go out of a ring of our own: the caller may reuse its
  // buffer when post_send returns (the transport contract), while the
  // provider reads the data until the send completes. Registered where the
  // provider asks for local registration.
  bounce_bytes_ = (tx_mask_ + 1) * slot_size_;
  bounce_region_ = map_region(bounce_bytes_, "the send buffers");
  bounce_ = static_cast<std::byte*>(bounce_region_);
  if (mr_mode & FI_MR_LOCAL) {
    reg(bounce_region_, bounce_bytes_, FI_SEND | FI_WRITE, kBounceKey, &bounce_mr_, "the send buffers");
    bounce_desc_ = fi_mr_desc(bounce_mr_);
  }
}

const char* OfiTransport::connect_covers() const {
  if (ofi_.ep == "msg")
    return "msg endpoint: fi_getinfo, fabric, event queue; server: passive endpoint listening, its name over the "
           "control channel, the connect request; both: domain, CQs, endpoint, the rings mapped (and registered where "
           "the provider asks), receives posted, fi_connect/fi_accept to FI_CONNECTED, a control-channel barrier (2 "
           "control-channel round trips, 3 with --op write-imm)";
  return "connectionless endpoint: fi_getinfo, fabric, domain, address vector, CQs, endpoint, the rings mapped (and "
         "registered where the provider asks), receives posted, addresses swapped over the control channel and "
         "inserted, a control-channel barrier (2 control-channel round trips, 3 with --op write-imm); rdm: then one "
         "ping-pong (the provider connects on the first message)";
}

void* OfiTransport::register_memory(void* buf, size_t len) {
  const uint64_t mr_mode = info_->domain_attr->mr_mode;
  fid_mr* mr = nullptr;
  const uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  const int rc = fi_mr_reg(domain_, buf, len, access, 0, (mr_mode & FI_MR_PROV_KEY) ? 0 : next_mr_key_++, 0, &mr, nullptr);
  if (rc != 0) {
    errno = -rc;
    return nullptr;
  }
  return mr;
}

int OfiTransport::deregister_memory(void* mr) { return -fi_close(&static_cast<fid_mr*>(mr)->fid); }

void OfiTransport::post_receives() {
  void* desc = rx_mr_ ? fi_mr_desc(rx_mr_) : nullptr;
  for (uint32_t i = 0; i < rx_slots_; ++i) {
    ssize_t rc;
    if (!write_) rc = fi_recv(ep_, rx_base_ + i * slot_size_, slot_size_, desc, FI_ADDR_UNSPEC, &rx_ctx_[i]);
    else if (rx_cq_data_mode_) rc = fi_recv(ep_, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &rx_ctx_[i]);
    else break;
    if (rc != 0) runtime_error(who(ofi_) + ": posting receive " + std::to_string(i) + ": " + fi_strerror(static_cast<int>(-rc)));
  }
}

namespace {
struct RmaInfo {
  uint64_t base, key, slot_size, slots, len_bits, credit_addr;
};
}  // namespace

void OfiTransport::exchange_rma(Ctrl& ctrl) {
  const bool virt = info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
  const uint64_t region = virt ? reinterpret_cast<uint64_t>(rx_region_) : 0;
  RmaInfo mine{region + kHeaderBytes, fi_mr_key(rx_mr_), slot_size_, rx_slots_, len_bits_, region};
  std::string blob = ctrl.exchange(std::string_view(reinterpret_cast<const char*>(&mine), sizeof mine),
                                   "ofi receive region");
  if (blob.size() != sizeof(RmaInfo)) runtime_error("ofi: malformed receive region from the other end");
  RmaInfo theirs;
  std::memcpy(&theirs, blob.data(), sizeof theirs);
  // The slot count wraps our write index and len_bits is a shift count: out
  // of range, they would make us index or shift past what C++ defines.
  if (theirs.slots == 0 || theirs.slots > (1u << 16) || theirs.slot_size == 0 || theirs.slot_size > (1ull << 32) ||
      theirs.len_bits == 0 || theirs.len_bits > 40)
    runtime_error("ofi: impossible receive region from the other end");
  remote_base_ = theirs.base;
  remote_key_ = theirs.key;
  remote_slot_size_ = theirs.slot_size;
  remote_slots_ = theirs.slots;
  remote_len_bits_ = theirs.len_bits;
  remote_credit_addr_ = theirs.credit_addr;
}

void OfiTransport::repost() {
  void* desc = rx_mr_ ? fi_mr_desc(rx_mr_) : nullptr;
  uint32_t done = 0;
  const uint32_t held = refill_.held();
  for (; done < held; ++done) {
    uint32_t s = repost_[done];
    ssize_t rc = fi_recv(ep_, rx_base_ + s * slot_size_, slot_size_, desc, FI_ADDR_UNSPEC, &rx_ctx_[s]);
    if (rc == -FI_EAGAIN) break;  // try the rest at the next release
    if (rc != 0) {
      fail_rc(rc, "fi_recv");
      break;
    }
  }
  std::copy(repost_.begin() + done, repost_.begin() + held, repost_.begin());
  refill_.gave_back(done);
}

void OfiTransport::repost_cq_data_recv() {
  // FI_RX_CQ_DATA: each remote write with CQ data used up one posted receive.
  ssize_t rc = fi_recv(ep_, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &rx_ctx_[cq_data_next_]);
  if (rc != 0) fail_rc(rc, "fi_recv (for remote CQ data)");
  if (++cq_data_next_ == rx_slots_) cq_data_next_ = 0;
}

void OfiTransport::send_credit() {
  credit_src_ = refill_.released();
  ssize_t rc = fi_inject_writedata(ep_, &credit_src_, sizeof credit_src_, credit_flag_ | (credit_src_ & credit_mask_),
                                   remote_, remote_credit_addr_, remote_key_);
  if (rc == 0) {
    refill_.gave_back(refill_.held());
    refill_.credit_due = false;
  } else if (rc == -FI_EAGAIN) {
    refill_.credit_due = true;  // retried on the next receive poll
  } else {
    fail_rc(rc, "fi_inject_writedata (credits)");
  }
}

void OfiTransport::wait_send() {
  if (write_ && credits_.full(remote_released_, remote_slots_)) {
    fill_rx(kWaitSliceMs);  // credits arrive on the receive CQ
    return;
  }
  // A signaled send in flight wakes us; otherwise the provider itself was
  // full (e.g. injects) and only needs a moment.
  reap_tx(signal_mark_ > tx_freed_ ? kWaitSliceMs : 1);
}

void OfiTransport::fail_rc(ssize_t rc, const char* what) {
  if (failure_) return;
  failure_text_ = who(ofi_) + ": " + what + ": " + fi_strerror(static_cast<int>(-rc));
  failure_ = failure_text_.c_str();
}

void OfiTransport::cq_error(fid_cq* cq, ssize_t rc, const char* what) {
  if (failure_) return;
  if (rc != -FI_EAVAIL) {
    fail_rc(rc, what);
    return;
  }
  fi_cq_err_entry err{};
  fi_cq_readerr(cq, &err, 0);
  failure_text_ = who(ofi_) + ": " + what + " completion failed: " + fi_strerror(err.err) + " (" +
                  fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0) + ")";
  failure_ = failure_text_.c_str();
}

void OfiTransport::check_eq() const {
  uint32_t event = 0;
  fi_eq_cm_entry entry{};
  ssize_t rc = fi_eq_read(eq_, &event, &entry, sizeof entry, 0);
  if (rc >= 0 && event == FI_SHUTDOWN) {
    failure_text_ = who(ofi_) + ": the other end shut the connection down (FI_SHUTDOWN)";
    failure_ = failure_text_.c_str();
  } else if (rc == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    fi_eq_readerr(eq_, &err, 0);
    failure_text_ = who(ofi_) + ": connection error: " + fi_strerror(err.err);
    failure_ = failure_text_.c_str();
  }
}

void OfiTransport::describe(JsonObj& o) const {
  if (!info_) return;
  const fi_info* i = info_;
  auto version = [](uint32_t v) { return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)); };
  std::string mr_modes = "[";
  for (auto [bit, name] : {std::pair{FI_MR_LOCAL, "FI_MR_LOCAL"}, {FI_MR_RAW, "FI_MR_RAW"},
                           {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
                           {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"}})
    if (i->domain_attr->mr_mode & bit) mr_modes += std::string(mr_modes.size() > 1 ? ", " : "") + json_quote(name);
  mr_modes += "]";
  o.add("provider", i->fabric_attr->prov_name)
      .add("provider_version", version(i->fabric_attr->prov_version))
      .add("fabric", i->fabric_attr->name)
      .add("domain", i->domain_attr->name)
      .add("ep", ep_name(i->ep_attr->type))
      .add("fi_version", version(fi_version()))
      .add("api_version", version(kApiVersion))
      .add("inject_size", static_cast<uint64_t>(i->tx_attr->inject_size))
      .add("max_msg_size", static_cast<uint64_t>(i->ep_attr->max_msg_size))
      .add_raw("mr_mode", mr_modes)
      .add("cq_data_size", static_cast<uint64_t>(i->domain_attr->cq_data_size))
      .add("tx_size", static_cast<uint64_t>(i->tx_attr->size))
      .add("rx_size", static_cast<uint64_t>(i->rx_attr->size))
      .add("data_progress", i->domain_attr->data_progress == FI_PROGRESS_AUTO ? "auto" : "manual")
      .add("op", rdma_.op)
      .add("sq_depth", sq_depth_)
      .add("send_window", send_window_)
      .add("rx_slots", rx_slots_)
      .add("slot_size", slot_size_)
      .add("rq_refill", rq_refill_)
      .add("inline_size", inline_max_)
      .add("selective_completion", selective_)
      .add("signal_every", signal_every_)
      .add("remote_cq_data", write_)
      .add("send_buffers_registered", bounce_mr_ != nullptr)
      .add("cq_wait_obj", event_ ? "FI_WAIT_FD" : "FI_WAIT_NONE");
}

}  // namespace fm
