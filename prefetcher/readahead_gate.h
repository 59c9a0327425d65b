// ReadaheadGate: whether readahead runs at all, found by asking whether the readers
// are faster with it than without it. The SourcePacer (source_pacer.h) sets how fast
// and how deep readahead reads the source; this gate turns it off when it does not pay.
//
// Why: readahead's work is not free. Each file it brings costs the daemon a source
// read, a copy and a push into the page cache, on the same cores as the readers and,
// for a network filesystem run locally, the filesystem's own client and server. Where
// the CPU is the bound, readahead that is ahead of the readers does their reads early
// at about the same cost (and saves each a request to the daemon); readahead that the
// readers overtake (they ask for a file it has taken and not brought yet) only adds its
// threads and its opens to what they do anyway. On a latency-bound source (each read
// waits a round trip that costs no CPU) many reads in flight are the whole gain.
//
// The algorithm. Time is cut in periods of kPeriod. The prefetcher reports every first
// access of an epoch as a hit (readahead had brought the file), overtaken (readahead
// had taken it and not brought it yet) or a miss (readahead never took it). While the
// gate is on, a *suspect* stretch starts a probe:
//  - late: the readers overtook readahead as often as they found its files ready, two
//    periods in a row, with the depth it was given unchanged for as long (a depth still
//    climbing is the pacer's answer to being overtaken on a latency-bound source;
//    pausing it there stalled the climb and cost the published epoch on GlusterFS with
//    a 1 ms brick delay);
//  - saturated: the CPU busy at least kBusy (/proc/stat) for kSaturatedPeriods in a row.
//    The CPU alone waits longer, since readahead ahead of the readers mostly does their
//    reads early rather than more reads, and each probe costs a latency-bound source a
//    part of a short epoch.
// The probe pauses readahead (zero reads in flight), lets the readers use up what it
// had brought (until no access is a hit for kDrainQuiet, at most kMaxDrain), counts
// their accesses for kMeasure, and compares that rate with the rate of the last two
// periods before the pause (an epoch's first period, the readers starting up, is left
// out). Late readahead comes back only if the readers were at least kGain faster with
// it; readahead that was ahead of them goes only if they were at least kHarm faster
// without it (on GlusterFS's local, CPU-bound brick, readahead with a plan made the
// readers faster in more rounds than not, and a coin-flip threshold turned it off in
// noisy periods). Kept, the next probe waits a hold that doubles each time (kFirstHold
// up to kMaxHold), so a source where it pays loses little to probing. Off, nothing is in
// flight; after kOffHold (doubling up to kMaxHold while it keeps failing), and as soon
// as a new epoch's rate without it is known, readahead is tried: on for kWarmUp, not
// counted (it has to get ahead of the readers first), then kMeasure counted; kGain
// faster than the rate just before turns it back on. Only the readers' own rate
// decides: it is what readahead is for, and it includes every cost readahead puts on
// the machine, whatever the source.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "base/thread_annotations.h"

namespace epochfs::prefetch {

class ReadaheadGate {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kPeriod = std::chrono::milliseconds(250);
  static constexpr double kBusy = 0.9;  // CPU busy fraction that counts as saturated
  static constexpr uint32_t kSaturatedPeriods = 16;  // 4 s
  static constexpr auto kDrainQuiet = std::chrono::milliseconds(50);
  static constexpr auto kMaxDrain = std::chrono::milliseconds(300);
  static constexpr auto kMeasure = std::chrono::milliseconds(300);
  static constexpr auto kWarmUp = std::chrono::milliseconds(250);
  static constexpr double kGain = 1.1;  // readers this much faster with readahead: keep it
  static constexpr double kHarm = 1.05;  // readers this much faster without it: drop it
  static constexpr auto kFirstHold = std::chrono::seconds(4);
  static constexpr auto kOffHold = std::chrono::seconds(2);
  static constexpr auto kMaxHold = std::chrono::seconds(32);
  // Periods with fewer accesses say nothing about the readers' rate (an idle reader).
  static constexpr uint32_t kMinAccesses = 16;

