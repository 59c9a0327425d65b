// SourcePacer: how many source reads per second readahead may issue so that demand
// reads go first, found from how long demand reads wait (a delay-based controller, as
// LEDBAT is for background network transfers).
//
// Why: a source below its capacity answers a read in about its base latency (the
// lowest seen lately). Past it (an IOPS cap enforced in short slices, a disk busy with
// another job) reads queue, and a demand read the trainer waits on queues behind
// readahead: on an IOPS-throttled disk an unpaced readahead made demand misses wait for
// the throttle's next slice, and the reader ran slower than with no readahead worth the
// name (docs/benchmarks.md, "Prefetcher"). Readahead that is itself late costs nothing
// (nobody waits on it), so the signal is the demand reads' latency; every source read,
// readahead's too, feeds the base. Time is cut in steps of kStep (100 ms): the first
// demand read of a step that took longer than base + max(base, 2 ms), while readahead
// read from the source in the last two steps, cuts the rate by a quarter (a burst of
// late reads is one event; late demand reads with no readahead about, as in a cold
// epoch, are not readahead's doing); a step without one raises it by 1/8 (at least 1
// read/s). The rate stays between kMinRate and the cap, and never grows past twice the
// rate readahead actually read at over the last period (kRatePeriod): a pace readahead
// does not use (the reader is slow, the RAM tier is full) is no evidence the source
// could bear it. The base is the minimum over the last 10-20 s (two 10 s buckets), so
// it follows a source whose speed changes.
//
// Depth. The rate says how often readahead may read the source; the depth says how
// many of its reads may be in flight at once. A latency-bound source (a network
// filesystem: each read waits a round trip) completes more reads per second with more
// in flight; an IOPS-capped disk does not (each read only waits longer). So the depth
// climbs a hill: while readahead keeps every slot busy (the depth is what holds it
// back), a period doubles it, and the next period keeps the doubling only if reads
// completed at least 15% faster for it, or took at most twice the base latency (none
// waited behind another: on a busy latency-bound source the rate test alone is noise,
// docs/benchmarks.md, "A latency-bound network source"); otherwise it is halved back
// and held for kHoldPeriods before the next try. A period whose reads took at most
// twice the base doubles it at once, without waiting out a hold. Separately, a period
// whose readahead reads took over 4x the base latency + 2 ms shows the source queueing:
// late demand reads cut the rate only then. On a latency-bound source a demand read is
// late by the network's own jitter, not because readahead is ahead of it in a queue (on
// GlusterFS, cutting at every late demand read held the rate at its floor while the
// source could take many reads in flight: docs/benchmarks.md, "Figures behind design
// choices").
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

#include "base/thread_annotations.h"
#include "cache/cache.h"

namespace epochfs::prefetch {

// It is the cache's DemandObserver: give it as CacheOptions::demand_observer.
class SourcePacer final : public cache::DemandObserver {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kMinRate = 10;  // reads/s: readahead never stops entirely
  // Before anything is known: fast, so that a fast source (a local disk answering in
  // 0.1 ms) is never held back; late demand reads cut it to a slow source's pace.
  static constexpr double kStartRate = 10000;  // reads/s
  // The pace may always grow to this, even when readahead used less.
  static constexpr double kMinCeiling = 100;  // reads/s
  static constexpr auto kMinQueueDelay = std::chrono::milliseconds(2);
  static constexpr auto kStep = std::chrono::milliseconds(100);
  static constexpr auto kBaseBucket = std::chrono::seconds(10);
  static constexpr auto kRatePeriod = std::chrono::milliseconds(500);
  static constexpr auto kDepthPeriod = std::chrono::milliseconds(250);
  static constexpr int kHoldPeriods = 12;  // 3 s between failed probes

  // `cap`: the most reads/s (the user's --prefetch-iops; 0: none). Depth between
  // `min_depth` and `max_depth` (starting at the least). `now` is injectable for tests.
  explicit SourcePacer(double cap, std::function<Clock::time_point()> now = Clock::now,
                       uint32_t min_depth = 4, uint32_t max_depth = 32);

  // A readahead fetch read `chunks` chunks from the source in `latency`. Every chunk
  // counts toward the rate readahead uses; only a one-chunk fetch's latency is one
  // read's, so only it can lower the base. `saturated`: every slot of the depth was
  // taken when it started (readahead was held back by the depth, not by a lack of work).
  void OnReadaheadRead(Clock::duration latency, uint32_t chunks = 1, bool saturated = false);
  // A demand read had to fill from the source and took `latency`.
  void OnDemandRead(Clock::duration latency);
  void OnDemandSourceRead(Clock::duration took) override { OnDemandRead(took); }

  double rate() const;  // reads/s readahead may issue now
  uint32_t depth() const;  // source reads readahead may have in flight now
  uint32_t max_depth() const { return max_depth_; }
  bool queueing() const;   // the last period's readahead reads showed queueing
  Clock::duration base_latency() const;
  uint64_t slowdowns() const;  // times the rate was cut

 private:
  void StepLocked(Clock::time_point now) REQUIRES(mu_);
  void NoteLatencyLocked(Clock::time_point now, Clock::duration latency) REQUIRES(mu_);
  void DepthStepLocked(Clock::time_point now) REQUIRES(mu_);

  const double cap_;
  const std::function<Clock::time_point()> now_;
  mutable Mutex mu_;
  double rate_ GUARDED_BY(mu_);
  // The minimum latency of this and of the last bucket.
  Clock::duration base_now_ GUARDED_BY(mu_);
  Clock::duration base_prev_ GUARDED_BY(mu_);
  Clock::time_point bucket_start_ GUARDED_BY(mu_);
  Clock::time_point step_start_ GUARDED_BY(mu_);
  bool step_slowed_ GUARDED_BY(mu_) = false;
  Clock::time_point period_start_ GUARDED_BY(mu_);
  uint64_t period_reads_ GUARDED_BY(mu_) = 0;
  double used_rate_ GUARDED_BY(mu_) = 0;  // readahead reads/s in the last complete period
  Clock::time_point last_readahead_ GUARDED_BY(mu_);  // the last readahead read of the source
  uint64_t slowdowns_ GUARDED_BY(mu_) = 0;
  const uint32_t min_depth_, max_depth_;
  uint32_t depth_ GUARDED_BY(mu_);
  // Until a period shows otherwise, the source is taken to queue (an IOPS-capped disk
  // is protected from the start).
  bool queueing_ GUARDED_BY(mu_) = true;
  Clock::time_point depth_start_ GUARDED_BY(mu_);
  uint64_t depth_reads_ GUARDED_BY(mu_) = 0, depth_saturated_ GUARDED_BY(mu_) = 0;
  Clock::duration depth_latency_sum_ GUARDED_BY(mu_){};
  bool probing_ GUARDED_BY(mu_) = false;  // the last period doubled the depth
  double rate_before_probe_ GUARDED_BY(mu_) = 0;  // reads/s before that doubling
  int hold_periods_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::prefetch
