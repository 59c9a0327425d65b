#include "prefetcher/source_pacer.h"

#include <algorithm>

namespace epochfs::prefetch {

SourcePacer::SourcePacer(double cap, std::function<Clock::time_point()> now,
                         uint32_t min_depth, uint32_t max_depth)
    : cap_(cap > 0 ? std::max(cap, kMinRate) : 1e9),
      now_(std::move(now)),
      rate_(std::min(kStartRate, cap_)),
      base_now_(Clock::duration::max()),
      base_prev_(Clock::duration::max()),
      bucket_start_(now_()),
      step_start_(bucket_start_),
      period_start_(bucket_start_),
      last_readahead_(bucket_start_ - 10 * kStep),
      min_depth_(std::max<uint32_t>(1, min_depth)),
      max_depth_(std::max(std::max<uint32_t>(1, min_depth), max_depth)),
      depth_(min_depth_),
      depth_start_(bucket_start_) {}

void SourcePacer::DepthStepLocked(Clock::time_point now) {
  const Clock::duration elapsed = now - depth_start_;
  if (elapsed < kDepthPeriod) return;
  const Clock::duration base = std::min(base_now_, base_prev_);
  if (depth_reads_ >= 4 && base != Clock::duration::max()) {
    const Clock::duration mean = depth_latency_sum_ / static_cast<int64_t>(depth_reads_);
    queueing_ = mean > 4 * base + std::chrono::milliseconds(2);
    const double rate =
        static_cast<double>(depth_reads_) / std::chrono::duration<double>(elapsed).count();
    const bool held_back = 2 * depth_saturated_ >= depth_reads_;
    // Reads as fast as one alone: none waited behind another, so one more in flight is
    // one more completed per round trip. The rate alone says so too, but too late for
    // an epoch of a few seconds, and not at all while a busy CPU blurs it.
    const bool unqueued = mean <= 2 * base;
    if (unqueued && held_back && depth_ < max_depth_) {
      rate_before_probe_ = rate;
      depth_ = std::min(max_depth_, depth_ * 2);
      probing_ = true;
      hold_periods_ = 0;
    } else if (probing_) {
      // The last period doubled the depth: keep it (and go on) only if reads completed
      // faster for it. A queue that only lengthens each read's wait does not pay.
      probing_ = false;
      if (rate >= 1.15 * rate_before_probe_ && held_back && depth_ < max_depth_) {
        rate_before_probe_ = rate;
        depth_ = std::min(max_depth_, depth_ * 2);
        probing_ = true;
      } else if (rate < 1.15 * rate_before_probe_ && !unqueued) {
        depth_ = std::max(min_depth_, depth_ / 2);
        hold_periods_ = kHoldPeriods;
      }
    } else if (hold_periods_ > 0) {
      --hold_periods_;
    } else if (held_back && depth_ < max_depth_) {
      rate_before_probe_ = rate;
      depth_ = std::min(max_depth_, depth_ * 2);
      probing_ = true;
    }
  }
  depth_start_ = now;
  depth_reads_ = depth_saturated_ = 0;
  depth_latency_sum_ = Clock::duration::zero();
}

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

void SourcePacer::OnReadaheadRead(Clock::duration latency, uint32_t chunks, bool saturated) {
  if (chunks == 0) return;
  MutexLock lock(mu_);
  const Clock::time_point now = now_();
  if (chunks == 1) NoteLatencyLocked(now, latency);
  ++depth_reads_;
  depth_saturated_ += saturated ? 1 : 0;
  depth_latency_sum_ += latency / chunks;
  DepthStepLocked(now);
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
  if (latency > allowed && !step_slowed_ && queueing_ && now - last_readahead_ <= 2 * kStep) {
    rate_ = std::max(kMinRate, rate_ * 3 / 4);
    step_slowed_ = true;
    ++slowdowns_;
  }
}

double SourcePacer::rate() const {
  MutexLock lock(mu_);
  return rate_;
}

uint32_t SourcePacer::depth() const {
  MutexLock lock(mu_);
  return depth_;
}

bool SourcePacer::queueing() const {
  MutexLock lock(mu_);
  return queueing_;
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
