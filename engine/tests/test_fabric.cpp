// The fabric facts against fake sysfs and procfs trees: two NUMA nodes, a
// netdev with more queues and IRQs than are listed, a RoCE device.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fabmeter/fabric.hpp"
#include "fabmeter/handshake.hpp"

namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

class FakeTree : public ::testing::Test {
 protected:
  fs::path root;
  void SetUp() override {
    root = fs::path(::testing::TempDir()) / ("fm_fabric_" + std::to_string(::getpid()));
    fs::remove_all(root);
    put(root / "sys/devices/system/node/node0/cpulist", "0-3,8-11");
    put(root / "sys/devices/system/node/node1/cpulist", "4-7,12-15");
    put(root / "sys/devices/system/node/online", "0-1");  // not a node directory
  }
  void TearDown() override { fs::remove_all(root); }
  std::string sys() const { return (root / "sys").string(); }
  std::string proc() const { return (root / "proc").string(); }
};

TEST_F(FakeTree, NumaWarningWhenDeviceAndCpuDiffer) {
  put(root / "sys/class/net/eth9/device/numa_node", "1");
  const std::string dev = sys() + "/class/net/eth9/device";
  fm::NumaLocality far = fm::numa_locality(sys(), dev, "eth9", 2);
  EXPECT_EQ(far.device_node, 1);
  EXPECT_EQ(far.cpu_node, 0);
  EXPECT_NE(far.warning.find("eth9 is on NUMA node 1, the pinned CPU 2 on node 0"), std::string::npos) << far.warning;
  for (int cpu : {5, 13}) {
    fm::NumaLocality near = fm::numa_locality(sys(), dev, "eth9", cpu);
    EXPECT_EQ(near.cpu_node, 1);
    EXPECT_TRUE(near.warning.empty()) << near.warning;
  }
  fm::NumaLocality unpinned = fm::numa_locality(sys(), dev, "eth9", -1);
  EXPECT_FALSE(unpinned.cpu_node);
  EXPECT_TRUE(unpinned.warning.empty());
}

TEST_F(FakeTree, UnknownNodeIsNullNotAWarning) {
  put(root / "sys/class/net/eth9/device/numa_node", "-1");  // the kernel's "no node"
  fm::NumaLocality n = fm::numa_locality(sys(), sys() + "/class/net/eth9/device", "eth9", 2);
  EXPECT_FALSE(n.device_node);
  EXPECT_EQ(n.cpu_node, 0);
  EXPECT_TRUE(n.warning.empty());
  fm::NumaLocality absent = fm::numa_locality(sys(), sys() + "/class/net/nodev/device", "nodev", 2);
  EXPECT_FALSE(absent.device_node);
  EXPECT_TRUE(absent.warning.empty());
}

