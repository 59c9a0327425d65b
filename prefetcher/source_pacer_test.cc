// SourcePacer on a fake clock: late demand reads slow readahead down (once per step),
// steps without them speed it up to twice what readahead uses, readahead's own latency
// never slows it, the cap and the floor hold, and an old base is forgotten.
#include "prefetcher/source_pacer.h"
#include "prefetcher/testing/fake_clock.h"

#include <gtest/gtest.h>

namespace epochfs::prefetch {
namespace {

using Clock = SourcePacer::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

using prefetch::testing::FakeClock;

// Readahead reading, queued as the demand reads are, and a late demand read, in each of
// `cuts` 100 ms steps.
void CutDown(SourcePacer& pacer, FakeClock& clock, int cuts) {
  for (int i = 0; i < cuts; ++i) {
    clock.t += milliseconds(100);
    pacer.OnReadaheadRead(milliseconds(40));
    pacer.OnDemandRead(milliseconds(40));
  }
}

TEST(SourcePacer, StartsFastAndSpeedsUpWhileDemandReadsDoNotQueue) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  EXPECT_EQ(pacer.rate(), SourcePacer::kStartRate);  // a fast source is never held back
  pacer.OnReadaheadRead(microseconds(500));          // the base
  CutDown(pacer, clock, 20);
  EXPECT_LT(pacer.rate(), 50.0);
  EXPECT_EQ(pacer.slowdowns(), 20u);
  for (int i = 0; i < 2000; ++i) {  // 10 s: readahead at 200 reads/s, demand on time
    clock.t += milliseconds(5);
    pacer.OnReadaheadRead(microseconds(500));
    if (i % 4 == 0) pacer.OnDemandRead(microseconds(500 + (i % 3) * 100));
  }
  // 200 reads/s used: the pace may reach twice that, no more (1/8 a step: within 3 s).
  EXPECT_DOUBLE_EQ(pacer.rate(), 400.0);
  EXPECT_EQ(pacer.slowdowns(), 20u);
  EXPECT_EQ(pacer.base_latency(), microseconds(500));
}

TEST(SourcePacer, LateDemandReadsCutOncePerStep) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(500));  // the base
  const double before = pacer.rate();
  clock.t += milliseconds(100);
  pacer.OnReadaheadRead(microseconds(500));
  for (int i = 0; i < 10; ++i) {  // a burst of 10 late demand reads within a step
    clock.t += milliseconds(1);
    pacer.OnDemandRead(milliseconds(40));
  }
  EXPECT_DOUBLE_EQ(pacer.rate(), before * 3 / 4);
  EXPECT_EQ(pacer.slowdowns(), 1u);
  CutDown(pacer, clock, 60);  // late reads that go on: down to the floor
  EXPECT_DOUBLE_EQ(pacer.rate(), SourcePacer::kMinRate);
}

// A cold epoch: every read is a demand read and they queue behind each other. That is
// not readahead's doing, and its pace stays.
TEST(SourcePacer, LateDemandReadsWithoutReadaheadDoNotCut) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(500));  // the base, then readahead stops
  clock.t += std::chrono::seconds(1);
  for (int i = 0; i < 50; ++i) {
    clock.t += milliseconds(100);
    pacer.OnDemandRead(milliseconds(40));
  }
  EXPECT_EQ(pacer.slowdowns(), 0u);
  EXPECT_EQ(pacer.rate(), SourcePacer::kStartRate);
}

// Files larger than a chunk: their fetches count as readahead activity and use, but a
// batch's latency is not one read's and never becomes the base.
TEST(SourcePacer, MultiChunkFetchesCountButDoNotSetTheBase) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(500));  // the base
  pacer.OnReadaheadRead(microseconds(100), 8);
  EXPECT_EQ(pacer.base_latency(), microseconds(500));
  clock.t += std::chrono::seconds(1);
  for (int i = 0; i < 5; ++i) {  // only multi-chunk readahead, and late demand reads
    clock.t += milliseconds(100);
    pacer.OnReadaheadRead(milliseconds(30), 4);
    pacer.OnDemandRead(milliseconds(40));
  }
  EXPECT_EQ(pacer.slowdowns(), 5u);  // readahead was reading: it is slowed down
  pacer.OnReadaheadRead(milliseconds(1), 0);  // nothing read: nothing noted
  EXPECT_EQ(pacer.base_latency(), microseconds(500));
}

TEST(SourcePacer, LateReadaheadReadsDoNotSlowItDown) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(500));
  for (int i = 0; i < 50; ++i) {
    clock.t += milliseconds(100);
    pacer.OnReadaheadRead(milliseconds(40));  // nobody waits on these
  }
  EXPECT_EQ(pacer.slowdowns(), 0u);
  EXPECT_EQ(pacer.rate(), SourcePacer::kStartRate);
}

TEST(SourcePacer, SmallBaseGetsTheMinimumQueueDelay) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(100));
  clock.t += milliseconds(100);
  pacer.OnDemandRead(microseconds(1900));  // < 100 us + 2 ms: not queueing
  EXPECT_EQ(pacer.slowdowns(), 0u);
  clock.t += milliseconds(100);
  pacer.OnDemandRead(microseconds(2500));  // > 2.1 ms: queueing
  EXPECT_EQ(pacer.slowdowns(), 1u);
}

