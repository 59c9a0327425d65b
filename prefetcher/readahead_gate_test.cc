// ReadaheadGate on a fake clock and a fake CPU meter, with simulated readers whose rate
// depends on whether readahead runs: readahead that the readers are no faster with (a
// CPU-bound source, or readers that overtake it) goes to zero reads in flight and stays
// there between probes; readahead that makes them faster (a latency-bound source) stays
// on, as deep as the pacer lets it go.
#include "prefetcher/readahead_gate.h"

#include <gtest/gtest.h>

#include "prefetcher/source_pacer.h"
#include "prefetcher/testing/fake_clock.h"

namespace epochfs::prefetch {
namespace {

using Clock = ReadaheadGate::Clock;
using Access = ReadaheadGate::Access;
using State = ReadaheadGate::State;
using std::chrono::microseconds;
using std::chrono::milliseconds;

using prefetch::testing::FakeClock;

// Readers whose rate (files/s) and what they find depend on whether readahead runs.
struct Readers {
  double with_rate = 1000;     // files/s while readahead runs
  double without_rate = 1000;  // files/s while it does not
  Access with = Access::kHit;  // what an access finds while readahead runs
  // Files readahead had brought when it stops: read next at `lead_rate`, as hits.
  int lead = 100;
  double lead_rate = 4000;
};

class Sim {
 public:
  explicit Sim(Readers readers, double busy = 1.0)
      : readers_(readers), busy_(busy), gate_([this] { return busy_; }, clock_.fn()) {}

  // Runs the readers for `d`; returns the files read.
  uint64_t Run(Clock::duration d) {
    const Clock::time_point end = clock_.t + d;
    uint64_t files = 0;
    while (clock_.t < end) {
      const bool on = gate_.Allows();
      if (on) {
        lead_left_ = readers_.lead;
      }
      double rate = on ? readers_.with_rate : readers_.without_rate;
      Access access = on ? readers_.with : Access::kMiss;
      if (!on && lead_left_ > 0) {
        --lead_left_;
        rate = readers_.lead_rate;
        access = Access::kHit;
      }
      clock_.t += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1 / rate));
      gate_.OnAccess(access);
      ++files;
    }
    return files;
  }

  ReadaheadGate& gate() { return gate_; }
  FakeClock& clock() { return clock_; }
  Readers& readers() { return readers_; }
  void set_busy(double busy) { busy_ = busy; }

 private:
  FakeClock clock_;
  Readers readers_;
  double busy_;
  int lead_left_ = 0;
  ReadaheadGate gate_;
};

TEST(ReadaheadGate, ACpuBoundSourceWhereReadaheadCostsTheReadersGoesToZeroInFlight) {
  // The CPU saturated, the readers faster without readahead's work than with it.
  Sim sim(Readers{.with_rate = 850, .without_rate = 1000});
  EXPECT_EQ(sim.gate().Depth(32), 32u);  // on from the start
  sim.Run(std::chrono::seconds(3));
  EXPECT_EQ(sim.gate().probes(), 0u);  // the CPU alone is suspect only after a while
  sim.Run(std::chrono::seconds(3));
  EXPECT_EQ(sim.gate().state(), State::kOff);
  EXPECT_EQ(sim.gate().Depth(32), 0u);
  EXPECT_EQ(sim.gate().offs(), 1u);
  // It stays off: each try (after 2 s, then 4 s, ...) finds no gain either.
  sim.Run(std::chrono::seconds(20));
  EXPECT_EQ(sim.gate().Depth(32), 0u);
  EXPECT_GE(sim.gate().probes(), 3u);
  EXPECT_LE(sim.gate().probes(), 5u);  // the holds double: few tries
}

TEST(ReadaheadGate, ReadaheadAheadOfTheReadersWithoutGainOrHarmStays) {
  // Its files found ready, the readers as fast without it: it did their reads early,
  // at the same cost. Probed, and kept.
  Sim sim(Readers{.with_rate = 1000, .without_rate = 1000});
  sim.Run(std::chrono::seconds(6));
  EXPECT_GE(sim.gate().probes(), 1u);
  EXPECT_EQ(sim.gate().offs(), 0u);
  EXPECT_EQ(sim.gate().Depth(8), 8u);
}

TEST(ReadaheadGate, ReadersOvertakingReadaheadWithNoGainTurnItOffThoughTheCpuIsIdle) {
  // Readahead behind the readers: they reach its files first, and are no faster for it.
  Sim sim(Readers{.with_rate = 800, .without_rate = 800, .with = Access::kOvertaken, .lead = 0},
          /*busy=*/0.3);
  sim.Run(std::chrono::seconds(2));
  EXPECT_EQ(sim.gate().Depth(16), 0u);
  EXPECT_GE(sim.gate().overtaken(), 400u);
  EXPECT_EQ(sim.gate().offs(), 1u);
}

