// Passthrough: opens the kernel serves from the source file itself (FUSE passthrough,
// Linux 6.9 and later; `--passthrough`, "open" consistency mode only).
//
// Why: where the source is as fast as the cache (a CPU-bound local brick, a page-cached
// network file), a file read through the daemon costs a second FUSE hop per READ, its copy
// and its cache fill, on the cores the source itself needs (docs/benchmarks.md,
// "Passthrough: the kernel reads the source"). With passthrough an OPEN reply names a
// source file registered with the connection, and the kernel reads and writes that file
// itself, as if there were no mount in between: nothing reaches the daemon until the
// RELEASE. The daemon then fills its cache with the file in the background, at the
// lowest priority (IdleFiller), so later epochs find it cached.
//
// The kernel's rule (fs/fuse/iomode.c): all open files of one inode are in one mode, and
// all passthrough ones name the same backing file. An open that breaks it fails with EIO.
// BackingFiles keeps, per node, the id its passthrough handles share and how many there
// are; SourceFs decides each open's mode under the node's open_order, so that no open
// in the other mode is answered while any handle of one mode lives (the daemon learns of
// a handle's end at its RELEASE, after the kernel let go of it).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_map>

#include "base/counters.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace epochfs::fs {

class Invalidator;

// The backing files registered for the nodes that have passthrough handles.
class BackingFiles {
 public:
  // Returns the id a passthrough OPEN reply of `nodeid` names: the one its passthrough
  // handles share, or a new one registered from `fd` (the node's O_PATH fd: the kernel
  // opens the very file it names). Counts one handle more. Errors: the kernel's refusal
  // (passthrough not granted at INIT, or a kernel before 6.12 that takes no O_PATH fd).
  Result<uint32_t> Acquire(uint64_t nodeid, int fd, Invalidator& kernel);
  // Counts one passthrough handle of `nodeid` less; the last one's end unregisters its
  // id. Returns whether it was the last.
  bool Release(uint64_t nodeid, Invalidator& kernel);
  // Whether `nodeid` has passthrough handles now.
  bool Has(uint64_t nodeid) const;
  // False once the kernel refused a registration for a reason no later one can escape
  // (no CAP_SYS_ADMIN, a source stacked too deep, a kernel that takes no O_PATH fd).
  bool Usable() const { return usable_.load(std::memory_order_relaxed); }

  // Names the counters (base/counters.h); `files` may be null: they are then 0.
  static void VisitCounters(const BackingFiles* files, const CounterVisitor& visit);

 private:
  struct Shared {
    uint32_t id = 0;
    uint32_t handles = 0;
  };
  mutable Mutex mutex_;
  std::unordered_map<uint64_t, Shared> shared_ GUARDED_BY(mutex_);
  uint64_t opens_ GUARDED_BY(mutex_) = 0;     // OPEN replies that named a backing file
  uint64_t refusals_ GUARDED_BY(mutex_) = 0;  // registrations the kernel refused
  std::atomic<bool> usable_{true};
};

// Runs queued tasks on one thread of its own at the lowest priority (nice 19): on CPU time
// other threads leave over, but never starved outright. Not SCHED_IDLE: a READ of a chunk
// the filler is bringing waits for it (the cache coalesces them), so a thread that may
// not run at all on a busy machine would stall the reader, and the unmount that joins it.
// A full queue drops the task offered (a fill that a later epoch's READs make anyway).
class IdleFiller {
 public:
  explicit IdleFiller(size_t max_queued = 4096);
  ~IdleFiller();  // Stop()
  // Drops what is queued and waits for the task under way; later offers are dropped.
  // Idempotent.
  void Stop();
  IdleFiller(const IdleFiller&) = delete;
  IdleFiller& operator=(const IdleFiller&) = delete;

  void Offer(std::function<void()> task);

  // Names the counters (base/counters.h); `filler` may be null: they are then 0.
  static void VisitCounters(const IdleFiller* filler, const CounterVisitor& visit);

 private:
  void Run();

  const size_t max_queued_;
  mutable Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  uint64_t done_ GUARDED_BY(mutex_) = 0;
  uint64_t dropped_ GUARDED_BY(mutex_) = 0;
  std::thread thread_;
};

}  // namespace epochfs::fs