TEST(SourcePacer, TheCapAndTheFloorHold) {
  FakeClock clock;
  SourcePacer pacer(150, clock.fn());
  EXPECT_EQ(pacer.rate(), 150.0);
  pacer.OnReadaheadRead(microseconds(500));
  CutDown(pacer, clock, 5);
  EXPECT_LT(pacer.rate(), 50.0);
  for (int i = 0; i < 3000; ++i) {
    clock.t += milliseconds(2);  // 500 reads/s used
    pacer.OnReadaheadRead(microseconds(500));
  }
  EXPECT_EQ(pacer.rate(), 150.0);
  SourcePacer tiny(5, clock.fn());  // below the floor: the floor
  EXPECT_EQ(tiny.rate(), SourcePacer::kMinRate);
}

TEST(SourcePacer, AnUnusedPaceDoesNotGrow) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(500));
  CutDown(pacer, clock, 30);
  for (int i = 0; i < 1000; ++i) {
    clock.t += milliseconds(100);  // 10 reads/s, all fast
    pacer.OnReadaheadRead(microseconds(500));
  }
  EXPECT_DOUBLE_EQ(pacer.rate(), SourcePacer::kMinCeiling);  // max(min ceiling, 2 x 10)
}

TEST(SourcePacer, AnOldBaseIsForgotten) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn());
  pacer.OnReadaheadRead(microseconds(200));  // a fast moment
  clock.t += std::chrono::seconds(11);
  pacer.OnReadaheadRead(milliseconds(8));  // the source got slower (e.g. a busy HDD)
  EXPECT_EQ(pacer.base_latency(), microseconds(200));  // still within 20 s
  clock.t += std::chrono::seconds(11);
  pacer.OnReadaheadRead(milliseconds(8));
  EXPECT_EQ(pacer.base_latency(), milliseconds(8));
  clock.t += milliseconds(100);
  pacer.OnDemandRead(milliseconds(12));  // < 8 + 8 ms: on time at this source's speed
  EXPECT_EQ(pacer.slowdowns(), 0u);
}

// Simulates `seconds` of saturated readahead against a source that completes
// depth / latency reads per second, with `latency(depth)` per read.
template <typename Latency>
void Saturate(SourcePacer& pacer, FakeClock& clock, double seconds, Latency latency) {
  const Clock::time_point end = clock.t + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(seconds));
  while (clock.t < end) {
    const Clock::duration each = latency(pacer.depth());
    clock.t += each / pacer.depth();  // depth reads in flight: one completes every each/depth
    pacer.OnReadaheadRead(each, 1, /*saturated=*/true);
  }
}

// A latency-bound source: each read takes 1 ms however many are in flight, so reads
// complete faster with each doubling, up to the most; a demand read late by the
// network's jitter does not cut the rate.
TEST(SourcePacer, DepthGrowsOnALatencyBoundSourceAndJitterCutsNothing) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn(), /*min_depth=*/4, /*max_depth=*/32);
  EXPECT_EQ(pacer.depth(), 4u);
  EXPECT_TRUE(pacer.queueing());  // until shown otherwise
  Saturate(pacer, clock, 4, [](uint32_t) { return milliseconds(1); });
  EXPECT_EQ(pacer.depth(), 32u);
  EXPECT_FALSE(pacer.queueing());
  const double rate = pacer.rate();
  for (int i = 0; i < 10; ++i) {
    clock.t += milliseconds(100);
    pacer.OnReadaheadRead(milliseconds(1), 1, true);
    pacer.OnDemandRead(milliseconds(9));  // late, but the source is not queueing
  }
  EXPECT_EQ(pacer.slowdowns(), 0u);
  EXPECT_GE(pacer.rate(), rate);
}

// A latency-bound source on a busy machine: reads take their base latency however many
// are in flight, but how many complete per period does not show it (here: the same
// number every period). Reads that wait behind no other are reason enough to deepen.
TEST(SourcePacer, DepthGrowsWhileReadsTakeTheirBaseLatencyThoughTheRateIsBlurred) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn(), 4, 32);
  for (int i = 0; i < 400; ++i) {
    clock.t += milliseconds(5);  // 200 reads/s whatever the depth
    pacer.OnReadaheadRead(milliseconds(3), 1, /*saturated=*/true);
  }
  EXPECT_EQ(pacer.depth(), 32u);
  EXPECT_FALSE(pacer.queueing());
}

// Depth grows only while it is what holds readahead back.
TEST(SourcePacer, DepthStaysWhereReadaheadHasSlotsToSpare) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn(), 4, 32);
  for (int i = 0; i < 400; ++i) {
    clock.t += milliseconds(5);
    pacer.OnReadaheadRead(milliseconds(1), 1, /*saturated=*/false);
  }
  EXPECT_EQ(pacer.depth(), 4u);
}

// An IOPS-capped disk (300 reads/s): more in flight only makes each read wait longer.
// Probes find no gain and the depth stays at the least; reads queue, so late demand
// reads cut the rate.
TEST(SourcePacer, DepthStaysLowOnAnIopsCappedDiskAndLateDemandReadsCut) {
  FakeClock clock;
  SourcePacer pacer(0, clock.fn(), 4, 32);
  pacer.OnReadaheadRead(microseconds(500));  // one read alone: the base
  uint32_t deepest = 0;
  for (int i = 0; i < 20; ++i) {
    Saturate(pacer, clock, 0.5, [](uint32_t depth) {
      return std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(depth / 300.0));
    });
    deepest = std::max(deepest, pacer.depth());
  }
  EXPECT_LE(deepest, 8u);  // a probe to 8, given back
  EXPECT_EQ(pacer.depth(), 4u);
  EXPECT_TRUE(pacer.queueing());
  CutDown(pacer, clock, 3);
  EXPECT_EQ(pacer.slowdowns(), 3u);
}

}  // namespace
}  // namespace epochfs::prefetch