TEST(ReadaheadGate, ALatencyBoundSourceWithAGainStaysOnAndDeep) {
  // Reads wait a round trip: the readers read 1.6x as many files with readahead, the
  // CPU saturated either way (a probe is run, and keeps it).
  Sim sim(Readers{.with_rate = 1600, .without_rate = 1000});
  SourcePacer pacer(0, [&] { return sim.clock().t; }, 4, 32);
  pacer.OnReadaheadRead(milliseconds(2));  // the base: a round trip
  for (int i = 0; i < 600; ++i) {  // 6 s: reads at the base latency, every slot busy
    sim.Run(milliseconds(10));
    for (int k = 0; k < 10; ++k) pacer.OnReadaheadRead(milliseconds(2), 1, /*saturated=*/true);
  }
  EXPECT_EQ(sim.gate().state(), State::kOn);
  EXPECT_GE(sim.gate().probes(), 1u);  // probed once, and kept
  EXPECT_EQ(sim.gate().offs(), 0u);
  EXPECT_EQ(sim.gate().Depth(pacer.depth()), 32u);
  // The holds double while it keeps paying: little time lost to probing.
  const uint64_t probes = sim.gate().probes();
  sim.Run(std::chrono::seconds(30));
  EXPECT_EQ(sim.gate().state(), State::kOn);
  EXPECT_LE(sim.gate().probes() - probes, 3u);
}

TEST(ReadaheadGate, OvertakenWhileTheDepthStillClimbsIsNotSuspect) {
  // A latency-bound source at the start of an epoch: the readers overtake readahead
  // while the pacer doubles its depth every 250 ms; once it is deep enough they do not.
  Sim sim(Readers{.with_rate = 800, .without_rate = 500, .with = Access::kOvertaken, .lead = 0},
          /*busy=*/0.3);
  for (uint32_t depth = 4; depth <= 32; depth *= 2) {
    EXPECT_EQ(sim.gate().Depth(depth), depth);
    sim.Run(milliseconds(250));
  }
  EXPECT_EQ(sim.gate().probes(), 0u);
  EXPECT_EQ(sim.gate().Depth(32), 32u);
  // The same depth from now on, and still overtaken: now it is suspect.
  sim.Run(milliseconds(800));
  EXPECT_EQ(sim.gate().probes(), 1u);
}

TEST(ReadaheadGate, AnIdleCpuAndReadersFindingTheirFilesNeverProbe) {
  Sim sim(Readers{.with_rate = 1000, .without_rate = 1000}, /*busy=*/0.5);
  sim.Run(std::chrono::seconds(10));
  EXPECT_EQ(sim.gate().probes(), 0u);
  EXPECT_EQ(sim.gate().state(), State::kOn);
}

TEST(ReadaheadGate, OffComesBackOnWhenATryShowsAGain) {
  Sim sim(Readers{.with_rate = 850, .without_rate = 1000});
  sim.Run(std::chrono::seconds(6));
  ASSERT_EQ(sim.gate().state(), State::kOff);
  // The source turns latency-bound (a brick moved away): readahead now pays.
  sim.readers().with_rate = 900;
  sim.readers().without_rate = 500;
  sim.Run(std::chrono::seconds(3));  // the next try, 2 s after it went off
  EXPECT_EQ(sim.gate().state(), State::kOn);
  EXPECT_EQ(sim.gate().Depth(8), 8u);
  // And it stays: the probes that follow find the gain again.
  sim.Run(std::chrono::seconds(20));
  EXPECT_EQ(sim.gate().offs(), 1u);
}

TEST(ReadaheadGate, ANewEpochDropsAProbeInProgressAndTriesAgainIfOff) {
  Sim sim(Readers{.with_rate = 850, .without_rate = 1000, .with = Access::kOvertaken, .lead = 0},
          /*busy=*/0.3);
  sim.Run(milliseconds(800));
  ASSERT_EQ(sim.gate().state(), State::kPaused);
  sim.gate().OnNewEpoch();
  EXPECT_EQ(sim.gate().state(), State::kOn);  // dropped: no decision across epochs
  sim.Run(std::chrono::seconds(2));
  ASSERT_EQ(sim.gate().state(), State::kOff);
  // Off: the next epoch's readers are measured without it, then it is tried at once
  // (not after the 2 s hold).
  sim.gate().OnNewEpoch();
  sim.Run(milliseconds(900));  // its first period left out, then two measured
  EXPECT_EQ(sim.gate().state(), State::kTrying);
  EXPECT_EQ(sim.gate().Depth(8), 8u);
}

TEST(ReadaheadGate, IdleReadersDecideNothing) {
  FakeClock clock;
  ReadaheadGate gate([] { return 1.0; }, clock.fn());
  for (int i = 0; i < 100; ++i) {  // 10 files/s: below what a period needs
    clock.t += milliseconds(100);
    gate.OnAccess(Access::kHit);
  }
  EXPECT_EQ(gate.probes(), 0u);
  EXPECT_TRUE(gate.Allows());
}

}  // namespace
}  // namespace epochfs::prefetch
