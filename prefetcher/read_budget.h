// ReadBudget: how much source IO readahead may use, so that a shared or IOPS-capped
// source (an NFS server, a cloud disk with provisioned IOPS, an HDD also serving
// demand reads) keeps headroom for the reads a trainer is waiting on.
//
// Two token buckets, reads per second and bytes per second, charged *after* a fetch
// (whether a prefetch reads the source or only the SSD tier is known only then): a
// fetch may drive a bucket into debt, and the next one waits until the debt is paid.
// Over any window the average stays within the rates. The burst is kBurst of a
// second's worth (at least one read): short, because IOPS limits are enforced in short
// slices too (the kernel's blk-throttle uses 100 ms), and a readahead burst that spends
// a slice makes the demand reads behind it wait for the next one; 20 ms keeps readahead
// an even stream. 0 means unlimited.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>

#include "base/thread_annotations.h"

namespace epochfs::prefetch {

class ReadBudget {
 public:
  using Clock = std::chrono::steady_clock;
  // `now` is injectable for tests.
  ReadBudget(double reads_per_s, uint64_t bytes_per_s,
             std::function<Clock::time_point()> now = Clock::now);

  // Changes the read rate (the SourcePacer's); 0: unlimited.
  void SetReadsPerSecond(double reads_per_s);

  // How long the caller must wait before its next source read (zero when in budget).
  Clock::duration Delay();

  // Records source reads done.
  void Charge(uint64_t reads, uint64_t bytes);

 private:
  static constexpr double kBurst = 0.02;  // seconds' worth
  bool LimitedLocked() const REQUIRES(mu_) { return reads_per_s_ != 0 || bytes_per_s_ != 0; }
  double ReadBurst() const REQUIRES(mu_) { return std::max(1.0, kBurst * reads_per_s_); }
  double BytesBurst() const { return kBurst * static_cast<double>(bytes_per_s_); }
  void RefillLocked(Clock::time_point now) REQUIRES(mu_);

  const uint64_t bytes_per_s_;
  const std::function<Clock::time_point()> now_;
  Mutex mu_;
  double reads_per_s_ GUARDED_BY(mu_);
  // Tokens; negative = debt.
  double reads_ GUARDED_BY(mu_) = 0;
  double bytes_ GUARDED_BY(mu_) = 0;
  Clock::time_point last_ GUARDED_BY(mu_);
};

}  // namespace epochfs::prefetch
