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
  budget.Charge(1'000'000, 1ull << 40);
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, ReadsPerSecondHoldOnAverage) {
  FakeClock clock;
  ReadBudget budget(100, 0, clock.fn());
  // 20 ms worth goes at once (the burst) ...
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(budget.Delay(), Clock::duration::zero()) << i;
    budget.Charge(1, 1 << 20);
  }
  // ... then one read per 10 ms.
  EXPECT_NEAR(Seconds(budget.Delay()), 0.010, 1e-6);
  // A reader that always waits as told: 1000 more reads take ~10 s.
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
  ReadBudget budget(0, 50 << 20, clock.fn());  // 50 MiB/s: a burst of 1 MiB
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
  budget.Charge(1, 3 << 20);  // 1 MiB of tokens, 3 MiB read: 40 ms of debt
  EXPECT_NEAR(Seconds(budget.Delay()), 0.04, 1e-6);
  clock.t += milliseconds(30);
  EXPECT_NEAR(Seconds(budget.Delay()), 0.01, 1e-6);
  clock.t += milliseconds(10);
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, IdleTimeBanksAt20Milliseconds) {
  FakeClock clock;
  ReadBudget budget(500, 0, clock.fn());
  budget.Charge(10, 0);
  clock.t += std::chrono::hours(1);  // an hour idle still allows only a 10-read burst
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(budget.Delay(), Clock::duration::zero());
    budget.Charge(1, 0);
  }
  EXPECT_GT(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, SlowRatesStillAllowOneRead) {
  FakeClock clock;
  ReadBudget budget(2, 0, clock.fn());  // 20 ms worth is 0.04 reads
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
  budget.Charge(1, 0);
  EXPECT_NEAR(Seconds(budget.Delay()), 0.5, 1e-6);
}

TEST(ReadBudget, RateChangesTakeEffectAtOnce) {
  FakeClock clock;
  ReadBudget budget(100, 0, clock.fn());
  for (int i = 0; i < 2; ++i) budget.Charge(1, 0);  // the burst is spent
  EXPECT_NEAR(Seconds(budget.Delay()), 0.010, 1e-6);
  budget.SetReadsPerSecond(10);  // the pacer slowed down: one read per 100 ms
  EXPECT_NEAR(Seconds(budget.Delay()), 0.100, 1e-6);
  budget.SetReadsPerSecond(0);  // unlimited
  EXPECT_EQ(budget.Delay(), Clock::duration::zero());
}

TEST(ReadBudget, TheStricterBucketWins) {
  FakeClock clock;
  ReadBudget budget(1000, 10000, clock.fn());  // 1000 reads/s but only 10000 bytes/s
  budget.Charge(1, 2200);  // 200 bytes of tokens: 0.2 s of debt
  EXPECT_NEAR(Seconds(budget.Delay()), 0.2, 1e-6);
}

}  // namespace
}  // namespace epochfs::prefetch
