// SourcePacer on a fake clock: it speeds up while reads come back at the base latency,
// slows down when they queue, once per burst, never below its floor or above the cap,
// and forgets an old base.
#include "prefetcher/source_pacer.h"

#include <gtest/gtest.h>

namespace epochfs::prefetch {
namespace {

using Clock = SourcePacer::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

struct FakeClock {
  Clock::time_point t{};
  std::function<Clock::time_point()> fn() {
    return [this] { return t; };
  }
};

// Drives the pace down with reads that queue, 100 ms apart.
void CutDown(SourcePacer& pacer, FakeClock& clock, int cuts) {
  for (int i = 0; i < cuts; ++i) {
    clock.t += std::chrono::milliseconds(100);
    pacer.OnSourceRead(std::chrono::milliseconds(40));
  }
}

TEST(SourcePacer, StartsFastAndSpeedsUpWhileReadsDoNotQueue) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  EXPECT_EQ(pacer.rate(), SourcePacer::kStartRate);  // a fast source is never held back
  pacer.OnSourceRead(microseconds(500));            // the base
  CutDown(pacer, clock, 20);
  EXPECT_LT(pacer.rate(), 50.0);
  for (int i = 0; i < 2000; ++i) {  // 10 s of 200 reads/s at the base latency
    clock.t += milliseconds(5);
    pacer.OnSourceRead(microseconds(500 + (i % 3) * 100));  // jitter within the target
  }
  // 200 reads/s used: the pace may reach twice that, no more (1/16 a step: within 3 s).
  EXPECT_DOUBLE_EQ(pacer.rate(), 400.0);
  EXPECT_EQ(pacer.slowdowns(), 20u);
  EXPECT_EQ(pacer.base_latency(), microseconds(500));
}

TEST(SourcePacer, SlowsDownWhenReadsQueueOncePerBurst) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnSourceRead(microseconds(500));  // the base
  const double before = pacer.rate();
  // A burst of 10 late completions within 100 ms is one cut of a quarter.
  clock.t += milliseconds(100);
  for (int i = 0; i < 10; ++i) {
    clock.t += milliseconds(1);
    pacer.OnSourceRead(milliseconds(40));
  }
  EXPECT_DOUBLE_EQ(pacer.rate(), before * 3 / 4);
  EXPECT_EQ(pacer.slowdowns(), 1u);
  // Reads that keep queueing keep cutting it, down to the floor.
  for (int i = 0; i < 200; ++i) {
    clock.t += milliseconds(60);
    pacer.OnSourceRead(milliseconds(40));
  }
  EXPECT_DOUBLE_EQ(pacer.rate(), SourcePacer::kMinRate);
}

TEST(SourcePacer, SmallBaseGetsTheMinimumQueueDelay) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnSourceRead(microseconds(100));
  clock.t += milliseconds(100);
  pacer.OnSourceRead(microseconds(1900));  // < 100 us + 2 ms: not queueing
  EXPECT_EQ(pacer.slowdowns(), 0u);
  clock.t += milliseconds(100);
  pacer.OnSourceRead(microseconds(2500));  // > 2.1 ms: queueing
  EXPECT_EQ(pacer.slowdowns(), 1u);
}

TEST(SourcePacer, TheCapHolds) {
  FakeClock clock;
  SourcePacer pacer(150, clock.fn());
  EXPECT_EQ(pacer.rate(), 150.0);
  pacer.OnSourceRead(microseconds(500));
  CutDown(pacer, clock, 5);
  EXPECT_LT(pacer.rate(), 50.0);
  for (int i = 0; i < 3000; ++i) {
    clock.t += milliseconds(2);  // 500 reads/s used
    pacer.OnSourceRead(microseconds(500));
  }
  EXPECT_EQ(pacer.rate(), 150.0);
  SourcePacer tiny(5, clock.fn());  // below the floor: the floor
  EXPECT_EQ(tiny.rate(), SourcePacer::kMinRate);
}

TEST(SourcePacer, AnUnusedPaceDoesNotGrow) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnSourceRead(microseconds(500));
  CutDown(pacer, clock, 30);
  for (int i = 0; i < 1000; ++i) {
    clock.t += milliseconds(100);  // 10 reads/s, all fast
    pacer.OnSourceRead(microseconds(500));
  }
  EXPECT_DOUBLE_EQ(pacer.rate(), SourcePacer::kMinCeiling);  // max(min ceiling, 2 x 10)
}

TEST(SourcePacer, AnOldBaseIsForgotten) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnSourceRead(microseconds(200));  // a fast moment
  clock.t += std::chrono::seconds(11);
  pacer.OnSourceRead(milliseconds(8));  // the source got slower (e.g. a busy HDD)
  EXPECT_EQ(pacer.base_latency(), microseconds(200));  // still within 20 s
  clock.t += std::chrono::seconds(11);
  pacer.OnSourceRead(milliseconds(8));
  EXPECT_EQ(pacer.base_latency(), milliseconds(8));
  const uint64_t before = pacer.slowdowns();
  clock.t += milliseconds(100);
  pacer.OnSourceRead(milliseconds(12));  // < 8 + 8 ms: fine at this source's speed
  EXPECT_EQ(pacer.slowdowns(), before);
}

}  // namespace
}  // namespace epochfs::prefetch
