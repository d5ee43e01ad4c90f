#include "fabmeter/fabric.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <link.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace fm {
namespace {

using nlohmann::json;

constexpr size_t kMaxText = 1024;  // longer sysfs/proc values are not recorded (decode_env's string bound)

// A sysfs or proc file's text without its trailing newline; nullopt when it
// cannot be read, is empty or is too long to record.
// Up to `limit` bytes of a file; nullopt when it cannot be read (sysfs says
// EINVAL where a device has no such value: lo's speed).
std::optional<std::string> read_file(const std::string& path, size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::string s(limit, '\0');
  size_t got = 0;
  for (ssize_t k; got < s.size() && (k = read(fd, s.data() + got, s.size() - got)) != 0;) {
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      close(fd);
      return std::nullopt;
    }
    got += static_cast<size_t>(k);
  }
  close(fd);
  s.resize(got);
  return s;
}

std::optional<std::string> read_text(const std::string& path) {
  std::optional<std::string> s = read_file(path, kMaxText + 2);
  if (!s) return s;
  while (!s->empty() && (s->back() == '\n' || s->back() == ' ')) s->pop_back();
  if (s->empty() || s->size() > kMaxText) return std::nullopt;
  return s;
}

// A non-negative integer file; nullopt when absent or negative (the kernel's "unknown").
std::optional<long> read_count(const std::string& path) {
  const auto s = read_text(path);
  if (!s) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s->c_str(), &end, 10);
  if (errno != 0 || end == s->c_str() || *end != '\0' || v < 0) return std::nullopt;
  return v;
}

template <class T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  return names;
}

// Names ending in a number, in numeric order (rx-10 after rx-9).
void numeric_sort(std::vector<std::string>& names) {
  auto number = [](const std::string& s) {
    size_t i = s.size();
    while (i > 0 && std::isdigit(static_cast<unsigned char>(s[i - 1]))) --i;
    return std::make_pair(s.substr(0, i), i < s.size() ? std::stol(s.substr(i)) : -1L);
  };
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) { return number(a) < number(b); });
}

