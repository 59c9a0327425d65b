#include "daemon/ram_balancer.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/thread_name.h"
#include "daemon/memory_trimmer.h"

namespace epochfs::daemon {

RamBalancer::RamBalancer(cache::Cache& cache, uint64_t ram, uint64_t share,
                         std::chrono::milliseconds period)
    : cache_(cache), ram_(ram), share_(share), period_(period) {
  if (period_.count() > 0) thread_ = std::thread([this] { Loop(); });
}

RamBalancer::~RamBalancer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t RamBalancer::MarginFor(uint64_t ram) {
  return std::clamp<uint64_t>(ram / 16, 4ull << 20, 64ull << 20) +
         MemoryTrimmer::kDaemonSlackBytes;
}

uint64_t RamBalancer::MinimumFor(uint64_t ram, uint64_t share) {
  return std::min(share, std::max<uint64_t>(ram / 16, 1ull << 20));
}

uint64_t RamBalancer::BudgetFor(uint64_t ram, uint64_t share, uint64_t others) {
  const uint64_t taken = others + MarginFor(ram);
  return std::max(MinimumFor(ram, share), ram > taken ? ram - taken : 0);
}

uint64_t RamBalancer::ResidentBytes() {
  // statm, not status: one line of numbers, read a few times a second.
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

std::optional<uint64_t> RamBalancer::OthersNow(const cache::RamUse& use) {
  const uint64_t resident = ResidentBytes();
  if (resident == 0) return std::nullopt;
  return resident > use.resident ? resident - use.resident : 0;
}

uint64_t RamBalancer::Step() {
  cache::RamUse use = cache_.RamUsage();
  std::optional<uint64_t> others = OthersNow(use);
  if (!others) {  // no /proc: keep the budget there is
    if (!warned_) spdlog::warn("cannot read /proc/self/statm: the RAM tier keeps its budget");
    warned_ = true;
    return use.budget;
  }
  uint64_t target = BudgetFor(ram_, share_, *others);
  const uint64_t step = MarginFor(ram_) / 8;  // smaller moves only churn pages
  if (target + step <= use.budget) {
    // Buffers the tier let go of (evicted, or pushed into the kernel) stay in malloc's
    // heap, and so in the RSS, until trimmed: they would count as the rest's, and each
    // step would lower the budget by what the last one evicted, down to the share. So
    // measure again with the heap trimmed before taking room away.
    ::malloc_trim(0);
    use = cache_.RamUsage();
    others = OthersNow(use);
    if (!others) return use.budget;
    target = BudgetFor(ram_, share_, *others);
  }
  WarnIfRamIsTooSmall(*others);
  if (target + step <= use.budget || target >= use.budget + 2 * step) {
    cache_.SetRamBudget(target);
    return target;
  }
  return use.budget;
}

void RamBalancer::WarnIfRamIsTooSmall(uint64_t others) {
  const uint64_t needed = others + MinimumFor(ram_, share_);
  if (needed <= ram_ || too_small_warned_) return;
  too_small_warned_ = true;
  spdlog::warn(
      "--ram {} MiB is less than this daemon needs: it holds {} MiB besides the RAM tier, "
      "whose budget is down to its minimum ({} MiB); raise --ram to at least {} MiB to "
      "stay within it",
      ram_ >> 20, others >> 20, MinimumFor(ram_, share_) >> 20,
      (needed + MarginFor(ram_) + (1ull << 20) - 1) >> 20);
}

void RamBalancer::Loop() {
  NameThisThread("ram-balance");
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    Step();
    lock.lock();
  }
}

}  // namespace epochfs::daemon
