// Daemon: one epochfs mount, as an object. Create() builds every part in dependency
// order (cache, prefetcher, filesystem core, FUSE session, watcher, metrics endpoint);
// Run() mounts and serves until unmounted or signalled; the destructor is the shutdown
// sequence. The members are declared in the order they are made, so C++ destroys them
// in the reverse, which is the order the daemon must go down in: whatever reads from a
// part goes before it (systemd status and metrics before the state they report, the
// watcher before the session it notifies through, the session before the filesystem
// it calls, the prefetcher before the cache flushes, the cache before its lock is
// released). A step that is no member's own destructor is a ShutdownStep member, so it
// too runs in its place. daemon/mount.h's RunMount is Create + Run.
//
// Thread-safety: Run() blocks the calling thread and starts libfuse's workers, the
// cache's writer and the prefetcher's workers, all stopped before the destructor
// returns. Create once per process, after any fork().
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "cache/cache.h"
#include "cache/eviction.h"
#include "daemon/isatty_guard.h"
#include "daemon/memory_trimmer.h"
#include "daemon/metrics.h"
#include "daemon/ram_balancer.h"
#include "daemon/metrics_server.h"
#include "daemon/options.h"
#include "daemon/service_notify.h"
#include "daemon/stats_socket.h"
#include "kernel_cache/access_watcher.h"
#include "fs/change_watcher.h"
#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/init_reply.h"
#include "kernel_cache/kernel_activity.h"
#include "kernel_cache/kernel_listing.h"
#include "nlohmann/json.hpp"
#include "kernel_cache/page_cache_pusher.h"
#include "fs/plan_file.h"
#include "fs/root_source_tree.h"
#include "kernel_cache/kernel_cache.h"
#include "fs/source_fs.h"
#include "prefetcher/prefetcher.h"
#include "prefetcher/source_pacer.h"

namespace epochfs::daemon {

// Runs `step` when destroyed (if one was set): a shutdown step that is no member's own
// destructor, declared where it must run.
class ShutdownStep {
 public:
  ShutdownStep() = default;
  ShutdownStep(const ShutdownStep&) = delete;
  ShutdownStep& operator=(const ShutdownStep&) = delete;
  ~ShutdownStep() {
    if (step_) step_();
  }
  void Set(std::function<void()> step) { step_ = std::move(step); }

 private:
  std::function<void()> step_;
};

// The libfuse session; when destroyed, unmounts (if mounted), removes the signal
// handlers (if installed) and frees it.
class FuseSession {
 public:
  FuseSession() = default;
  FuseSession(const FuseSession&) = delete;
  FuseSession& operator=(const FuseSession&) = delete;
  ~FuseSession();
  void Reset(struct fuse_session* session) { session_ = session; }
  struct fuse_session* get() const { return session_; }
  // Installs libfuse's SIGTERM/SIGINT/SIGHUP handlers (they end the session loop).
  Status InstallSignalHandlers();
  Status Mount(const std::filesystem::path& mountpoint, fs::InitWishes wishes);
  // Closes the connection (requests still waiting for an answer fail) and detaches the
  // mount; the destructor does it too. Idempotent.
  void Unmount();

 private:
  struct fuse_session* session_ = nullptr;
  bool signal_handlers_ = false;
};

// --ram is everything the daemon holds for data: the RAM tier, the queue of chunks on
// their way to the SSD tier, and the index's memory. (On top: code, thread stacks and
// allocator slack, docs/operations.md.)
struct MemoryPlan {
  uint64_t ram_tier = 0;
  uint64_t write_queue = 0;
  uint64_t stream_buffers = 0;
  uint64_t read_buffers = 0;  // freed SSD read buffers kept for reuse (cache/buffer_pool.h)
  uint64_t file_table = 0;  // the prefetcher's per-file tables (PrefetcherOptions)
  uint64_t plan = 0;        // a published plan (PlanParserOptions::max_bytes)
};

class Daemon {
 public:
  // Everything up to the mount. `options` are validated and resolved already.
  static Result<std::unique_ptr<Daemon>> Create(const MountOptions& options);
  ~Daemon() = default;  // the members, in reverse: the shutdown sequence
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Mounts and serves until the mount is unmounted or the process gets SIGTERM, SIGINT
  // or SIGHUP. `ready` is called exactly once, as daemon/mount.h says. Returns the
  // process exit code. Call once.
  int Run(const std::function<void(const Status&)>& ready);
  // Whether Run() got as far as mounting.
  bool mounted() const { return mounted_; }

