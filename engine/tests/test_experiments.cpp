// The experiment table and the transport concept.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>

#include "experiment/table.hpp"
#include "fabmeter/session.hpp"
#include "transport/shm/shm.hpp"
#include "transport/sock/tcp.hpp"
#include "transport/sock/udp.hpp"

namespace {

using fm::Caps;
using fm::RecvMsg;

// The least class the contract accepts.
struct Minimal {
  static Caps caps(const fm::Params&) { return {}; }
  void connect(fm::Ctrl&, uint64_t) {}
  void describe(fm::JsonObj&) const {}
  const char* failure() const { return nullptr; }
  bool post_send(const void*, uint32_t, uint32_t, uint64_t) { return true; }
  bool poll_recv(RecvMsg&) { return false; }
  void release(const RecvMsg&) {}
  int poll_send_comp(uint64_t*, int) { return 0; }
  bool wait_recv(RecvMsg&) { return false; }
  void wait_send() {}
};
struct NoFailure : Minimal {
  const char* failure() = delete;
};
struct NoWaitSend : Minimal {
  void wait_send() = delete;
};
struct IdleAsInt : Minimal {
  int tx_idle() const { return 1; }
};
struct Idle : Minimal {
  bool tx_idle() const { return true; }
};

TEST(TransportConcept, AcceptsTheContractAndNothingLess) {
  EXPECT_TRUE(fm::Transport<Minimal>);
  EXPECT_TRUE(fm::Transport<Idle>);
  EXPECT_FALSE(fm::Transport<NoFailure>);   // the guard asks every transport why it broke
  EXPECT_FALSE(fm::Transport<NoWaitSend>);  // event mode needs it
  EXPECT_FALSE(fm::Transport<IdleAsInt>);   // the optional member, when there, has its type
  EXPECT_TRUE(fm::Transport<fm::ShmTransport>);
  EXPECT_TRUE(fm::Transport<fm::TcpTransport>);
  EXPECT_TRUE(fm::Transport<fm::UdpTransport>);
}

// Every experiment the option table accepts has an entry, and only those.
TEST(ExperimentTable, MatchesTheExperimentList) {
  std::string_view names = fm::kExperiments;
  size_t listed = 0;
  while (!names.empty()) {
    const size_t comma = names.find(',');
    const std::string_view name = names.substr(0, comma);
    const fm::ExperimentEntry* e = fm::find_experiment(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(name, e->name);
    EXPECT_EQ(&fm::kExperimentTable[e->index], e);
    ++listed;
    names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
  }
  EXPECT_EQ(listed, fm::kExperimentTable.size());
  EXPECT_EQ(fm::find_experiment("pingpong"), nullptr);
}

fm::Params params(const char* experiment) {
  fm::Params p;
  p.experiment = experiment;
  p.transport = "tcp";
  return p;
}

TEST(ExperimentTable, PlansAreTheExperimentsOwn) {
  const Caps caps = fm::transport_caps(params("lat"));
  fm::Params lat = params("lat");
  lat.sweep = true;
  lat.max_size = 1024;
  EXPECT_EQ(fm::find_experiment("lat")->plan(lat, caps).size(), 11u);  // 1 B .. 1 KiB

  fm::Params stream = params("stream");
  stream.rate = {100, 1000};
  stream.stream.values = {1, 8, 64};
  const auto grid = fm::find_experiment("stream")->plan(stream, caps);
  ASSERT_EQ(grid.size(), 6u);
  EXPECT_EQ(grid[4].rate, 1000u);
  EXPECT_EQ(grid[4].values, 8u);
  EXPECT_EQ(grid[4].size, fm::stream_size(8));

  const auto check = fm::find_experiment("check")->plan(params("check"), caps);
  ASSERT_EQ(check.size(), 1u);
  EXPECT_EQ(check[0].warmup, 0u);
}

// Each counted experiment's defaults, and fewer messages above 64 KiB.
TEST(ExperimentTable, CountedIterationsAndWarmup) {
  fm::Params p = params("lat");
  EXPECT_EQ(fm::counted_iterations<fm::LatExperiment>(p, 4096), 10000u);
  EXPECT_EQ(fm::counted_iterations<fm::BwExperiment>(p, 4096), 100000u);
  EXPECT_EQ(fm::counted_iterations<fm::SetupExperiment>(p, 4096), 200u);
  EXPECT_EQ(fm::counted_iterations<fm::LatExperiment>(p, 1 << 20), 625u);
  EXPECT_EQ(fm::counted_iterations<fm::LatExperiment>(p, 8 << 20), 100u);
  EXPECT_EQ(fm::counted_warmup<fm::LatExperiment>(p, 4096), 1000u);
  EXPECT_EQ(fm::counted_warmup<fm::LatExperiment>(p, 1 << 20), 62u);
  EXPECT_EQ(fm::counted_warmup<fm::LatExperiment>(p, 1 << 30), 10u);
  EXPECT_EQ(fm::counted_warmup<fm::OnewayExperiment>(p, 1 << 20), 1000u);  // oneway keeps its warm-up
  EXPECT_EQ(fm::counted_warmup<fm::SetupExperiment>(p, 1 << 30), 10u);
  p.iters = 50;
  EXPECT_EQ(fm::counted_iterations<fm::LatExperiment>(p, 8 << 20), 50u);  // never more than asked
  p.iters = UINT64_MAX;  // a client's number: an estimate in double must not wrap
  EXPECT_GT((fm::counted_iterations<fm::LatExperiment, double>(p, 1 << 20)), 1e17);
  p.warmup = 7;
  EXPECT_EQ(fm::counted_warmup<fm::LatExperiment>(p, 1 << 30), 7u);
  fm::Params ow = params("oneway");
  ow.oneway.bursts = 3;
  ow.oneway.burst_size = 5;
  const Caps caps = fm::transport_caps(ow);
  for (const auto& pt : fm::find_experiment("oneway")->plan(ow, caps)) EXPECT_EQ(pt.iterations, 15u);
}

// Only the experiments whose other end stamps messages need its clock, and a
// bigger control frame than the default for the stamps.
TEST(ExperimentTable, RemoteClockAndReportFrames) {
  const Caps caps = fm::transport_caps(params("oneway"));
  for (const fm::ExperimentEntry& e : fm::kExperimentTable) {
    const std::string name = e.name;
    const bool stamps = name == "oneway" || name == "stream";
    EXPECT_EQ(e.remote_clock, stamps) << name;
    fm::Params p = params(e.name);
    const auto plan = e.plan(p, caps);
    ASSERT_FALSE(plan.empty()) << name;
    // Larger frames: the stamp reports, and load's server counts with its pool series.
    EXPECT_EQ(e.report_bytes(p, plan[0]) > 0, stamps || name == "load") << name;
  }
  fm::Params oneway = params("oneway");
  const auto point = fm::find_experiment("oneway")->plan(oneway, caps)[0];
  const uint64_t total = point.warmup + oneway.oneway.bursts * oneway.oneway.burst_size;
  // 32 B payloads may carry t_send: its array is in the bound; --time-thread off, only t_recv's.
  EXPECT_EQ(fm::find_experiment("oneway")->report_bytes(oneway, point), sizeof(fm::OnewayReport) + 16 * total);
  oneway.oneway.time_thread = "off";
  EXPECT_EQ(fm::find_experiment("oneway")->report_bytes(oneway, point), sizeof(fm::OnewayReport) + 8 * total);
}

// One loop per experiment, role and poll mode, each its own instantiation.
TEST(ExperimentTable, LoopsPerPollMode) {
  for (const fm::ExperimentEntry& e : fm::kExperimentTable)
    for (fm::Role role : {fm::Role::client, fm::Role::server}) {
      auto busy = fm::point_loop<fm::TcpTransport>(e, role, fm::Poll::busy);
      auto event = fm::point_loop<fm::TcpTransport>(e, role, fm::Poll::event);
      EXPECT_NE(busy, nullptr);
      EXPECT_NE(busy, event) << e.name;
    }
}

}  // namespace

TEST(Flows, JainIndexBounds) {
  EXPECT_DOUBLE_EQ(fm::jain_index({3, 3, 3, 3}), 1.0);
  EXPECT_DOUBLE_EQ(fm::jain_index({5, 0, 0, 0}), 0.25);  // one flow has everything: 1/n
  EXPECT_DOUBLE_EQ(fm::jain_index({1, 2}), 9.0 / 10.0);
  EXPECT_TRUE(std::isnan(fm::jain_index({0, 0})));
}