std::string basename_of_link(const std::string& path) {
  char buf[PATH_MAX];
  const ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  return s.substr(s.rfind('/') + 1);
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

// CPU lists as the kernel writes them: "0-3,8,10-11".
bool in_cpulist(const std::string& list, int cpu) {
  std::stringstream ss(list);
  for (std::string part; std::getline(ss, part, ',');) {
    const size_t dash = part.find('-');
    char* end = nullptr;
    const long lo = std::strtol(part.c_str(), &end, 10);
    const long hi = dash == std::string::npos ? lo : std::strtol(part.c_str() + dash + 1, &end, 10);
    if (cpu >= lo && cpu <= hi) return true;
  }
  return false;
}

// ---- the ethtool ioctl ----

class Ethtool {
 public:
  explicit Ethtool(const std::string& dev) : fd_(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    std::strncpy(ifr_.ifr_name, dev.c_str(), IFNAMSIZ - 1);
  }
  ~Ethtool() {
    if (fd_ >= 0) close(fd_);
  }
  Ethtool(const Ethtool&) = delete;
  // True when the device answers the command (which is the first field of `data`).
  bool ask(void* data) {
    ifr_.ifr_data = static_cast<char*>(data);
    return fd_ >= 0 && ioctl(fd_, SIOCETHTOOL, &ifr_) == 0;
  }
  json flag(uint32_t cmd) {
    ethtool_value v{};
    v.cmd = cmd;
    return ask(&v) ? json(v.data != 0) : json(nullptr);
  }

 private:
  int fd_;
  ifreq ifr_{};
};

json text_or_null(const char* s, size_t n) {
  const std::string t(s, strnlen(s, n));
  return t.empty() ? json(nullptr) : json(t);
}

// The per-queue masks under queues/: "rx-N" rps_cpus, "tx-N" xps_cpus.
void queue_masks(json& o, const std::string& dir, const char* prefix, const char* file, const char* count_key,
                 const char* list_key) {
  std::vector<std::string> queues;
  for (const std::string& q : list_dir(dir + "/queues"))
    if (q.rfind(prefix, 0) == 0) queues.push_back(q);
  numeric_sort(queues);
  json masks = json::array();
  for (size_t i = 0; i < queues.size() && i < kMaxListed; ++i)
    masks.push_back(or_null(read_text(dir + "/queues/" + queues[i] + "/" + file)));
  o[count_key] = queues.size();
  o[list_key] = std::move(masks);
}

// The IRQs /proc/interrupts names after the netdev, its device (virtio2-input.0)
// or its bus address (mlx5_comp0@pci:0000:3b:00.0), with their affinity.
void irq_affinity(json& o, const std::string& proc, const std::vector<std::string>& names, const std::string& bus) {
  std::stringstream f(read_file(proc + "/interrupts", 4u << 20).value_or(""));
  json irqs = json::object();
  size_t count = 0;
  auto names_us = [&](const std::string& action) {
    for (const std::string& n : names) {
      if (n.empty() || action.rfind(n, 0) != 0) continue;
      const char next = action.size() > n.size() ? action[n.size()] : '\0';
      if (next == '\0' || next == '-' || next == '@' || next == '.' || next == '_' || next == ':') return true;
    }
    return !bus.empty() && action.find("@pci:" + bus) != std::string::npos;
  };
  for (std::string line; std::getline(f, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string irq = line.substr(0, colon);
    irq.erase(0, irq.find_first_not_of(' '));
    if (irq.empty() || !std::all_of(irq.begin(), irq.end(), ::isdigit)) continue;
    // The actions are the last fields (", "-separated when shared); no count or chip name matches.
    std::stringstream ss(line.substr(colon + 1));
    bool ours = false;
    for (std::string w; !ours && ss >> w;) {
      if (!w.empty() && w.back() == ',') w.pop_back();
      ours = names_us(w);
    }
    if (!ours) continue;
    if (++count <= kMaxListed) irqs[irq] = or_null(read_text(proc + "/irq/" + irq + "/smp_affinity_list"));
  }
  o["irq_count"] = count;
  o["irq_affinity"] = std::move(irqs);
}

// The directory holding the netdev's numa_node: its device, or the device's
// parent (a virtio NIC's PCI function).
std::string numa_dir_of(const std::string& netdir) {
  const std::string dev = netdir + "/device";
  if (access((dev + "/numa_node").c_str(), R_OK) == 0) return dev;
  if (access((dev + "/../numa_node").c_str(), R_OK) == 0) return dev + "/..";
  return dev;
}

json netdev_facts(const std::string& name, const std::string& sys, const std::string& proc) {
  const std::string dir = sys + "/class/net/" + name;
  json o;
  o["name"] = name;
  Ethtool eth(name);
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  const bool have_info = eth.ask(&info);
  o["driver"] = have_info ? text_or_null(info.driver, sizeof info.driver) : json(nullptr);
  o["driver_version"] = have_info ? text_or_null(info.version, sizeof info.version) : json(nullptr);
  o["firmware"] = have_info ? text_or_null(info.fw_version, sizeof info.fw_version) : json(nullptr);
  const std::string bus = have_info ? std::string(info.bus_info, strnlen(info.bus_info, sizeof info.bus_info)) : "";
  o["bus_info"] = bus.empty() ? json(nullptr) : json(bus);
  o["mtu"] = or_null(read_count(dir + "/mtu"));
  o["speed_mbps"] = or_null(read_count(dir + "/speed"));
  o["operstate"] = or_null(read_text(dir + "/operstate"));
  o["ipoib_mode"] = or_null(read_text(dir + "/mode"));  // only an IPoIB interface has it
  o["gro"] = eth.flag(ETHTOOL_GGRO);
  o["gso"] = eth.flag(ETHTOOL_GGSO);
  o["tso"] = eth.flag(ETHTOOL_GTSO);
  ethtool_coalesce c{};
  c.cmd = ETHTOOL_GCOALESCE;
  if (eth.ask(&c))
    o["coalesce"] = {{"rx_usecs", c.rx_coalesce_usecs}, {"rx_frames", c.rx_max_coalesced_frames},
                     {"tx_usecs", c.tx_coalesce_usecs}, {"tx_frames", c.tx_max_coalesced_frames},
                     {"adaptive_rx", c.use_adaptive_rx_coalesce != 0}, {"adaptive_tx", c.use_adaptive_tx_coalesce != 0}};
  else
    o["coalesce"] = nullptr;
  queue_masks(o, dir, "rx-", "rps_cpus", "rx_queues", "rps_cpus");
  queue_masks(o, dir, "tx-", "xps_cpus", "tx_queues", "xps_cpus");
  irq_affinity(o, proc, {name, basename_of_link(dir + "/device")}, bus);
  o["numa_node"] = or_null(read_count(numa_dir_of(dir) + "/numa_node"));
  return o;
}

// ---- the RDMA device ----

// The GID text sysfs writes (8 groups of 4 hex digits) for an address: IPv4-mapped, or the IPv6 address.
std::string sysfs_gid(const std::string& addr) {
  uint8_t raw[16] = {};
  in_addr v4;
  if (inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    raw[10] = raw[11] = 0xff;
    std::memcpy(raw + 12, &v4, 4);
  } else if (inet_pton(AF_INET6, addr.c_str(), raw) != 1) {
    return "";
  }
  char out[40];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 5 * i, 6, i < 7 ? "%02x%02x:" : "%02x%02x", raw[2 * i], raw[2 * i + 1]);
  return out;
}

// The same GID as inet_ntop writes it (as the verbs transport reports it).
json gid_text(const std::optional<std::string>& sysfs) {
  if (!sysfs || sysfs->size() != 39) return nullptr;
  uint8_t raw[16];
  for (int i = 0; i < 16; ++i) {
    const std::string byte = sysfs->substr(5 * (i / 2) + 2 * (i % 2), 2);
    raw[i] = static_cast<uint8_t>(std::strtoul(byte.c_str(), nullptr, 16));
  }
  char s[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, raw, s, sizeof s) ? json(s) : json(nullptr);
}

// "4: ACTIVE" -> "ACTIVE"
json state_name(const std::optional<std::string>& s) {
  if (!s) return nullptr;
  const size_t at = s->find(": ");
  return at == std::string::npos ? *s : s->substr(at + 2);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct RdmaPick {
  std::string device;
  unsigned port = 1;
  int gid_index = -1;
};

// The device (and port, and GID index) holding `gid`, else the one whose
// port's GIDs belong to `netdev` (RoCE), else the one behind `netdev`'s own
// device (IPoIB), else the only device there is.
RdmaPick pick_rdma(const std::string& ib, const std::string& gid, const std::string& netdev, const std::string& sys) {
  std::vector<std::string> devices = list_dir(ib);
  std::sort(devices.begin(), devices.end());
  if (!gid.empty())
    for (const std::string& d : devices)
      for (const std::string& p : list_dir(ib + "/" + d + "/ports")) {
        std::vector<std::string> idx = list_dir(ib + "/" + d + "/ports/" + p + "/gids");
        numeric_sort(idx);
        for (const std::string& i : idx)
          if (read_text(ib + "/" + d + "/ports/" + p + "/gids/" + i) == gid)
            return {d, static_cast<unsigned>(std::stoul(p)), std::stoi(i)};
      }
  if (!netdev.empty()) {
    for (const std::string& d : devices)
      for (const std::string& p : list_dir(ib + "/" + d + "/ports"))
        for (const std::string& i : list_dir(ib + "/" + d + "/ports/" + p + "/gid_attrs/ndevs"))
          if (read_text(ib + "/" + d + "/ports/" + p + "/gid_attrs/ndevs/" + i) == netdev)
            return {d, static_cast<unsigned>(std::stoul(p)), -1};
    const std::string own = real_path(sys + "/class/net/" + netdev + "/device");
    for (const std::string& d : devices)
      if (!own.empty() && real_path(ib + "/" + d + "/device") == own)
        return {d, static_cast<unsigned>(read_count(sys + "/class/net/" + netdev + "/dev_port").value_or(0) + 1), -1};
  }
  if (devices.size() == 1) return {devices[0], 1, -1};
  return {};
}

// The file name a loaded library was opened under, resolved ("libibverbs.so.1.14.44.0"), or "".
std::string loaded_library(const char* stem) {
  struct Look {
    const char* stem;
    std::string path;
  } look{stem, ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* l = static_cast<Look*>(data);
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find(std::string("/") + l->stem) == std::string::npos) return 0;
        l->path = name;
        return 1;
      },
      &look);
  if (look.path.empty()) return "";
  const std::string real = real_path(look.path);
  return (real.empty() ? look.path : real).substr((real.empty() ? look.path : real).rfind('/') + 1);
}

