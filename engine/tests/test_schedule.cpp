// fm::StepSchedule, the stream source's step rule (and limits' schedule
// floor): on time, a step is taken; late past the next step, the source
// skips to the step whose slot it is in and counts the skipped steps in the
// measured range only.
#include <gtest/gtest.h>

#include "fabmeter/schedule.hpp"

using fm::StepSchedule;

namespace {

const StepSchedule kS{1000, 100.0};  // step k due at 1000 + 100 k ticks
constexpr uint64_t kWarmup = 5, kTotal = 20;

TEST(StepSchedule, OnTimeTakesTheStep) {
  uint64_t missed = 0;
  EXPECT_EQ(kS.catch_up(7, kS.due(7), kWarmup, kTotal, missed), 7u);
  EXPECT_EQ(kS.catch_up(7, kS.due(8) - 1, kWarmup, kTotal, missed), 7u);  // late, but before the next step
  EXPECT_EQ(missed, 0u);
}

TEST(StepSchedule, LateSkipsToTheCurrentSlotAndCountsTheSkipped) {
  uint64_t missed = 0;
  EXPECT_EQ(kS.catch_up(7, kS.due(10) + 50, kWarmup, kTotal, missed), 10u);  // steps 7, 8, 9 missed
  EXPECT_EQ(missed, 3u);
}

TEST(StepSchedule, OnlyMeasuredStepsCount) {
  uint64_t missed = 0;
  EXPECT_EQ(kS.catch_up(2, kS.due(8), kWarmup, kTotal, missed), 8u);  // 2..4 warm-up, 5..7 measured
  EXPECT_EQ(missed, 3u);
  missed = 0;
  EXPECT_EQ(kS.catch_up(18, kS.due(25), kWarmup, kTotal, missed), 25u);  // past the end: 18, 19 only
  EXPECT_EQ(missed, 2u);
}

}  // namespace
