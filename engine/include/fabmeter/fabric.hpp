// The fabric a run goes over, as the kernel exposes it (sysfs, /proc, the
// ethtool ioctl, getifaddrs): the netdev carrying the control connection,
// the RDMA device of a verbs or ofi run, the host's latency settings and the
// NUMA locality of the device against the pinned CPU. Read once before a
// session's points, never on the data path. A fact the machine does not
// give is null, never guessed. The result stays inside the bounds the other end's
// environment is checked against (handshake.hpp: decode_env): lists are cut
// at kMaxListed entries, with their full count beside them, and left out
// (null) when the whole would exceed kMaxFabricBytes.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace fm {

constexpr size_t kMaxListed = 32;            // queues and IRQs listed per netdev
constexpr size_t kMaxFabricBytes = 16 * 1024;  // beyond, the netdev's lists are left out (null)

struct FabricWhere {
  std::string local_addr;   // this end's address of the control connection
  std::string transport;    // the run's transport: the RDMA device is looked up for verbs and ofi only
  std::string rdma_device;  // --device, or "" (the one holding local_addr)
  unsigned rdma_port = 1;   // --port
  int gid_index = -1;       // --gid-index, or -1 (auto: local_addr's GID)
  int cpu = -1;             // the pinned CPU, or -1
  // What the transport's library says of the RDMA device's port (its active
  // MTU: not in sysfs), a JSON object merged into `rdma`; may be empty.
  std::function<std::string(const std::string& device, unsigned port)> port_facts;
  std::string tcp_cc;       // tcp: --tcp-cc, or "" (the kernel's default)
};

// A JSON object: netdev, rdma, numa, tcp_congestion_control (tcp: the one its data sockets use), tuned_profile, cpu_dma_latency_us,
// thp_enabled, thp_defrag, warnings. `sys` and `proc` are the roots of
// sysfs and procfs.
std::string fabric_json(const FabricWhere& where, const std::string& sys = "/sys", const std::string& proc = "/proc");

// NUMA locality of a device against a CPU, read under the sysfs root `sys`:
// the CPU's node from devices/system/node/node*/cpulist, the device's from
// `device_dir`/numa_node (absent or -1: unknown). `warning` is set when both
// are known and differ.
struct NumaLocality {
  std::optional<int> device_node, cpu_node;
  std::string warning;
};
NumaLocality numa_locality(const std::string& sys, const std::string& device_dir, const std::string& device, int cpu);

// The interface owning a local address (getifaddrs): the one holding it,
// else the loopback whose prefix holds it (lo for 127.0.0.2); "" if none does.
std::string interface_of(const std::string& addr);

}  // namespace fm
