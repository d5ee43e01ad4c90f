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