  enum class Access : uint8_t { kHit, kOvertaken, kMiss };
  enum class State : uint8_t {
    kOn,        // readahead runs
    kPaused,    // probing: readahead paused, draining what it brought, then measuring
    kOff,       // readahead does not pay: nothing in flight
    kTrying,    // off, trying readahead again (warm-up, then measuring)
  };

  // `cpu_busy` returns the fraction of the machine's CPU time that was busy since its
  // last call (null: /proc/stat). `now` is injectable for tests.
  explicit ReadaheadGate(std::function<double()> cpu_busy = nullptr,
                         std::function<Clock::time_point()> now = Clock::now);

  // A reader's first access to a file in this epoch. Returns true when readahead was
  // just allowed again (workers asleep should wake).
  bool OnAccess(Access access);
  // A new epoch (or plan) begins: the readers' rate is measured anew.
  void OnNewEpoch();
  // Whether readahead may start new work now (advances the periods: workers call it).
  // Returns the same as open() after advancing.
  bool Allows();
  // The depth readahead may use: `wanted` (the pacer's) while allowed, else 0. Notes
  // when `wanted` changes (a depth still changing is not suspect).
  uint32_t Depth(uint32_t wanted);

  State state() const;
  // Whether readahead runs now (on, or trying again), as Allows() says, without
  // advancing the periods.
  bool Runs() const;
  uint64_t offs() const;    // times a probe turned readahead off
  uint64_t probes() const;  // probes run (pauses and tries)
  uint64_t overtaken() const;  // accesses that overtook readahead

 private:
  void AdvanceLocked(Clock::time_point now) REQUIRES(mu_);
  void EndPeriodLocked(Clock::time_point now) REQUIRES(mu_);
  void DecideLocked(Clock::time_point now, bool gained) REQUIRES(mu_);
  static double Rate(uint64_t accesses, Clock::duration over);

  const std::function<double()> cpu_busy_;
  const std::function<Clock::time_point()> now_;
  mutable Mutex mu_;
  State state_ GUARDED_BY(mu_) = State::kOn;
  // The current period's counts.
  Clock::time_point period_start_ GUARDED_BY(mu_);
  uint32_t period_accesses_ GUARDED_BY(mu_) = 0;
  uint32_t period_hits_ GUARDED_BY(mu_) = 0;
  uint32_t period_overtaken_ GUARDED_BY(mu_) = 0;
  // The rate of the last kMeasure of periods in the current state (on or off): what a
  // probe compares with. Kept per period to slide.
  double last_rates_[2] GUARDED_BY(mu_) = {0, 0};  // the last two periods' accesses/s
  uint32_t rate_periods_ GUARDED_BY(mu_) = 0;      // periods counted since the state began
  bool epoch_start_ GUARDED_BY(mu_) = true;        // the next period is an epoch's first
  uint32_t saturated_periods_ GUARDED_BY(mu_) = 0;  // in a row, readahead on
  uint32_t late_periods_ GUARDED_BY(mu_) = 0;       // in a row, readahead on
  uint32_t depth_ GUARDED_BY(mu_) = 0;              // the last `wanted` given to Depth
  Clock::time_point depth_changed_ GUARDED_BY(mu_);
  // The probe in progress.
  Clock::time_point phase_start_ GUARDED_BY(mu_);  // when this state began
  Clock::time_point last_hit_ GUARDED_BY(mu_);
  bool measuring_ GUARDED_BY(mu_) = false;
  Clock::time_point measure_start_ GUARDED_BY(mu_);
  uint64_t measure_accesses_ GUARDED_BY(mu_) = 0;
  double reference_rate_ GUARDED_BY(mu_) = 0;  // the other state's rate, before the probe
  bool probe_late_ GUARDED_BY(mu_) = false;    // readers overtaking readahead started it
  Clock::time_point next_probe_ GUARDED_BY(mu_);
  Clock::duration on_hold_ GUARDED_BY(mu_);
  Clock::duration off_hold_ GUARDED_BY(mu_);
  uint64_t offs_ GUARDED_BY(mu_) = 0;
  uint64_t probes_ GUARDED_BY(mu_) = 0;
  uint64_t overtaken_ GUARDED_BY(mu_) = 0;
};

const char* GateStateName(ReadaheadGate::State state);

}  // namespace epochfs::prefetch
