// fm::Workload: the shipped W1-W5 sample as their CDFs say (fixed seed, so
// deterministic), and a user's file that is not such a CDF is refused with
// the line that is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "fabmeter/error.hpp"
#include "fabmeter/workload.hpp"

using fm::Rng;
using fm::Workload;

namespace {

// The smallest size whose cumulative probability reaches q.
uint64_t quantile(const Workload& w, double q) {
  for (size_t i = 0; i < w.points(); i++)
    if (w.cdf(i) >= q) return w.length(i);
  return w.max_size();
}

}  // namespace

TEST(Workload, BuiltinsAreHomasW1ToW5) {
  EXPECT_EQ(Workload::builtin_names(), (std::vector<std::string>{"w1", "w2", "w3", "w4", "w5"}));
  // Sizes and means from the files (Homa's util/dist.cc): W1 is mostly tiny
  // messages, W5 mostly megabytes.
  Workload w1 = Workload::load("w1"), w5 = Workload::load("w5");
  EXPECT_EQ(w1.min_size(), 8u);
  EXPECT_EQ(w1.max_size(), 100000u);
  EXPECT_NEAR(w1.cdf(0), 0.31094, 1e-6);
  EXPECT_EQ(w5.max_size(), 29400000u);
  EXPECT_LT(w1.mean_size(), 1000);
  EXPECT_GT(w5.mean_size(), 1e6);
}

TEST(Workload, SamplesMatchEachShippedCdf) {
  constexpr size_t n = 200000;
  for (const auto& name : Workload::builtin_names()) {
    SCOPED_TRACE(name);
    Workload w = Workload::load(name);
    Rng rng(42);
    std::vector<uint64_t> s(n);
    for (auto& x : s) x = w.sample(rng);
    std::sort(s.begin(), s.end());

    // Kolmogorov-Smirnov at every size of the distribution (where a discrete
    // CDF jumps): D below the alpha = 0.001 critical value, 1.95 / sqrt(n).
    double d = 0;
    for (size_t i = 0; i < w.points(); i++) {
      double emp = static_cast<double>(std::upper_bound(s.begin(), s.end(), w.length(i)) - s.begin()) / n;
      d = std::max(d, std::abs(emp - w.cdf(i)));
    }
    EXPECT_LT(d, 1.95 / std::sqrt(double(n)));
    // Only listed sizes come out.
    std::vector<uint64_t> listed;
    for (size_t i = 0; i < w.points(); i++) listed.push_back(w.length(i));
    for (uint64_t x : s) ASSERT_TRUE(std::binary_search(listed.begin(), listed.end(), x)) << x;

    // Mean within 5 standard errors of the CDF's mean.
    double mean = 0, var = 0, prev = 0;
    for (double x : s) mean += static_cast<double>(x) / n;
    for (size_t i = 0; i < w.points(); i++) {
      double p = w.cdf(i) - prev, dx = static_cast<double>(w.length(i)) - w.mean_size();
      var += p * dx * dx;
      prev = w.cdf(i);
    }
    EXPECT_NEAR(mean, w.mean_size(), 5 * std::sqrt(var / n));

    // Percentiles (nearest rank) between the CDF's quantiles 4 sigma either side.
    for (double q : {0.5, 0.9, 0.99}) {
      double sigma = std::sqrt(q * (1 - q) / n);
      uint64_t got = s[static_cast<size_t>(std::ceil(q * n)) - 1];
      EXPECT_GE(got, quantile(w, q - 4 * sigma)) << "p" << q * 100;
      EXPECT_LE(got, quantile(w, q + 4 * sigma)) << "p" << q * 100;
    }
  }
}

