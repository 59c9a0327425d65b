// MetadataWarmup: after a restart, brings the source's metadata of the files the last
// epoch read into memory at mount, and keeps it there until the kernel looks them up.
//
// Why: after a restart or a reboot, each LOOKUP of the first epoch stats a source file
// whose directory block and inode are cold. On a slow source that is an IO every few
// files, issued by the readers a few at a time and waited for one by one: a large part
// of that epoch's time (docs/benchmarks.md, "Figures behind design choices"). Opening
// those files O_PATH at mount, several at once and in path order (so neighbouring
// inodes share their IOs), reads the same metadata at the source's full IOPS and ahead
// of the readers; holding the fds (InodeTable::Pin) keeps the dentries and inodes in
// memory even under a memory limit, whose pressure would otherwise evict them before
// the LOOKUP comes. Nothing is served from what the warm-up saw: each LOOKUP still
// stats the source, now from memory.
//
// A pin is closed when the kernel looks its file up (the node holds its own fd then),
// when the file has no name left (deleted underneath: its space must be freed, checked
// every `check_every`), after `max_hold`, and when the warm-up is destroyed.
//
// Thread-safety: construct and destroy on one thread; the work runs on threads of its
// own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "fs/inode_table.h"

namespace epochfs::fs {

class MetadataWarmup {
 public:
  struct Options {
    size_t threads = 8;  // opens in flight: a slow source serves several IOs at once
    std::chrono::milliseconds check_every{1000};
    std::chrono::seconds max_hold{600};  // long enough for a first epoch to begin
  };

  // Starts opening `paths` (relative to the source root `root_fd`, in this order) and
  // pinning them in `table`. `root_fd` and `table` outlive the warm-up.
  MetadataWarmup(int root_fd, std::vector<std::string> paths, InodeTable& table,
                 const Options& options);
  ~MetadataWarmup();  // stops, and closes every pin still held
  MetadataWarmup(const MetadataWarmup&) = delete;
  MetadataWarmup& operator=(const MetadataWarmup&) = delete;

  // Blocks until every path was tried (or the pin budget ran out). For tests.
  void WaitWalked();

  // Whether it is still opening files; how many it opened (pinned or handed on).
  bool walking() const { return walking_.load(std::memory_order_relaxed); }
  uint64_t opened() const { return opened_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  void Run();
  void Walk();

  const int root_fd_;
  const std::vector<std::string> paths_;
  InodeTable& table_;
  const Options options_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> budget_full_{false};
  std::atomic<bool> walking_{true};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> failed_{0};
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool walked_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace epochfs::fs
