// The server's stamps after a UDP clock-probe burst (read_probe_stamps):
// what a lying or broken server sends ends the session with a one-line
// reason; what an honest one sends becomes ClockProbes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "experiment/common.hpp"

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

// 64 probes: probe i left at 1e6 + 1e5 i and its answer came back 10 us later; probe 5's was lost.
std::vector<fm::ProbeStamps> client_stamps() {
  std::vector<fm::ProbeStamps> mine(64);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = {1e6 + 1e5 * i, 1e6 + 1e5 * i + 1e4};
  mine[5] = {kNone, kNone};
  return mine;
}

std::string error_of(const std::string& frame) {
  const std::vector<fm::ProbeStamps> mine = client_stamps();
  uint64_t dropped = 0;
  try {
    fm::read_probe_stamps(frame, mine, &dropped);
  } catch (const fm::Error& e) {
    EXPECT_EQ(e.kind, fm::ErrorKind::runtime);
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-fm exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted: " << frame;
  return "";
}

TEST(ClockProbeStamps, AnHonestFrameBecomesProbes) {
  const std::vector<fm::ProbeStamps> mine = client_stamps();
  uint64_t dropped = 1;
  // Probe 5 answered by the server, lost on its way back: checked, not used.
  const auto probes = fm::read_probe_stamps("3\n0 5001000.5 1000\n5 9.0 0\n63 7303000 9999.5", mine, &dropped);
  EXPECT_EQ(dropped, 4u);
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_DOUBLE_EQ(probes[0].sent_ns, 1e6);
  EXPECT_DOUBLE_EQ(probes[0].remote_ns, 5001000.5);
  EXPECT_DOUBLE_EQ(probes[0].received_ns, 1e6 + 1e4);
  EXPECT_DOUBLE_EQ(probes[0].delay_ns(), 9000);
  EXPECT_DOUBLE_EQ(probes[1].sent_ns, 1e6 + 63e5);
  EXPECT_DOUBLE_EQ(probes[1].delay_ns(), 0.5);
  // A turnaround just over the round trip: the other end's clock runs faster than ours (checked, kept; the
  // caller drops probes of negative delay).
  EXPECT_EQ(fm::read_probe_stamps("0\n1 5 10004", mine, &dropped).size(), 1u);
  EXPECT_TRUE(fm::read_probe_stamps("0", mine, &dropped).empty());  // nothing answered: the caller falls back
}

TEST(ClockProbeStamps, MalformedFramesAreRefused) {
  for (const char* frame : {"", "x", "-1", "1\n", "1\n0", "1\n0 5", "1\n0  5 1", "1\n 0 5 1", "1\n0 5 1\n",
                            "1\n0 5 1\r", "1\n0 nan 1", "1\n0 inf 1", "1\n0 5 1e999", "1\n+0 5 1", "1\n0x1 5 1",
                            "99999999999999999999\n0 5 1"})
    EXPECT_NE(error_of(frame), "") << frame;
}

TEST(ClockProbeStamps, IndicesOutOfRangeOrTwiceAreRefused) {
  EXPECT_NE(error_of("0\n64 5 1").find("clock probe index"), std::string::npos);
  EXPECT_NE(error_of("0\n18446744073709551616 5 1").find("clock probe index"), std::string::npos);
  EXPECT_NE(error_of("0\n7 5 1\n7 5 1").find("twice"), std::string::npos);
  // More lines than probes can only come with a repeat.
  std::string frame = "0";
  for (int i = 0; i <= 64; ++i) frame += "\n" + std::to_string(i % 64) + " 5 1";
  EXPECT_NE(error_of(frame), "");
}

TEST(ClockProbeStamps, ALyingTurnaroundIsRefused) {
  // t3 before t2.
  EXPECT_NE(error_of("0\n0 5 -1").find("does not fit in the round trip"), std::string::npos);
  // Longer than the whole round trip (10 us) by more than two clocks' rates can differ (kMaxClockDrift).
  EXPECT_NE(error_of("0\n0 5 10005.001").find("does not fit in the round trip"), std::string::npos);
  // Even for a probe we have no stamps of.
  EXPECT_NE(error_of("0\n5 5 -3").find("does not fit in the round trip"), std::string::npos);
}

}  // namespace