TEST(Workload, SeededAndZeroWeightsNeverDrawn) {
  Workload w = Workload::parse("length_bytes,weight\n1,0\n2,3\n3,0\n4,1\n5,0\n", "t.csv");
  EXPECT_DOUBLE_EQ(w.mean_size(), 2.5);
  Rng a(1), b(1), c(2);
  std::vector<uint64_t> sa, sb, sc;
  for (int i = 0; i < 10000; i++) {
    sa.push_back(w.sample(a));
    sb.push_back(w.sample(b));
    sc.push_back(w.sample(c));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  for (uint64_t x : sa) ASSERT_TRUE(x == 2 || x == 4) << x;
  EXPECT_NEAR(std::count(sa.begin(), sa.end(), 2u) / 10000.0, 0.75, 0.02);
}

TEST(Workload, CommentsBlankLinesCrlfAndRelativeWeights) {
  Workload w = Workload::parse("# mine\r\n\r\nlength_bytes,weight\r\n 100 , 2\r\n# mid\r\n200,6\r\n", "t.csv");
  ASSERT_EQ(w.points(), 2u);
  EXPECT_DOUBLE_EQ(w.cdf(0), 0.25);
  EXPECT_DOUBLE_EQ(w.cdf(1), 1.0);
  EXPECT_DOUBLE_EQ(w.mean_size(), 175.0);
}

TEST(Workload, BadFilesNameTheLine) {
  const std::string h = "# c\nlength_bytes,weight\n";
  struct Case {
    std::string text, where, what;
  };
  const std::vector<Case> cases = {
      {"8,1\n", "t.csv:1:", "header"},
      {"# c\nlength_bytes,cdf\n8,0.5\n", "t.csv:2:", "header"},  // a cumulative file is not weights
      {h + "8,1\nabc,1\n", "t.csv:4:", "not a whole number"},
      {h + "8,1\n-8,1\n", "t.csv:4:", "not a whole number"},
      {h + "8,1\n9.5,1\n", "t.csv:4:", "not a whole number"},
      {h + "0,1\n", "t.csv:3:", "1.."},
      {h + "1073741825,1\n", "t.csv:3:", "1.."},
      {h + "8,1\n16,1\n16,1\n", "t.csv:5:", "increase"},
      {h + "8,1\n4,1\n", "t.csv:4:", "increase"},
      {h + "8,-0.5\n", "t.csv:3:", ">= 0"},
      {h + "8,nan\n", "t.csv:3:", "finite"},
      {h + "8,inf\n", "t.csv:3:", "finite"},
      {h + "8,1e999\n", "t.csv:3:", "not a number"},
      {h + "8,x\n", "t.csv:3:", "not a number"},
      {h + "8,\n", "t.csv:3:", "not a number"},
      {h + "8\n", "t.csv:3:", "two fields"},
      {h + "8,1,2\n", "t.csv:3:", "two fields"},
      {h, "t.csv", "no sizes"},
      {"", "t.csv", "no header"},
      {h + "8,0\n9,0\n", "t.csv", "add up to 0"},
      {h + std::string(Workload::kMaxFileBytes, '#'), "t.csv", "larger than"},
  };
  for (const auto& c : cases) {
    try {
      Workload::parse(c.text, "t.csv");
      ADD_FAILURE() << "accepted: " << c.text.substr(0, 80);
    } catch (const fm::Error& e) {
      EXPECT_EQ(e.kind, fm::ErrorKind::usage);
      std::string msg = e.what();
      EXPECT_NE(msg.find(c.where), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
    }
  }
}

TEST(Workload, TooManySizes) {
  std::string text = "length_bytes,weight\n";
  for (size_t i = 1; i <= Workload::kMaxPoints + 1; i++) text += std::to_string(i) + ",1\n";
  try {
    Workload::parse(text, "big.csv");
    ADD_FAILURE() << "accepted " << Workload::kMaxPoints + 1 << " sizes";
  } catch (const fm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("big.csv:" + std::to_string(Workload::kMaxPoints + 2) + ":"),
              std::string::npos)
        << e.what();
  }
}

TEST(Workload, LoadsAFileOrRefusesTheName) {
  std::string path = ::testing::TempDir() + "fm_workload_test.csv";
  {
    std::ofstream f(path);
    f << "length_bytes,weight\n64,1\n32,1\n";
  }
  try {
    Workload::load(path);
    ADD_FAILURE() << "accepted decreasing sizes";
  } catch (const fm::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3:"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(path);
    f << "length_bytes,weight\n32,1\n64,1\n";
  }
  EXPECT_DOUBLE_EQ(Workload::load(path).mean_size(), 48.0);
  std::remove(path.c_str());
  try {
    Workload::load("w6");
    ADD_FAILURE() << "accepted w6";
  } catch (const fm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("w1, w2, w3, w4, w5"), std::string::npos) << e.what();
  }
}