json rdma_facts(const FabricWhere& w, const std::string& netdev, const std::string& sys) {
  const std::string ib = sys + "/class/infiniband";
  RdmaPick pick;
  if (!w.rdma_device.empty()) pick = {w.rdma_device, w.rdma_port, -1};
  else pick = pick_rdma(ib, sysfs_gid(w.local_addr), netdev, sys);
  if (w.gid_index >= 0) pick.gid_index = w.gid_index;
  json o;
  o["device"] = pick.device.empty() ? json(nullptr) : json(pick.device);
  const std::string dev = ib + "/" + pick.device;
  const std::string port = dev + "/ports/" + std::to_string(pick.port);
  const bool have = !pick.device.empty() && access(dev.c_str(), F_OK) == 0;
  auto at = [&](const std::string& path) { return have ? read_text(path) : std::nullopt; };
  o["port"] = pick.device.empty() ? json(nullptr) : json(pick.port);
  o["board_id"] = or_null(at(dev + "/board_id"));
  o["hca_type"] = or_null(at(dev + "/hca_type"));
  o["firmware"] = or_null(at(dev + "/fw_ver"));
  o["node_guid"] = or_null(at(dev + "/node_guid"));
  o["port_state"] = state_name(at(port + "/state"));
  o["phys_state"] = state_name(at(port + "/phys_state"));
  const auto ll = at(port + "/link_layer");
  o["link_layer"] = ll ? json(lower(*ll)) : json(nullptr);
  // "100 Gb/sec (4X EDR)": the active speed and width.
  const auto rate = at(port + "/rate");
  o["rate"] = or_null(rate);
  o["speed_gbps"] = nullptr;
  o["width"] = nullptr;
  if (rate) {
    char* end = nullptr;
    const double g = std::strtod(rate->c_str(), &end);
    if (end != rate->c_str() && rate->find("Gb/sec") != std::string::npos) o["speed_gbps"] = g;
    const size_t open = rate->find('('), x = rate->find('X', open == std::string::npos ? 0 : open);
    if (open != std::string::npos && x != std::string::npos && x > open + 1) o["width"] = rate->substr(open + 1, x - open);
  }
  const std::string idx = std::to_string(pick.gid_index);
  o["gid_index"] = pick.gid_index >= 0 ? json(pick.gid_index) : json(nullptr);
  o["gid"] = pick.gid_index >= 0 ? gid_text(at(port + "/gids/" + idx)) : json(nullptr);
  o["gid_type"] = pick.gid_index >= 0 ? or_null(at(port + "/gid_attrs/types/" + idx)) : json(nullptr);
  o["gid_netdev"] = pick.gid_index >= 0 ? or_null(at(port + "/gid_attrs/ndevs/" + idx)) : json(nullptr);
  const std::string verbs = loaded_library("libibverbs.so");
  if (have && w.port_facts) {
    const json more = json::parse(w.port_facts(pick.device, pick.port), nullptr, false);
    if (more.is_object())
      for (const auto& [k, v] : more.items()) o[k] = v;
  }
  o["libibverbs"] = verbs.empty() ? json(nullptr) : json(verbs);
  // rdma-core names its libibverbs 1.<ABI>.<rdma-core release>.
  json release = nullptr;
  if (const std::string pre = "libibverbs.so.1."; verbs.rfind(pre, 0) == 0) {
    const size_t dot = verbs.find('.', pre.size());
    if (dot != std::string::npos && dot + 1 < verbs.size()) release = verbs.substr(dot + 1);
  }
  o["rdma_core"] = release;
  o["libfabric"] = nullptr;
  // Only a libfabric already loaded (an ofi run) is asked: RTLD_NOLOAD runs no constructor.
  if (void* h = dlopen("libfabric.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
    if (auto* version = reinterpret_cast<uint32_t (*)()>(dlsym(h, "fi_version"))) {
      const uint32_t v = version();
      o["libfabric"] = std::to_string(v >> 16) + "." + std::to_string(v & 0xffff);
    }
    dlclose(h);
  }
  return o;
}

// "always [madvise] never" -> "madvise"
json bracketed(const std::optional<std::string>& s) {
  if (!s) return nullptr;
  const size_t a = s->find('['), b = s->find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return nullptr;
  return s->substr(a + 1, b - a - 1);
}

// The CPU latency the kernel now grants (µs). Opened read-only and never
// written: the request every open adds stays at the default (no limit) and
// goes with the close; a write would set one.
json cpu_dma_latency(const std::string& dev) {
  const int fd = open(dev.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  int32_t v = 0;
  const ssize_t n = read(fd, &v, sizeof v);
  close(fd);
  return n == sizeof v ? json(v) : json(nullptr);
}

}  // namespace

std::string interface_of(const std::string& addr) {
  uint8_t want[16];
  int family = AF_INET;
  if (inet_pton(AF_INET, addr.c_str(), want) != 1) {
    family = AF_INET6;
    if (inet_pton(AF_INET6, addr.c_str(), want) != 1) return "";
  }
  const size_t len = family == AF_INET ? 4 : 16;
  auto bytes = [&](const sockaddr* sa) {
    return family == AF_INET ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr)
                             : reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  };
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  // The interface holding the address, else the loopback whose prefix holds
  // it (127.0.0.2 is lo's through 127.0.0.1/8: the whole prefix is local).
  std::string exact, prefix;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != family) continue;
    const uint8_t* have = bytes(a->ifa_addr);
    if (std::memcmp(have, want, len) == 0 && exact.empty()) exact = a->ifa_name;
    if (!a->ifa_netmask || !prefix.empty() || !(a->ifa_flags & IFF_LOOPBACK)) continue;
    const uint8_t* mask = bytes(a->ifa_netmask);
    bool inside = true;
    for (size_t i = 0; i < len && inside; ++i) inside = (have[i] & mask[i]) == (want[i] & mask[i]);
    if (inside) prefix = a->ifa_name;
  }
  freeifaddrs(list);
  return exact.empty() ? prefix : exact;
}

