#include "base/log_limit.h"

#include <gtest/gtest.h>

namespace epochfs {
namespace {

TEST(LogLimiter, LetsABurstThroughPerPeriodAndCountsWhatItHeldBack) {
  LogLimiter limiter(3, std::chrono::seconds(10));
  const auto t0 = LogLimiter::Clock::now();
  uint64_t held_back = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&held_back, t0));
    EXPECT_EQ(held_back, 0u);
  }
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limiter.Allow(&held_back, t0));
  EXPECT_FALSE(limiter.Allow(&held_back, t0 + std::chrono::seconds(9)));
  // The next period: the first line through reports the 1001 held back.
  EXPECT_TRUE(limiter.Allow(&held_back, t0 + std::chrono::seconds(10)));
  EXPECT_EQ(held_back, 1001u);
  EXPECT_TRUE(limiter.Allow(&held_back, t0 + std::chrono::seconds(10)));
  EXPECT_EQ(held_back, 0u);
}

}  // namespace
}  // namespace epochfs
