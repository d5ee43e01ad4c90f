// What the server makes of a client's plan before anything is allocated
// (issue 9): estimates that cannot wrap around, and endpoints the server names.
#include <gtest/gtest.h>

#include "fabmeter/error.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/session.hpp"
#include "transport/msg/messaging.hpp"

namespace {

fm::Params plan(const char* experiment, std::vector<std::string> args) {
  fm::Params p;
  p.experiment = experiment;
  fm::parse_options(p, args);
  return p;
}

bool refused(const fm::Params& p, const fm::ServerOptions& o) {
  try {
    fm::check_server_limits(p, fm::transport_caps(p), o);
    return false;
  } catch (const fm::Error& e) {
    return e.kind == fm::ErrorKind::usage;
  }
}

}  // namespace

TEST(ServerLimits, HugeCountsNeverWrapAround) {
  // 2^63 x 8 bytes wraps to 0 in uint64_t; the estimate must stay huge.
  fm::Params p = plan("stream", {"-t", "tcp", "--rate", "1000", "--count", "9223372036854775808"});
  fm::ServerCost c = fm::server_cost(p, fm::transport_caps(p));
  EXPECT_GT(c.memory_bytes, 7e19);
  EXPECT_GT(c.min_seconds, 9e15);
  fm::Params n = plan("lat", {"-t", "tcp", "-n", "99999999999999"});
  EXPECT_GT(fm::server_cost(n, fm::transport_caps(n)).min_seconds, 4e6);
}

TEST(ServerLimits, RefusesOverMemoryAndDuration) {
  fm::ServerOptions o;
  o.max_memory = 8u << 20;
  o.max_duration = 2;
  EXPECT_FALSE(refused(plan("lat", {"-t", "tcp", "-n", "1000"}), o));
  EXPECT_TRUE(refused(plan("stream", {"-t", "tcp", "--rate", "10000000", "--count", "2000000"}), o));  // 16 MB of stamps
  EXPECT_TRUE(refused(plan("stream", {"-t", "tcp", "--rate", "1000", "--count", "5000"}), o));         // 5 s
  EXPECT_TRUE(refused(plan("oneway", {"-t", "tcp", "--bursts", "100000", "--pause-us", "100"}), o));   // 10 s of pauses
  o.max_duration = 0;  // no limit
  EXPECT_FALSE(refused(plan("stream", {"-t", "tcp", "--rate", "1000", "--count", "5000"}), o));
}

TEST(ServerLimits, ServerNamesItsEndpoints) {
  auto mine = [] { return std::string("/srv/own/zmq.sock"); };
  EXPECT_EQ(fm::msg::server_endpoint("zmq", "", "10.0.0.2", mine), "");
  EXPECT_EQ(fm::msg::server_endpoint("zmq", "ipc://", "10.0.0.2", mine), "ipc:///srv/own/zmq.sock");
  EXPECT_THROW(fm::msg::server_endpoint("zmq", "ipc:///etc/passwd", "10.0.0.2", mine), fm::Error);
  EXPECT_EQ(fm::msg::server_endpoint("zmq", "tcp://*:*", "10.0.0.2", mine), "tcp://10.0.0.2:0");
  EXPECT_EQ(fm::msg::server_endpoint("zmq", "tcp://0.0.0.0:5555", "10.0.0.2", mine), "tcp://10.0.0.2:5555");
  EXPECT_EQ(fm::msg::server_endpoint("nng", "tcp://[::]:5555", "fe80::1", mine), "tcp://[fe80::1]:5555");
  EXPECT_THROW(fm::msg::server_endpoint("zmq", "tcp://10.0.0.2:22", "10.0.0.2", mine), fm::Error);
  EXPECT_THROW(fm::msg::server_endpoint("zmq", "tcp://10.0.0.3:5555", "10.0.0.2", mine), fm::Error);
}

TEST(ServerLimits, MessagingClaimPutsIpcInTheSessionsDirectory) {
  int made = 0;
  const fm::ServerPlaces at{"10.0.0.2", [&] {
                              ++made;
                              return std::string("/srv/own");
                            }};
  fm::MessagingOptions m;
  m.endpoint = "tcp://*:*";
  fm::msg::claim_endpoint("nng", m, at);
  EXPECT_EQ(m.endpoint, "tcp://10.0.0.2:0");
  EXPECT_EQ(made, 0);  // no directory for a tcp endpoint
  m.endpoint = "ipc://";
  fm::msg::claim_endpoint("nng", m, at);
  EXPECT_EQ(m.endpoint, "ipc:///srv/own/nng.sock");
  EXPECT_EQ(made, 1);
}