NumaLocality numa_locality(const std::string& sys, const std::string& device_dir, const std::string& device, int cpu) {
  NumaLocality n;
  if (const auto node = read_count(device_dir + "/numa_node")) n.device_node = static_cast<int>(*node);
  if (cpu >= 0) {
    const std::string nodes = sys + "/devices/system/node";
    for (const std::string& d : list_dir(nodes))
      if (d.rfind("node", 0) == 0 && d.size() > 4 && std::isdigit(static_cast<unsigned char>(d[4])))
        if (const auto list = read_text(nodes + "/" + d + "/cpulist"); list && in_cpulist(*list, cpu))
          n.cpu_node = std::atoi(d.c_str() + 4);
  }
  if (n.device_node && n.cpu_node && *n.device_node != *n.cpu_node)
    n.warning = device + " is on NUMA node " + std::to_string(*n.device_node) + ", the pinned CPU " +
                std::to_string(cpu) + " on node " + std::to_string(*n.cpu_node) +
                ": every message crosses the interconnect";
  return n;
}

std::string fabric_json(const FabricWhere& w, const std::string& sys, const std::string& proc) {
  json o;
  const std::string netdev = interface_of(w.local_addr);
  o["netdev"] = netdev.empty() ? json(nullptr) : netdev_facts(netdev, sys, proc);
  const bool rdma = w.transport == "verbs" || w.transport == "ofi";
  o["rdma"] = rdma ? rdma_facts(w, netdev, sys) : json(nullptr);
  // Locality: the RDMA device's when there is one, else the netdev's.
  std::string device, device_dir;
  if (rdma && o["rdma"]["device"].is_string()) {
    device = o["rdma"]["device"].get<std::string>();
    device_dir = sys + "/class/infiniband/" + device + "/device";
  } else if (!netdev.empty()) {
    device = netdev;
    device_dir = numa_dir_of(sys + "/class/net/" + netdev);
  }
  json warnings = json::array();
  if (!device.empty()) {
    const NumaLocality n = numa_locality(sys, device_dir, device, w.cpu);
    o["numa"] = {{"device", device}, {"device_node", or_null(n.device_node)}, {"cpu", w.cpu >= 0 ? json(w.cpu) : json(nullptr)},
                 {"cpu_node", or_null(n.cpu_node)}};
    if (!n.warning.empty()) warnings.push_back(n.warning);
  } else {
    o["numa"] = nullptr;
  }
  // /proc/sys/net is the reading process's network namespace's: this end's default.
  o["tcp_congestion_control"] = w.transport != "tcp" ? json(nullptr)
                                : !w.tcp_cc.empty() ? json(w.tcp_cc)
                                                    : or_null(read_text(proc + "/sys/net/ipv4/tcp_congestion_control"));
  o["tuned_profile"] = or_null(read_text("/etc/tuned/active_profile"));
  o["cpu_dma_latency_us"] = cpu_dma_latency("/dev/cpu_dma_latency");
  o["thp_enabled"] = bracketed(read_text(sys + "/kernel/mm/transparent_hugepage/enabled"));
  o["thp_defrag"] = bracketed(read_text(sys + "/kernel/mm/transparent_hugepage/defrag"));
  o["warnings"] = std::move(warnings);
  // The welcome carries it (ctrl.hpp's kMaxWelcome): masks of thousands of
  // CPUs would not fit; the lists go first, their counts stay.
  for (const char* list : {"irq_affinity", "xps_cpus", "rps_cpus"})
    if (o.dump().size() > kMaxFabricBytes && o["netdev"].is_object()) o["netdev"][list] = nullptr;
  return o.dump();
}

}  // namespace fm
