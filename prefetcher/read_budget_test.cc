// ReadBudget on a fake clock: the average rate is held, debt is paid before the next
// read, and 0 means unlimited.
#include "prefetcher/read_budget.h"

#include <gtest/gtest.h>

namespace epochfs::prefetch {
namespace {

using Clock = ReadBudget::Clock;
using std::chrono::milliseconds;

struct FakeClock {
  Clock::time_point t{};
  std::function<Clock::time_point()> fn() {
    return [this] { return t; };
  }
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(ReadBudget, UnlimitedNeverWaits) {
  FakeClock clock;
  ReadBudget budget(0, 0, clock.fn());
  EXPECT_FALSE(budget.limited());
  budget.Charge(1'000'000, 1ull << 40);
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, ReadsPerSecondHoldOnAverage) {
  FakeClock clock;
  ReadBudget budget(100, 0, clock.fn());
  // The first second's worth goes at once (the burst) ...
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(budget.Delay(), Clock::duration::zero()) << i;
    budget.Charge(1, 1 << 20);
  }
  // ... then one read per 10 ms.
  EXPECT_NEAR(Seconds(budget.Delay()), 0.010, 1e-6);
  // Simulate a reader that always waits as told: 1000 reads take ~10 s.
  int reads = 0;
  const auto start = clock.t;
  while (reads < 1000) {
    clock.t += budget.Delay();
    ASSERT_EQ(budget.Delay(), Clock::duration::zero());
    budget.Charge(1, 0);
    ++reads;
  }
  EXPECT_NEAR(Seconds(clock.t - start), 10.0, 0.05);
}

TEST(ReadBudget, BytesDebtIsPaidBeforeTheNextRead) {
  FakeClock clock;
  ReadBudget budget(0, 1 << 20, clock.fn());  // 1 MiB/s
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
  budget.Charge(1, 3 << 20);  // 1 MiB of tokens, 3 MiB read: 2 s of debt
  EXPECT_NEAR(Seconds(budget.Delay()), 2.0, 1e-6);
  clock.t += milliseconds(1500);
  EXPECT_NEAR(Seconds(budget.Delay()), 0.5, 1e-6);
  clock.t += milliseconds(500);
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, IdleTimeBanksAtMostOneSecond) {
  FakeClock clock;
  ReadBudget budget(10, 0, clock.fn());
  budget.Charge(10, 0);
  clock.t += std::chrono::hours(1);  // an hour idle still allows only a 10-read burst
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(budget.Delay(), Clock::duration::zero());
    budget.Charge(1, 0);
  }
  EXPECT_GT(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, TheStricterBucketWins) {
  FakeClock clock;
  ReadBudget budget(1000, 1000, clock.fn());  // 1000 reads/s but only 1000 bytes/s
  budget.Charge(1, 3000);
  EXPECT_NEAR(Seconds(budget.Delay()), 2.0, 1e-6);
}

}  // namespace
}  // namespace epochfs::prefetch
