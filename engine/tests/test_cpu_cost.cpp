// The CPU window of a point and the check of the other end's side of it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "fabmeter/cpu_cost.hpp"
#include "fabmeter/error.hpp"

namespace {

std::string refused(const std::string& frame, const fm::CpuSidePlan& plan = {}) {
  try {
    fm::decode_cpu_side(frame, plan);
  } catch (const fm::Error& e) {
    return e.what();
  }
  return "";
}

double field(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  EXPECT_NE(at, std::string::npos) << key;
  return std::stod(json.substr(at + key.size() + 3));
}

}  // namespace

TEST(CpuCost, AWindowCountsTheCpuSpentInIt) {
  fm::CpuWindow w;
  w.open_point();
  w.begin();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  volatile uint64_t spin = 0;
  while (std::chrono::steady_clock::now() < until) spin = spin + 1;
  w.end(1000, "message", 1024 * 1000);
  // The side survives the check a client makes of it, and says what it measured.
  const std::string side = fm::decode_cpu_side(w.side().str());
  EXPECT_NE(side.find("\"window\":\"measured\""), std::string::npos) << side;
  EXPECT_NE(side.find("\"per\":\"message\""), std::string::npos) << side;
  EXPECT_GE(field(side, "window_s"), 0.03);
  EXPECT_GT(field(side, "cpu_s"), 0.0);
  EXPECT_LE(field(side, "cpu_s"), field(side, "window_s") + 0.01);
  EXPECT_DOUBLE_EQ(field(side, "per_message_ns"), field(side, "cpu_s") * 1e9 / 1000);
  EXPECT_DOUBLE_EQ(field(side, "service_demand_us_per_kb"), field(side, "cpu_s") * 1e6 / 1000);
  // The spinning thread was on its CPU or waiting for it the whole window, and never slept.
  EXPECT_GT(field(side, "on_cpu_s"), 0.0);
  EXPECT_LE(field(side, "on_cpu_s") + field(side, "run_delay_s"), field(side, "window_s"));
  EXPECT_EQ(field(side, "sleeps"), 0.0);
}

TEST(CpuCost, TheReadsAreTimedOutsideTheWindow) {
  // Each snapshot's reads are timed; the closing one takes the clock before
  // reading, the opening one after, so the window ends where the reads begin.
  const fm::CpuSnapshot opening = fm::cpu_snapshot({0});
  const fm::CpuSnapshot closing = fm::cpu_snapshot({0}, true);
  EXPECT_GT(opening.read_ns, 0);
  EXPECT_GT(closing.read_ns, 0);
  EXPECT_LE(opening.mono_ns, closing.mono_ns);
  const fm::CpuSnapshot after = fm::cpu_snapshot({0});
  EXPECT_GE(after.mono_ns - after.read_ns, closing.mono_ns + closing.read_ns);
  fm::CpuWindow w;
  w.open_point();
  w.begin();
  w.end(10, "round_trip");
  fm::CpuWindow flows;
  flows.open_point();
  flows.add_flow(w);
  flows.add_flow(w);
  EXPECT_GT(field(w.side().str(), "read_ns"), 0.0);
  EXPECT_DOUBLE_EQ(field(flows.side().str(), "read_ns"), 2 * field(w.side().str(), "read_ns"));
}

TEST(CpuCost, AnUnmarkedPointIsThePointsWindow) {
  fm::CpuWindow w;
  w.open_point();
  w.close_point(0);
  const std::string side = w.side().str();
  EXPECT_NE(side.find("\"window\": \"point\""), std::string::npos) << side;
  EXPECT_NE(side.find("\"per_message_ns\": null"), std::string::npos) << side;
  EXPECT_NO_THROW(fm::decode_cpu_side(side));
}

TEST(CpuCost, TheOtherEndsSideIsCheckedFieldByField) {
  fm::CpuWindow w;
  w.open_point();
  w.end(10, "round_trip");
  const std::string good = w.side().str();
  ASSERT_EQ(refused(good), "");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_NE(refused(with("\"per\": \"round_trip\"", "\"per\": \"hour\"")), "");
  EXPECT_NE(refused(with("\"read_ns\": ", "\"read_ns\": -")), "");
  EXPECT_NE(refused(with("\"count\": 10", "\"count\": 10.5")), "");
  EXPECT_NE(refused(with("\"count\": 10", "\"count\": -10")), "");
  EXPECT_NE(refused(with("\"count\": 10", "\"count\": 1e400")), "");
  EXPECT_NE(refused(with("\"count\": 10", "\"count\": \"10\"")), "");
  EXPECT_NE(refused(with("\"count\": 10", "\"counted\": 10")), "");
  EXPECT_NE(refused(with("{", "{\"extra\": 1, ")), "");
  EXPECT_NE(refused(std::string(20000, '[') + std::string(20000, ']')), "");
  EXPECT_NE(refused(""), "");
  EXPECT_NE(refused(std::string(40 * 1024, ' ') + good), "");
}

TEST(CpuCost, TheOtherEndsSideIsCheckedAsAWhole) {
  // Each field in range; together what no process of the plan's threads could spend or count.
  const std::string side =
      R"({"window": "measured", "window_s": 0.05, "user_s": 0.1, "system_s": 0.05, "cpu_s": 0.15,
          "utilization": 3, "voluntary_switches": 1, "involuntary_switches": 0, "run_delay_s": 0.01, "on_cpu_s": 0.04,
          "sleeps": 0, "read_ns": 1000, "per": "message", "count": 100, "per_message_ns": 1500000,
          "service_demand_us_per_kb": null, "cpus": null})";
  EXPECT_EQ(refused(side, {.threads = 3, .max_count = 100}), "");
  EXPECT_NE(refused(side, {.threads = 2, .max_count = 100}).find("more than 2 threads"), std::string::npos);
  EXPECT_NE(refused(side, {.threads = 3, .max_count = 99}).find("count 100"), std::string::npos);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = side;
    return s.replace(s.find(from), from.size(), to);
  };
  EXPECT_NE(refused(with("\"utilization\": 3", "\"utilization\": 0.5")).find("utilization"), std::string::npos);
  EXPECT_NE(refused(with("\"cpu_s\": 0.15", "\"cpu_s\": 0.14")).find("user_s + system_s"), std::string::npos);
  EXPECT_NE(refused(with("1500000", "15")).find("per_message_ns"), std::string::npos);
  // The measuring thread cannot run and wait for its CPU longer than the window.
  EXPECT_NE(refused(with("\"on_cpu_s\": 0.04", "\"on_cpu_s\": 0.045")).find("on_cpu_s + run_delay_s"),
            std::string::npos);
  EXPECT_EQ(refused(with("\"on_cpu_s\": 0.04", "\"on_cpu_s\": null")), "");
  EXPECT_NE(refused(with("\"sleeps\": 0", "\"sleeps\": 0.5")).find("sleeps"), std::string::npos);
  EXPECT_EQ(refused(with("\"sleeps\": 0", "\"sleeps\": null")), "");  // a system without RUSAGE_THREAD
  EXPECT_NE(refused(with("\"sleeps\": 0", "\"sleeps\": \"0\"")).find("sleeps"), std::string::npos);
}