 private:
  explicit Daemon(const MountOptions& options);
  // Builds the members in declaration order; Create's body. One builder per stage, each
  // using what the ones before it built.
  Status Start();
  Status OpenSource();       // the source's fd, the cache dir's lock, the disk budget
  Status BuildCache();       // the memory plan, the pacer, the pusher, the cache
  Status BuildPrefetcher();  // the prefetcher, the memory trimmer and balancer
  Status BuildFilesystem();  // SourceFs, its observer, the plan file, the control files
  Status BuildSession();     // the FUSE session, the consistency mode and its watchers
  Status StartMetrics();     // the metrics endpoint, before mounting
  // The one snapshot of every counter: .epochfs/stats, the stats socket, the metrics
  // exporter and systemd's status line all read it (daemon/metrics.h).
  MountCounters GatherCounters() const;
  nlohmann::json StatsSnapshot() const;
  std::string StatsJson() const;
  // Once mounted: the stats socket, named by the mount's device number.
  void StartStatsSocket();
  // Once mounted: TCGETS on the mount's files answered in the kernel, where it can be.
  void StartIsattyGuard();
  // Once mounted: the kernel cache's pushing (KernelCache::Start).
  void StartPushing();

  MountOptions options_;  // as resolved here (disk budget, consistency)
  const std::chrono::steady_clock::time_point started_;
  bool mounted_ = false;
  UniqueFd root_fd_;  // until SourceFs takes it
  struct ::stat root_stat_ {};
  // One daemon per cache dir: held until everything else is gone.
  UniqueFd cache_dir_lock_;
  // The last step of a clean shutdown: the lock file's pid is cleared, so that
  // `epochfs umount` can tell a daemon that finished its flush from one that was killed
  // on the way (the OOM killer, kill -9): the pid is still there.
  ShutdownStep clear_lock_pid_;
  MemoryPlan memory_;
  // The cache reports late demand reads to it (CacheOptions::demand_observer).
  std::shared_ptr<prefetch::SourcePacer> pacer_;
  // The prefetcher's epoch-aware policy ranks the RAM tier; shared by both.
  std::shared_ptr<cache::EvictionPolicy> ram_policy_;
  std::unique_ptr<cache::Cache> cache_;
  // Flushes the cache once nothing feeds it any more.
  ShutdownStep flush_cache_;
  std::unique_ptr<fs::RootSourceTree> source_tree_;
  // Its workers stop before the cache flushes.
  std::unique_ptr<prefetch::Prefetcher> prefetcher_;
  std::unique_ptr<MemoryTrimmer> memory_trimmer_;
  std::unique_ptr<RamBalancer> ram_balancer_;
  std::unique_ptr<fs::SourceFs> fs_;
  std::unique_ptr<fs::PlanFile> plan_file_;
  fs::FuseContext ctx_;
  std::unique_ptr<fs::ControlDir> control_;
  // The core the session's callbacks call (ctx_.fs). Made once the consistency mode is
  // known, which is after the session is (the watcher notifies through it); declared
  // before the session all the same, so that it outlives it.
  std::unique_ptr<fs::Filesystem> core_;
  FuseSession session_;
  std::unique_ptr<fs::KernelInvalidator> invalidator_;
  // Holds writers through the mount off a file while the watcher or the kernel cache
  // drops or stores its pages (fs/write_fence.h): outlives both.
  std::unique_ptr<fs::WriteFence> write_fence_;
  // Notifies through the session: stopped before it.
  std::unique_ptr<fs::ChangeWatcher> watcher_;
  // The kernel's copy of file data (kernel_cache/kernel_cache.h): made before the cache
  // (which drops through it), observing SourceFs, started once the mount answers.
  // Destroyed after the connection ended: its listing thread may wait in a READDIRPLUS
  // through the mount, which then fails.
  std::unique_ptr<kernel_cache::KernelCache> kernel_cache_;
  // Filesystem::AttachKernel's undo: the filesystem lets go of the watcher and the
  // invalidator before they are destroyed.
  ShutdownStep detach_kernel_;
  // Pushing stops (and a push in flight ends) before the session and the inode table go.
  ShutdownStep stop_kernel_cache_;
  // Requests that wait for a node's open_order, off the FUSE workers (fs/waiting_room.h).
  // Joined right after the connection ended (a request there may wait for a READ that
  // only an ended connection fails), and before what its requests use goes.
  std::unique_ptr<fs::WaitingRoom> waiting_room_;
  // The connection ends first: a push or a drop may be opening a file through the mount
  // (fs/write_fence.h), waiting for a LOOKUP that no worker answers once the loop has
  // stopped (a signal); closing the connection fails that request, and the push ends.
  ShutdownStep end_connection_;
  // Detached as soon as the session loop ends (Run), and in any case before the
  // connection ends: never attached to a device number the mount no longer has.
  std::unique_ptr<IsattyGuard> isatty_guard_;
  mutable std::mutex isatty_mu_;
  std::string isatty_state_ = "daemon (not mounted yet)";  // under isatty_mu_
  std::unique_ptr<MetricsExporter> exporter_;
  // STOPPING=1 to systemd, after the last status line and before the flush (which may
  // take a while).
  ShutdownStep notify_stopping_;
  std::unique_ptr<StatusReporter> status_reporter_;  // set once the mount answers
  // `epochfs status` and `umount` without the mount (daemon/stats_socket.h); set once
  // the mount answers, gone first on the way down.
  std::unique_ptr<StatsSocket> stats_socket_;
};

}  // namespace epochfs::daemon
