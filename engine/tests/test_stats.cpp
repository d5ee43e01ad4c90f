#include <gtest/gtest.h>

#include <cmath>

#include "fabmeter/stats.hpp"

using fm::percentile_sorted;
using fm::summarize;

// Expected values computed with numpy.percentile (linear) for the same data.
TEST(Stats, PercentileMatchesNumpyLinear) {
  const double v[] = {1, 2, 3, 4, 10};
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 5, 50), 3.0);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 5, 90), 7.6);     // np.percentile([1,2,3,4,10], 90)
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 5, 99), 9.76);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 5, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 5, 100), 10.0);
}

TEST(Stats, SummaryOfUnsortedInput) {
  const double v[] = {10, 1, 4, 3, 2};
  auto s = summarize(v, 5);
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_NEAR(s.stdev, std::sqrt(10.0), 1e-12);  // population stdev (numpy ddof=0)
  EXPECT_NEAR(s.p999, 9.976, 1e-12);
}

TEST(Stats, SingleAndEmpty) {
  const double one[] = {42};
  auto s = summarize(one, 1);
  EXPECT_DOUBLE_EQ(s.p50, 42);
  EXPECT_DOUBLE_EQ(s.p999, 42);
  EXPECT_DOUBLE_EQ(s.stdev, 0);
  auto e = summarize(nullptr, 0);
  EXPECT_EQ(e.count, 0u);
  EXPECT_TRUE(std::isnan(e.p50));
}

TEST(Stats, PercentileKeys) {
  EXPECT_EQ(fm::percentile_key(10), "p10");
  EXPECT_EQ(fm::percentile_key(99.9), "p999");
  EXPECT_EQ(fm::percentile_key(99.99), "p9999");
  EXPECT_EQ(fm::percentile_key(1.5), "p015");
  EXPECT_EQ(fm::percentile_key(9.99), "p0999");  // not p999: the whole part has two digits
  EXPECT_EQ(fm::percentile_key(0.1), "p001");
}

TEST(Stats, ReportedPercentilesJoinEverySummary) {
  std::vector<double> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  fm::set_reported_percentiles({75, 50, 1.5});  // 50 is fixed: not repeated
  const auto s = summarize(v.data(), v.size());
  fm::set_reported_percentiles({});
  ASSERT_EQ(s.extra.size(), 2u);
  EXPECT_DOUBLE_EQ(s.extra[0].first, 1.5);
  EXPECT_DOUBLE_EQ(s.extra[0].second, percentile_sorted(v.data(), v.size(), 1.5));
  EXPECT_DOUBLE_EQ(s.extra[1].second, percentile_sorted(v.data(), v.size(), 75));
  EXPECT_DOUBLE_EQ(s.p10, percentile_sorted(v.data(), v.size(), 10));
  EXPECT_DOUBLE_EQ(s.p9999, percentile_sorted(v.data(), v.size(), 99.99));
  const std::string json = fm::to_json(s).str();
  EXPECT_NE(json.find("\"p015\""), std::string::npos);
  EXPECT_NE(json.find("\"p75\""), std::string::npos);
  EXPECT_EQ(summarize(v.data(), v.size()).extra.size(), 0u);
}

TEST(Stats, BadPercentileListsAreRefused) {
  EXPECT_ANY_THROW(fm::check_percentiles({0}));
  EXPECT_ANY_THROW(fm::check_percentiles({100}));
  EXPECT_ANY_THROW(fm::check_percentiles({99.99999}));
  EXPECT_ANY_THROW(fm::check_percentiles(std::vector<double>(9, 50)));
  EXPECT_NO_THROW(fm::check_percentiles({0.0001, 99.9999}));
}
