// RamBalancer: gives the RAM tier the part of --ram that the rest of the daemon leaves
// unused.
//
// --ram bounds what the daemon holds: its resident set plus the pages it pushed into the
// kernel's page cache. PlanMemory (daemon.cc) splits it up front: the RAM tier gets what
// is left after a share each for the SSD write queue, the stream buffers, the index, the
// prefetcher's file table and the plan. Those shares are ceilings, and most of the time
// most of them are unused: in a steady epoch under a memory limit a good part of --ram
// held nothing, while the tier, whose size bounds how many files can be pushed ahead of
// a shuffled reader, was full (docs/benchmarks.md, "Figures behind design choices").
//
// So every period this thread measures what the rest of the daemon holds now (its
// resident set, less the tier's own bytes in it) and sets the tier's budget to --ram
// less that and less a margin. While the rest stays within its ceilings that is at least
// the tier's fixed share; where the rest outgrows them (a small --ram, where the
// daemon's fixed cost is a large part of it) the tier gives up its share too, down to a
// minimum (a sixteenth of --ram), so that --ram still holds. When the rest grows
// (a new data set fills the write queue), the next period takes the room back: the
// tier evicts at once and queues the drops of its pushed pages (Cache::SetRamBudget).
// Before taking room back it trims malloc's heap and measures again: buffers the tier
// let go of stay in the RSS until then, and counted as the rest's they lowered the
// budget step after step down to the share (found in review, reproduced:
// docs/benchmarks.md, "Figures behind design choices"). Moves smaller than an eighth of
// the margin are not made.
//
// What it promises is a target, not a hard bound: between two periods the rest can grow
// past the margin, where the rest alone leaves less than the tier's minimum --ram is
// exceeded (and the log says by how much, once), and with no memory limit the kernel's
// copies of pushed bytes are the kernel's (kernel_cache/page_cache_pusher.h), not counted here.
//
// Thread-safety: the object owns one thread; Step() may also be called directly (tests)
// while that thread is not running (period zero).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

#include "cache/cache.h"

namespace epochfs::daemon {

class RamBalancer {
 public:
  // `ram` is --ram; `share` the tier's fixed share (its budget until the first step).
  // A zero `period` starts no thread.
  RamBalancer(cache::Cache& cache, uint64_t ram, uint64_t share,
              std::chrono::milliseconds period);
  ~RamBalancer();
  RamBalancer(const RamBalancer&) = delete;
  RamBalancer& operator=(const RamBalancer&) = delete;

  // The tier's budget when the rest of the daemon holds `others` bytes.
  static uint64_t BudgetFor(uint64_t ram, uint64_t share, uint64_t others);
  // The least budget the tier is left, however much the rest holds: its share, or a
  // sixteenth of --ram (at least 1 MiB) where that is less.
  static uint64_t MinimumFor(uint64_t ram, uint64_t share);
  // Kept free of --ram: a sixteenth (4 to 64 MiB), and the free heap malloc keeps
  // between two trims, by which the RSS floats (MemoryTrimmer::kDaemonSlackBytes).
  static uint64_t MarginFor(uint64_t ram);

  // Measures once and sets the tier's budget; returns it.
  uint64_t Step();

  // The daemon's resident bytes now (/proc/self/statm).
  static uint64_t ResidentBytes();

 private:
  void Loop();
  // What the rest of the daemon holds now: its RSS less the tier's own resident bytes.
  // nullopt where /proc cannot be read.
  static std::optional<uint64_t> OthersNow(const cache::RamUse& use);
  // Says once in the log when the rest alone leaves the tier less than its minimum.
  void WarnIfRamIsTooSmall(uint64_t others);

  cache::Cache& cache_;
  const uint64_t ram_;
  const uint64_t share_;
  const std::chrono::milliseconds period_;
  bool warned_ = false;  // only Step's caller (one thread) touches these two
  bool too_small_warned_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace epochfs::daemon
