// verbs' device helpers (verbs_device.hpp), and the transport's device-side
// members: opening the device a raw connection uses, and port_facts.
#include "transport/rdma/verbs_device.hpp"

#include <arpa/inet.h>
#include <fcntl.h>

#include <cstring>

#include "fabmeter/error.hpp"
#include "transport/rdma/verbs.hpp"

namespace fm {
namespace verbs {
namespace {

bool ipv4_mapped(const ibv_gid& g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, prefix, 12) == 0;
}

}  // namespace

ibv_mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
uint64_t pow2_at_least(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) sys_error("verbs: cannot make an event fd non-blocking");
}

std::string gid_str(const ibv_gid& g) {
  char s[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, g.raw, s, sizeof s) ? s : "?";
}

bool addr_to_gid(const std::string& addr, ibv_gid* g) {
  std::memset(g, 0, sizeof *g);
  in_addr v4;
  if (inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    g->raw[10] = g->raw[11] = 0xff;
    std::memcpy(g->raw + 12, &v4, 4);
    return true;
  }
  return inet_pton(AF_INET6, addr.c_str(), g->raw) == 1;
}

std::vector<ibv_gid_entry> port_gids(ibv_context* ctx, uint32_t port) {
  ibv_device_attr da;
  if (ibv_query_device(ctx, &da) != 0) return {};
  size_t total = 0;
  for (uint8_t i = 1; i <= da.phys_port_cnt; ++i) {
    ibv_port_attr pa;
    if (ibv_query_port(ctx, i, &pa) == 0) total += static_cast<size_t>(pa.gid_tbl_len);
  }
  std::vector<ibv_gid_entry> all(total);
  ssize_t n = ibv_query_gid_table(ctx, all.data(), all.size(), 0);
  std::vector<ibv_gid_entry> out;
  for (ssize_t i = 0; i < n; ++i)
    if (all[i].port_num == port) out.push_back(all[i]);
  return out;
}

// --gid-index auto: the GID of the control connection's address if the port
// has it, else the first RoCE v2 IPv4-mapped GID, else 0.
int auto_gid_index(ibv_context* ctx, uint32_t port, const ibv_gid* want) {
  auto gids = port_gids(ctx, port);
  if (want)
    for (const auto& e : gids)
      if (std::memcmp(e.gid.raw, want->raw, 16) == 0 && e.gid_type != IBV_GID_TYPE_IB) return static_cast<int>(e.gid_index);
  for (const auto& e : gids)
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && ipv4_mapped(e.gid)) return static_cast<int>(e.gid_index);
  return 0;
}

DeviceProbe probe_device(const std::string& want, uint32_t port) {
  static std::string cached_name;
  static uint32_t cached_port = 0;
  static DeviceProbe cached;
  static bool have = false;
  if (have && cached_name == want && cached_port == port) return cached;
  DeviceProbe d;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  bool probed = false;
  for (int i = 0; list && i < n; ++i) {
    d.names += std::string(d.names.empty() ? "" : ", ") + ibv_get_device_name(list[i]);
    if (probed || (!want.empty() && want != ibv_get_device_name(list[i]))) continue;
    probed = true;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_port_attr pa;
      if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) == 0) {
        d.found = true;
        d.max_msg_sz = pa.max_msg_sz;
        d.active_mtu = pa.active_mtu;
      }
      if (ibv_device_attr da; ibv_query_device(ctx, &da) == 0) d.atomic_cap = da.atomic_cap;
      ibv_close_device(ctx);
    }
  }
  if (list) ibv_free_device_list(list);
  cached_name = want;
  cached_port = port;
  cached = d;
  have = true;
  return d;
}

bool uses_rdma_cm(const VerbsOptions& v) { return v.cm == "rdma_cm" || (v.cm == "auto" && v.service != "uc"); }

}  // namespace verbs

using namespace verbs;

void VerbsTransport::open_raw_device(const Ctrl& ctrl) {
  int n = 0;
  dev_list_ = ibv_get_device_list(&n);
  if (!dev_list_ || n == 0) runtime_error(kNoDevice);
  ibv_device* dev = nullptr;
  if (!verbs_.device.empty()) {
    std::string names;
    for (int i = 0; i < n && !dev; ++i) {
      if (verbs_.device == ibv_get_device_name(dev_list_[i])) dev = dev_list_[i];
      names += std::string(names.empty() ? "" : ", ") + ibv_get_device_name(dev_list_[i]);
    }
    if (!dev) usage_error("verbs: no RDMA device named '" + verbs_.device + "' (this host has: " + names + ")");
  } else {
    // The device that holds the control connection's address, so two ends
    // on one host (two Soft-RoCE devices) each use their own.
    ibv_gid want;
    if (addr_to_gid(ctrl.local_addr(), &want)) {
      for (int i = 0; i < n && !dev; ++i) {
        ibv_context* c = ibv_open_device(dev_list_[i]);
        if (!c) continue;
        for (const auto& e : port_gids(c, verbs_.port))
          if (std::memcmp(e.gid.raw, want.raw, 16) == 0) dev = dev_list_[i];
        ibv_close_device(c);
      }
    }
    if (!dev) dev = dev_list_[0];
  }
  ctx_ = ibv_open_device(dev);
  if (!ctx_) sys_error(std::string("verbs: cannot open ") + ibv_get_device_name(dev));
  port_ = verbs_.port;
}

std::string VerbsTransport::port_facts(const std::string& device, unsigned port) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return "";
  JsonObj o;
  for (int i = 0; i < n; ++i) {
    if (device != ibv_get_device_name(list[i])) continue;
    ibv_context* c = ibv_open_device(list[i]);
    if (!c) break;
    ibv_port_attr pa;
    ibv_device_attr da;
    if (ibv_query_port(c, static_cast<uint8_t>(port), &pa) == 0)
      o.add("active_mtu", mtu_bytes(pa.active_mtu)).add("max_mtu", mtu_bytes(pa.max_mtu));
    if (ibv_query_device(c, &da) == 0) o.add("hw_ver", da.hw_ver).add("vendor_part_id", da.vendor_part_id);
    ibv_close_device(c);
    break;
  }
  ibv_free_device_list(list);
  return o.empty() ? "" : o.str();
}

}  // namespace fm