// 127.0.0.1 belongs to lo (getifaddrs); its sysfs and procfs facts come from the fake trees.
TEST_F(FakeTree, NetdevAndRdmaFactsStayWithinTheEnvBounds) {
  const fs::path lo = root / "sys/class/net/lo";
  put(lo / "mtu", "1400");
  put(lo / "speed", "-1");
  put(lo / "mode", "connected");
  put(lo / "device/numa_node", "1");
  std::ofstream irqs((fs::create_directories(root / "proc"), root / "proc/interrupts"));
  irqs << "           CPU0       CPU1\n";
  for (int q = 0; q < 40; ++q) {
    put(lo / ("queues/rx-" + std::to_string(q) + "/rps_cpus"), "00000000,0000000" + std::to_string(q % 10));
    put(lo / ("queues/tx-" + std::to_string(q) + "/xps_cpus"), "1");
    irqs << " " << 100 + q << ":  1  2  PCI-MSIX-0000:3b:00.0  " << q << "-edge  lo-TxRx-" << q << "\n";
    put(root / ("proc/irq/" + std::to_string(100 + q) + "/smp_affinity_list"), std::to_string(q % 16));
  }
  irqs << " 99:  1  2  IO-APIC  4-edge  ttyS0\n";
  irqs.close();
  const fs::path ib = root / "sys/class/infiniband/rxe9";
  put(ib / "fw_ver", "16.35.2000");
  put(ib / "board_id", "MT_0000000012");
  put(ib / "node_guid", "5054:00ff:fe12:3456");
  put(ib / "device/numa_node", "0");
  put(ib / "ports/1/state", "4: ACTIVE");
  put(ib / "ports/1/phys_state", "5: LinkUp");
  put(ib / "ports/1/link_layer", "Ethernet");
  put(ib / "ports/1/rate", "100 Gb/sec (4X EDR)");
  put(ib / "ports/1/gids/0", "fe80:0000:0000:0000:5054:00ff:fe12:3456");
  put(ib / "ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:7f00:0001");
  put(ib / "ports/1/gid_attrs/types/1", "RoCE v2");
  put(ib / "ports/1/gid_attrs/ndevs/1", "lo");

  // What the verbs plugin would add (its ibv_query_port), for the device and port picked here.
  auto port_facts = [](const std::string& dev, unsigned port) {
    return dev == "rxe9" && port == 1 ? std::string("{\"active_mtu\":1024}") : std::string();
  };
  const std::string text = fm::fabric_json({"127.0.0.1", "verbs", "", 1, -1, 5, port_facts, ""}, sys(), proc());
  EXPECT_NO_THROW(fm::decode_env("{\"fabric\":" + text + "}"));
  const nlohmann::json f = nlohmann::json::parse(text);
  const auto& nd = f["netdev"];
  EXPECT_EQ(nd["name"], "lo");
  EXPECT_EQ(nd["mtu"], 1400);
  EXPECT_TRUE(nd["speed_mbps"].is_null());  // -1: unknown
  EXPECT_EQ(nd["ipoib_mode"], "connected");
  EXPECT_EQ(nd["rx_queues"], 40);
  ASSERT_EQ(nd["rps_cpus"].size(), fm::kMaxListed);
  EXPECT_EQ(nd["rps_cpus"][11], "00000000,00000001");  // numeric order: rx-11, not rx-2
  EXPECT_EQ(nd["irq_count"], 40);
  EXPECT_EQ(nd["irq_affinity"].size(), fm::kMaxListed);
  EXPECT_EQ(nd["irq_affinity"]["117"], "1");
  EXPECT_FALSE(nd["irq_affinity"].contains("99"));
  EXPECT_EQ(nd["numa_node"], 1);
  const auto& r = f["rdma"];
  EXPECT_EQ(r["device"], "rxe9");
  EXPECT_EQ(r["port_state"], "ACTIVE");
  EXPECT_EQ(r["link_layer"], "ethernet");
  EXPECT_EQ(r["speed_gbps"], 100.0);
  EXPECT_EQ(r["width"], "4X");
  EXPECT_EQ(r["firmware"], "16.35.2000");
  EXPECT_TRUE(r["hca_type"].is_null());
  EXPECT_EQ(r["gid_index"], 1);
  EXPECT_EQ(r["gid"], "::ffff:127.0.0.1");
  EXPECT_EQ(r["gid_type"], "RoCE v2");
  EXPECT_EQ(r["active_mtu"], 1024);
  // The RDMA device's node (0) against CPU 5's (1).
  EXPECT_EQ(f["numa"]["device"], "rxe9");
  ASSERT_EQ(f["warnings"].size(), 1u);
  EXPECT_NE(f["warnings"][0].get<std::string>().find("rxe9 is on NUMA node 0"), std::string::npos);
}

// Masks of a machine of thousands of CPUs: the lists go, the counts and the rest stay.
TEST_F(FakeTree, HugeMasksLeaveTheListsOut) {
  const fs::path lo = root / "sys/class/net/lo";
  for (int q = 0; q < 40; ++q) {
    put(lo / ("queues/rx-" + std::to_string(q) + "/rps_cpus"), std::string(1000, 'f'));
    put(lo / ("queues/tx-" + std::to_string(q) + "/xps_cpus"), std::string(1000, '0'));
  }
  const std::string text = fm::fabric_json({"127.0.0.1", "tcp", "", 1, -1, -1, {}, ""}, sys(), proc());
  EXPECT_LE(text.size(), fm::kMaxFabricBytes);
  const nlohmann::json f = nlohmann::json::parse(text);
  EXPECT_TRUE(f["netdev"]["rps_cpus"].is_null());
  EXPECT_TRUE(f["netdev"]["xps_cpus"].is_null());
  EXPECT_EQ(f["netdev"]["rx_queues"], 40);
  EXPECT_EQ(f["netdev"]["name"], "lo");
}

TEST(Fabric, InterfaceOfALocalAddress) {
  EXPECT_EQ(fm::interface_of("127.0.0.1"), "lo");
  EXPECT_EQ(fm::interface_of("127.0.0.3"), "lo");  // lo's through 127.0.0.1/8
  EXPECT_EQ(fm::interface_of("192.0.2.77"), "");   // in no loopback's prefix, and held by nobody here
  EXPECT_EQ(fm::interface_of("not an address"), "");
}

TEST_F(FakeTree, NoAddressNoNetdev) {
  const nlohmann::json f = nlohmann::json::parse(fm::fabric_json({"192.0.2.77", "tcp", "", 1, -1, 0, {}, ""}, sys(), proc()));
  EXPECT_TRUE(f["netdev"].is_null());
  EXPECT_TRUE(f["rdma"].is_null());
  EXPECT_TRUE(f["numa"].is_null());
}

}  // namespace
