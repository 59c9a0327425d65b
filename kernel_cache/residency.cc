#include "kernel_cache/residency.h"

namespace epochfs::kernel_cache {

void Residency::SetBudget(uint64_t budget, bool count_reads) {
  budget_.store(budget);
  counts_reads_.store(count_reads);
}

bool Residency::NoteRead(fs::Inode& node, uint64_t offset, uint64_t bytes, uint64_t file_size) {
  fs::KernelPagesRecord& record = node.kernel_pages;
  // A READ inside a file held whole, not at its start, fills a hole: reclaim that takes
  // single pages (proactive reclaim, the edge of an LRU sweep) left the rest, which the
  // kernel still holds. Still believed whole, readahead does not push the whole file
  // again for one page; a wrong belief costs a READ per hole, as it does anyway. Under a
  // memory limit the group's own reclaim takes what was pushed, and readahead pushing
  // it again before its next read is the point: there any READ ends the belief.
  if (FillsHole(node, offset)) {
    hole_reads_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // A READ of the start of a file held whole that ends before the file does: the kernel
  // lacked its first pages and kept the rest (reclaim that takes single pages), or it
  // lost the whole file and a small read asks for it a window at a time (the READs
  // after this one then fill the rest, as holes). Either way, once they are answered
  // the kernel holds the whole file: still believed so. Otherwise the READs covering the
  // rest never come (the kernel has those pages) and the file would stay "not known
  // whole" for good, its next open counting against a quiet epoch (docs/benchmarks.md,
  // "A warm epoch watched from end to end after reclaim took files' first pages").
  if (offset == 0 && bytes < file_size && counts_reads_.load(std::memory_order_relaxed) &&
      HoldsWhole(node)) {
    return false;
  }
  // A READ means the kernel lacks that page: whatever it held of the file, it is not the
  // whole any more (reclaimed, or never all there). Only this file's belief goes: voiding
  // every older one as well (the kernel reclaims the least recently used first) was
  // tried, and a few READs that were no reclaim (opens that dropped pages, READs racing
  // a push) then sent readahead through a thousand files the kernel still held, and
  // slowed warm GlusterFS epochs; after a real reclaim each wrong belief costs its file
  // only one demand READ (docs/benchmarks.md, "Pushing into the page cache", "What a
  // wrong belief costs").
  record.whole_at.store(0, std::memory_order_relaxed);
  // Coverage grows from the start, one READ after the other. Anything else (the
  // kernel's async readahead replied out of order, or a page already covered asked for
  // again: reclaimed) leaves the file "not known whole" until it is read from 0 again.
  uint64_t to = record.read_to.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = offset == 0 ? bytes : offset == to ? to + bytes : 0;
  } while (!record.read_to.compare_exchange_weak(to, next, std::memory_order_relaxed));
  // Only the READ that completed the file says so: a later READ of a page already
  // covered (the kernel lost it) starts over.
  const bool completed = file_size != 0 && next >= file_size && (offset == 0 || to < file_size);
  if (completed && counts_reads_.load(std::memory_order_relaxed)) NoteHeldWhole(node, file_size);
  return completed;
}

bool Residency::FillsHole(const fs::Inode& node, uint64_t offset) const {
  return offset != 0 && counts_reads_.load(std::memory_order_relaxed) && HoldsWhole(node);
}

void Residency::NoteHeldWhole(fs::Inode& node, uint64_t file_size) {
  const uint64_t at = delivered_bytes_.fetch_add(file_size, std::memory_order_relaxed);
  node.kernel_pages.whole_at.store(at + 1, std::memory_order_relaxed);
}

bool Residency::HoldsWhole(const fs::Inode& node) const {
  const uint64_t at = node.kernel_pages.whole_at.load(std::memory_order_relaxed);
  if (at == 0) return false;
  return delivered_bytes_.load(std::memory_order_relaxed) - (at - 1) <
         budget_.load(std::memory_order_relaxed);
}

}  // namespace epochfs::kernel_cache
