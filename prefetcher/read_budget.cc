#include "prefetcher/read_budget.h"

#include <algorithm>

namespace epochfs::prefetch {

ReadBudget::ReadBudget(double reads_per_s, uint64_t bytes_per_s,
                       std::function<Clock::time_point()> now)
    : bytes_per_s_(bytes_per_s), now_(std::move(now)), reads_per_s_(reads_per_s) {
  last_ = now_();
  reads_ = ReadBurst();
  bytes_ = BytesBurst();
}

void ReadBudget::RefillLocked(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  if (seconds <= 0) return;
  reads_ = std::min<double>(reads_ + seconds * reads_per_s_, ReadBurst());
  bytes_ = std::min<double>(bytes_ + seconds * bytes_per_s_, BytesBurst());
}

void ReadBudget::SetReadsPerSecond(double reads_per_s) {
  MutexLock lock(mu_);
  RefillLocked(now_());  // what accrued so far accrued at the old rate
  reads_per_s_ = reads_per_s;
  reads_ = std::min(reads_, ReadBurst());
}

ReadBudget::Clock::duration ReadBudget::Delay() {
  MutexLock lock(mu_);
  if (!LimitedLocked()) return Clock::duration::zero();
  RefillLocked(now_());
  // Wait until both buckets are out of debt (hold at least one read's worth).
  double seconds = 0;
  if (reads_per_s_ != 0 && reads_ < 1) seconds = (1 - reads_) / reads_per_s_;
  if (bytes_per_s_ != 0 && bytes_ < 0) seconds = std::max(seconds, -bytes_ / bytes_per_s_);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void ReadBudget::Charge(uint64_t reads, uint64_t bytes) {
  if (reads == 0 && bytes == 0) return;
  MutexLock lock(mu_);
  if (!LimitedLocked()) return;
  RefillLocked(now_());
  if (reads_per_s_ != 0) reads_ -= static_cast<double>(reads);
  if (bytes_per_s_ != 0) bytes_ -= static_cast<double>(bytes);
}

}  // namespace epochfs::prefetch
