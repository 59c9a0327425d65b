// KernelListing: after a restart, lists the folders of the files the last epoch read
// through the mount itself, so that the kernel learns their inodes (READDIRPLUS) before
// the reader opens them.
//
// Why: a push into the page cache needs the file's inode in the kernel's cache
// (PageCachePusher; a store cannot create one). A reader that lists the data set first
// (torchvision's DatasetFolder) gives the kernel every inode at once. One that never
// lists (it opens files by path from a manifest, a CSV or an annotation file) gives it
// none before each open, so after a restart nothing could be pushed ahead of it: every
// file cost a LOOKUP and a READ. Listing is what the first kind of reader does anyway;
// the kernel keeps the entries as long as its memory allows (one it reclaims sends a
// FORGET, and that file is then read as before: nothing is served from the listing).
//
// The daemon lists the mount like any reader, from threads of its own (a FUSE worker
// answers each READDIRPLUS), through private clones of it (mount_view.h) so that a
// folder it holds open does not make the users' unmount busy. A few folders at a time:
// each READDIRPLUS waits for the source's metadata, cold after a reboot, and the stream
// that starts at mount pushes only files whose folder was listed (the others wait in RAM
// for a retry).
//
// Thread-safety: construct, Stop() and destroy on one thread; the listing runs on
// threads of its own (kThreads at most), and the counters may be read from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernel_cache/mount_view.h"

namespace epochfs::kernel_cache {

class KernelListing {
 public:
  // Starts listing `folders` (relative to the mount, in this order) until every one was
  // listed or `max_entries` entries were seen (each costs the kernel a dentry and an
  // inode: about 1.5 KiB). `mount` outlives this.
  KernelListing(const MountView& mount, std::vector<std::string> folders, uint64_t max_entries);
  // Folders listed at once.
  static constexpr size_t kThreads = 4;

  // Stops and joins. A listing blocked in a READDIRPLUS that no FUSE worker will answer
  // any more returns once the session's connection is closed: destroy this after the
  // session (Stop() before it ends).
  ~KernelListing();
  KernelListing(const KernelListing&) = delete;
  KernelListing& operator=(const KernelListing&) = delete;

  // No folder is opened after this; returns at once.
  void Stop() { stop_.store(true, std::memory_order_relaxed); }

  // Whether every thread is done; the folders listed and the entries seen so far. Each
  // thread checks `max_entries` before it opens a folder, so the entries may pass it
  // by up to kThreads folders' worth.
  bool done() const { return running_.load() == 0; }
  uint64_t folders_listed() const { return listed_.load(); }
  uint64_t entries_seen() const { return entries_.load(); }

  // The distinct folders of `paths` (relative file paths; "" for the root), sorted.
  static std::vector<std::string> FoldersOf(const std::vector<std::string>& paths);
  // The folder of one relative file path ("" for the root).
  static std::string FolderOf(const std::string& path);
  // What one listing saw: every entry ("." and ".." too), and of them the regular files.
  struct Listed {
    uint64_t entries = 0;
    uint64_t files = 0;
  };
  // Lists `folder` (relative; "" for the root) of `mount` with getdents64, which the
  // kernel turns into READDIRPLUS requests, stopping once past `max_entries` or when
  // `stop` is set (may be null). nullopt if the folder could not be opened (gone, or the
  // mount is).
  static std::optional<Listed> ListFolder(const MountView& mount, const std::string& folder,
                                          uint64_t max_entries,
                                          const std::atomic<bool>* stop = nullptr);

 private:
  void Run();

  const MountView& mount_;
  const std::vector<std::string> folders_;
  const uint64_t max_entries_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> next_{0};  // the next folder of folders_ a thread takes
  std::atomic<uint64_t> listed_{0}, entries_{0};
  std::atomic<size_t> running_{0};  // threads still listing: the last one logs
  std::vector<std::thread> threads_;  // last: started when everything above is ready
};

}  // namespace epochfs::kernel_cache
