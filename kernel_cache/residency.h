// Residency: what the kernel's page cache holds of each file, as far as the daemon saw
// it fill, so that readahead passes over files the kernel holds whole (a warm epoch:
// every file was read or pushed once) and the pusher does not push them again.
//
// The kernel tells nobody what it holds, so this keeps what it saw: a file is held whole
// once READ replies covered it from 0 to its end, or a push stored it, and no longer once
// the mount dropped its pages (an invalidation, an open without keep_cache, a change
// through the mount: fs records those on the node, fs::KernelPagesRecord::Dropped) or a
// READ of its whole showed the kernel had lost it (a READ further in, or of its first
// pages only, fills a hole). What
// the kernel's own reclaim takes is not seen; at most `budget` bytes are believed held,
// those delivered last (a clock of bytes delivered: a file is held while less than
// `budget` bytes came after it). A wrong "held" costs one demand READ, never a wrong
// byte: nothing is served from this belief.
//
// The record of each file lives on its node (fs::Inode::kernel_pages), so that a READ
// updates it with two atomics and no lookup; this class is the only one that reads it.
//
// Thread-safety: thread-safe, lock-free; READs, pushes and readahead call it at once.
#pragma once

#include <atomic>
#include <cstdint>

#include "fs/inode_table.h"

namespace epochfs::kernel_cache {

class Residency {
 public:
  // Believes at most `budget` bytes held (0, the start: nothing). `count_reads` false (a
  // memory limit, where the pages a READ fills are the first the kernel reclaims): only
  // pushes, whose pages the RAM tier charges and drops itself, count.
  void SetBudget(uint64_t budget, bool count_reads);

  // A READ of `node` at `offset` was answered with `bytes` of a file of `file_size`.
  // Returns whether READ replies have now covered the whole file, in order from 0 (the
  // kernel's page cache got all of it), whether or not reads count as held.
  bool NoteRead(fs::Inode& node, uint64_t offset, uint64_t bytes, uint64_t file_size);
  // Whether a READ of `node` at `offset` fills a hole in a file believed held whole (not
  // its start, no memory limit): the kernel's own reclaim took single pages, and the rest
  // of the file is still there.
  bool FillsHole(const fs::Inode& node, uint64_t offset) const;
  // A push stored the whole file (`file_size` bytes) in the kernel's page cache.
  void NoteHeldWhole(fs::Inode& node, uint64_t file_size);
  bool HoldsWhole(const fs::Inode& node) const;
  // READs NoteRead found filling a hole, since the start.
  uint64_t hole_reads() const { return hole_reads_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> budget_{0};
  std::atomic<bool> counts_reads_{false};
  std::atomic<uint64_t> delivered_bytes_{0};  // the delivery clock
  std::atomic<uint64_t> hole_reads_{0};
};

}  // namespace epochfs::kernel_cache
