// MountOptions and the checks that can be made before anything is created or mounted.
//
// Every check returns a one-line Status naming the problem, so `epochfs mount` can
// refuse bad input with exit code 2 and leave nothing behind.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "base/status.h"
#include "fs/filesystem.h"

namespace epochfs::daemon {

// How changes made to the source underneath the mount reach readers (fs/filesystem.h).
enum class Consistency {
  kAuto,    // notify on local filesystems, open on network filesystems
  kOpen,    // every open re-checks the source file (close-to-open)
  kNotify,  // the kernel opens by itself; inotify pushes changes to it
};
const char* ConsistencyName(Consistency c);

// The least --ram the daemon works with: the RAM tier must hold a few chunks.
constexpr uint64_t kMinRamBudget = 4ull << 20;
// What the daemon holds beyond --ram: code, thread stacks, libfuse's buffers, RocksDB's
// own, allocator slack (docs/operations.md, measured).
constexpr uint64_t kDaemonOverheadBytes = 48ull << 20;

struct MountOptions {
  std::filesystem::path source;
  std::filesystem::path mountpoint;  // defaults to source: mount over itself
  std::filesystem::path cache_dir;   // empty: DefaultCacheDir(source)
  std::filesystem::path log_file;    // empty: stderr in the foreground, cache_dir/epochfs.log otherwise
  uint64_t ram_budget = 1ull << 30;  // at least kMinRamBudget
  uint64_t disk_budget = 0;          // 0: half of the cache filesystem's free space at mount
  bool disk_budget_set = false;
  uint32_t chunk_size = 1u << 20;
  bool foreground = false;
  bool read_only = false;
  bool allow_other = false;
  bool use_io_uring = true;
  std::string log_level = "info";
  fs::FuseTimeouts timeouts;
  unsigned max_threads = 16;
  Consistency consistency = Consistency::kAuto;
  // The kernel's readahead for the mount. Its default (128 KiB) splits every larger
  // file into several READ round trips; 1 MiB matches the cache's chunk.
  uint64_t readahead = 1u << 20;
  // The prefetcher's readahead (prefetcher/prefetcher.h): files in flight (0 turns off
  // every speculative read: readahead and the SSD tier's read-around), and the most
  // source reads and bytes per second it may use (0: no limit).
  uint32_t prefetch_threads = 4;
  uint64_t prefetch_iops = 0;
  uint64_t prefetch_bandwidth = 0;
  bool prefetch_pacing = true;  // pace readahead by its source latency (source_pacer.h)
  // Move readahead's bytes into the kernel's page cache (kernel_cache/page_cache_pusher.h).
  bool page_cache_push = true;
  // Serve read-only opens of files no tier holds by FUSE passthrough, the kernel reading
  // the source itself, and cache them in idle CPU time (fs/passthrough.h). "open" mode
  // only, on a kernel that grants it.
  bool passthrough = false;
  // Take FUSE requests through io_uring where the kernel offers it (fs/fuse_uring.h).
  // Experimental, off by default: docs/benchmarks.md, "FUSE over io_uring".
  bool fuse_uring = false;
  // Answer isatty() of the mount's files in the kernel where the BPF LSM lets the daemon
  // (daemon/isatty_guard.h); false sends each one to the daemon, as on other kernels.
  bool isatty_guard = true;

  // Observability (daemon/metrics.h): Prometheus text exposition, both off by default.
  std::string metrics_listen;             // "HOST:PORT"; loopback only unless allowed
  bool metrics_allow_remote = false;      // accept a non-loopback metrics_listen host
  std::filesystem::path metrics_textfile; // node-exporter textfile, rewritten every 10 s
};

// "8G", "512M", "1.5G", "4096", "64k": bytes. Powers of 1024. Anything else is an error.
Result<uint64_t> ParseSize(const std::string& text);

// /var/cache/epochfs/<source path with '/' as '-'>-<8 hex digits of its hash>: one
// cache per source, stable across reboots, readable by a person.
std::filesystem::path DefaultCacheDir(const std::filesystem::path& source);

// Fills the defaults (mountpoint, cache dir) and makes paths absolute and canonical.
// Checks: the source exists and is a directory; the mountpoint is a directory and not
// already an epochfs mount; the cache dir is not inside the source or mountpoint.
Status ResolveAndValidate(MountOptions& options);

// kAuto becomes kOpen where inotify cannot see changes (NFS, SMB, Ceph, Lustre, FUSE
// and other network or remote filesystems) and kNotify elsewhere; `why` says which
// filesystem decided it.
Consistency ResolveConsistency(Consistency requested, const std::filesystem::path& source,
                               std::string* why);

// Creates the cache dir if needed and checks it is writable. Sets `created` when this
// call made it (so a failed mount can take it away again).
Status PrepareCacheDir(const std::filesystem::path& dir, bool* created);

}  // namespace epochfs::daemon
