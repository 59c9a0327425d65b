// SourceObserver: what SourceFs sees of the kernel's use of the mount's files, told to
// whoever acts on it (kernel_cache/kernel_activity.h: the prefetcher, the access watcher, the
// page-cache pusher). SourceFs serves requests; it does not decide what an open or a
// READ means for readahead or for the pages the kernel holds.
//
// The calls come from FUSE workers inside requests: an observer must not block on the
// kernel (no notify call, no path walk through the mount), only record or queue. The
// one exception is BeforeFileKnown, which may wait a bounded moment for another thread.
//
// Thread-safety: implementations are called from many workers at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/cache.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {

struct Inode;

class SourceObserver {
 public:
  virtual ~SourceObserver() = default;

  // The kernel looked directory `dir` up (it may now open the files in it), and later
  // forgot it.
  virtual void DirectoryKnown(const Inode& dir) = 0;
  virtual void DirectoryForgotten(const Inode& dir) = 0;
  // The kernel is about to learn a file of directory `dir` (a LOOKUP's reply, or a
  // READDIRPLUS's): once it has, it may open the file without asking. Returns once
  // whatever watches opens in `dir` is in place, or after a bounded wait.
  virtual void BeforeFileKnown(const Inode& dir) = 0;
  // A READDIRPLUS gave the kernel these regular files (their inodes).
  virtual void FilesListed(const std::vector<prefetch::Prefetcher::Opened>& files) = 0;
  // A read-only OPEN of `node` is about to be checked against the source (its pages may
  // still be put in the kernel before the reply), then was answered.
  virtual void BeforeReadOnlyOpen(Inode& node) = 0;
  virtual void ReadOnlyOpened(const Inode& node) = 0;
  // A plan that begins a new epoch is about to take effect (fs/plan_file.h): opens made
  // before it belong to the old epoch and must reach the prefetcher first. May wait for
  // that briefly (no request to the mount).
  virtual void BeforeNewEpochPlan() = 0;
  // A READ of `node` at `offset` reached the daemon.
  virtual void DemandRead(const Inode& node, uint64_t offset) = 0;
  // A READ reply delivered `bytes` at `offset` of `file` into the kernel's page cache
  // (not called for READs that bypass it: direct I/O). What the kernel holds of each
  // file is the observer's to keep (kernel_cache/residency.h).
  virtual void ReadAnswered(Inode& node, uint64_t offset, uint64_t bytes,
                            const cache::SourceIdentity& file) = 0;
  // The last passthrough handle of `node` closed (fs/passthrough.h): the kernel read the
  // file from the source itself, and marked its attributes' atime stale at every read,
  // as READs do.
  virtual void PassthroughClosed(const Inode& node) = 0;
  // The passthrough filler (fs/passthrough.h) read the whole of `file` from the source
  // after the kernel had read it by passthrough, which leaves none of it in the mount's
  // page cache: true when `bytes` (valid during the call) went on into that page cache
  // now, so that the RAM tier need not keep them; false once a passthrough writer came
  // after the node's Inode::passthrough_writes read `passthrough_writes_seen`. Called on
  // the filler's thread, not a FUSE worker's: it may notify the kernel, but never waits
  // for a node's open_order.
  virtual bool TakeFilled(const cache::SourceIdentity& file, std::span<const char> bytes,
                          uint64_t passthrough_writes_seen) = 0;
};

}  // namespace epochfs::fs
