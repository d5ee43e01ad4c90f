// verbs' device helpers: device, port and GID selection, MTU codes, and the
// probe caps() takes before anything connects. Shared by verbs.cpp (setup)
// and verbs_connect.cpp (the QP's connection).
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fabmeter/params.hpp"

namespace fm::verbs {

inline constexpr uint32_t kRawQkey = 0x11111111;
inline constexpr const char* kNoDevice =
    "verbs: no RDMA device on this host (ibv_get_device_list found none); for Soft-RoCE devices in a VM, "
    "see rdma/guest/README.md (make test-rdma)";

inline uint32_t mtu_bytes(ibv_mtu m) { return 128u << static_cast<int>(m); }  // IBV_MTU_256 = 1
ibv_mtu mtu_enum(uint32_t bytes);
void set_nonblock(int fd);
std::string gid_str(const ibv_gid& g);
// The GID a RoCE port gives an IP address: IPv4-mapped, or the IPv6 address itself.
bool addr_to_gid(const std::string& addr, ibv_gid* g);
// The port's valid GIDs (one ioctl, not a sysfs read per index).
std::vector<ibv_gid_entry> port_gids(ibv_context* ctx, uint32_t port);
// --gid-index auto: the GID of the control connection's address if the port
// has it, else the first RoCE v2 IPv4-mapped GID, else 0.
int auto_gid_index(ibv_context* ctx, uint32_t port, const ibv_gid* want);

bool uses_rdma_cm(const VerbsOptions& v);

// What caps() needs before connecting, cached per (device, port).
struct DeviceProbe {
  bool found = false;
  uint64_t max_msg_sz = 0;
  ibv_mtu active_mtu = IBV_MTU_4096;
  ibv_atomic_cap atomic_cap = IBV_ATOMIC_HCA;
  std::string names;  // every device on the host, for messages
};
DeviceProbe probe_device(const std::string& want, uint32_t port);

}  // namespace fm::verbs
