#include "prefetcher/source_pacer.h"

#include <algorithm>

namespace epochfs::prefetch {

SourcePacer::SourcePacer(double cap, std::function<Clock::time_point()> now)
    : cap_(cap > 0 ? std::max(cap, kMinRate) : 1e9),
      now_(std::move(now)),
      rate_(std::min(kStartRate, cap_)),
      base_now_(Clock::duration::max()),
      base_prev_(Clock::duration::max()),
      bucket_start_(now_()),
      step_start_(bucket_start_),
      period_start_(bucket_start_),
      last_readahead_(bucket_start_ - 10 * kStep) {}

void SourcePacer::NoteLatencyLocked(Clock::time_point now, Clock::duration latency) {
  if (now - bucket_start_ >= kBaseBucket) {
    base_prev_ = base_now_;
    base_now_ = Clock::duration::max();
    bucket_start_ = now;
  }
  base_now_ = std::min(base_now_, latency);
}

void SourcePacer::StepLocked(Clock::time_point now) {
  if (now - step_start_ < kStep) return;
  if (!step_slowed_) {  // a step without a late demand read: a little faster, if used
    const double ceiling = std::min(cap_, std::max(kMinCeiling, 2 * used_rate_));
    if (rate_ < ceiling) rate_ = std::min(ceiling, rate_ + std::max(1.0, rate_ / 8));
  }
  step_start_ = now;
  step_slowed_ = false;
}

void SourcePacer::OnReadaheadRead(Clock::duration latency, uint32_t chunks) {
  if (chunks == 0) return;
  MutexLock lock(mu_);
  const Clock::time_point now = now_();
  if (chunks == 1) NoteLatencyLocked(now, latency);
  last_readahead_ = now;
  period_reads_ += chunks;
  if (const auto elapsed = now - period_start_; elapsed >= kRatePeriod) {
    used_rate_ =
        static_cast<double>(period_reads_) / std::chrono::duration<double>(elapsed).count();
    period_reads_ = 0;
    period_start_ = now;
  }
  StepLocked(now);
}

void SourcePacer::OnDemandRead(Clock::duration latency) {
  MutexLock lock(mu_);
  const Clock::time_point now = now_();
  NoteLatencyLocked(now, latency);
  StepLocked(now);
  const Clock::duration base = std::min(base_now_, base_prev_);
  const Clock::duration allowed =
      base + std::max<Clock::duration>(
                 base, std::chrono::duration_cast<Clock::duration>(kMinQueueDelay));
  // The first late demand read of a step cuts, if readahead read lately: otherwise the
  // demand reads queue behind each other (a cold epoch), and readahead is not to blame.
  if (latency > allowed && !step_slowed_ && now - last_readahead_ <= 2 * kStep) {
    rate_ = std::max(kMinRate, rate_ * 3 / 4);
    step_slowed_ = true;
    ++slowdowns_;
  }
}

double SourcePacer::rate() const {
  MutexLock lock(mu_);
  return rate_;
}

SourcePacer::Clock::duration SourcePacer::base_latency() const {
  MutexLock lock(mu_);
  return std::min(base_now_, base_prev_);
}

uint64_t SourcePacer::slowdowns() const {
  MutexLock lock(mu_);
  return slowdowns_;
}

}  // namespace epochfs::prefetch
