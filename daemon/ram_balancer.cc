#include "daemon/ram_balancer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/thread_name.h"

namespace epochfs::daemon {

RamBalancer::RamBalancer(cache::Cache& cache, uint64_t ram, uint64_t floor,
                         std::chrono::milliseconds period)
    : cache_(cache), ram_(ram), floor_(floor), period_(period) {
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
  return std::clamp<uint64_t>(ram / 16, 4ull << 20, 64ull << 20);
}

uint64_t RamBalancer::BudgetFor(uint64_t ram, uint64_t floor, uint64_t others) {
  const uint64_t taken = others + MarginFor(ram);
  return std::max(floor, ram > taken ? ram - taken : 0);
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

uint64_t RamBalancer::Step() {
  const cache::RamUse use = cache_.RamUsage();
  // The tier's bytes that live in the daemon (not pushed pages) are not the rest's. The
  // heap malloc holds free is, until the memory trimmer returns it: its free total
  // (mallinfo2) cannot tell resident pages from those already handed back, and counting
  // the latter as room put RSS plus pushed pages 30 MB past --ram.
  const uint64_t tier_resident = use.bytes > use.kernel_bytes ? use.bytes - use.kernel_bytes : 0;
  const uint64_t resident = ResidentBytes();
  if (resident == 0) return use.budget;  // no /proc: keep what there is
  const uint64_t others = resident > tier_resident ? resident - tier_resident : 0;
  const uint64_t target = BudgetFor(ram_, floor_, others);
  // Taking room back is at once; giving it waits for a step worth a page drop's churn.
  if (target < use.budget || target >= use.budget + MarginFor(ram_) / 4) {
    cache_.SetRamBudget(target);
    return target;
  }
  return use.budget;
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
