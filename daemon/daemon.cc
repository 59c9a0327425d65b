#include "daemon/daemon.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cache/cache.h"
#include "base/unique_fd.h"
#include "fmt/format.h"
#include "fs/change_watcher.h"
#include "fs/control.h"
#include "fs/fuse_ops.h"
#include "kernel_cache/page_cache_pusher.h"
#include "fs/init_reply.h"
#include "daemon/memory_limit.h"
#include "daemon/metrics.h"
#include "daemon/metrics_server.h"
#include "daemon/mount_table.h"
#include "fs/plan_file.h"
#include "daemon/service_notify.h"
#include "fs/source_fs.h"
#include "fs/write_fence.h"
#include "nlohmann/json.hpp"
#include "prefetcher/prefetcher.h"
#include "spdlog/spdlog.h"

#ifndef EPOCHFS_VERSION
#define EPOCHFS_VERSION "dev"
#endif

namespace epochfs::daemon {

using fs::ChangeWatcher;
using fs::ControlDir;
using fs::FuseContext;
using fs::KernelInvalidator;
using fs::PlanFile;
using fs::RequestKind;
using fs::RequestKindName;
using fs::SourceFs;
using fs::SourceFsOptions;
namespace {

// VmRSS and VmHWM of this process, in bytes.
std::pair<uint64_t, uint64_t> ResidentSetBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  uint64_t rss = 0, peak = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stoull(line.substr(6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) peak = std::stoull(line.substr(6)) * 1024;
  }
  return {rss, peak};
}

// What the index (RocksDB) may hold in memory: its 8 MiB block cache and two 4 MiB
// memtables (cache/index.cc).
constexpr uint64_t kIndexMemoryBytes = 16ull << 20;

// The kernel memory one file's metadata takes while the warm-up holds it: its dentry and
// its inode (about 1.2 KiB on ext4), rounded up.
constexpr uint64_t kWarmedMetadataBytes = 1536;

// After a restart, the files the last epoch read (what the prefetcher remembered from its
// record, in path order, so neighbours share their metadata's IOs) have their source metadata brought into
// memory ahead of the first epoch (fs/metadata_warmup.h). It holds kernel memory, not
// the daemon's: at most an eighth of --ram's worth.
void WarmRecordedMetadata(const prefetch::Prefetcher& prefetcher, uint64_t ram,
                          fs::SourceFs& fs) {
  std::vector<std::string> paths = prefetcher.KnownPaths();
  if (paths.empty()) return;  // no epoch recorded yet: nothing to warm
  std::sort(paths.begin(), paths.end());
  const uint64_t most = std::max<uint64_t>(1, ram / 8 / kWarmedMetadataBytes);
  if (paths.size() > most) paths.resize(most);
  fs.WarmMetadata(std::move(paths), fs::MetadataWarmup::Options{});
}

// How long a plan's writer waits for its entries to be checked before the rest are
// checked after publication (fs/plan_file.h). EPOCHFS_PLAN_RESOLVE_BUDGET_MS overrides
// it (docs/operations.md): 0 checks every entry after publication (the tests of that
// path), a large value makes every refusal fail the write, as on a fast source.
std::chrono::milliseconds PlanResolveBudget() {
  const char* value = std::getenv("EPOCHFS_PLAN_RESOLVE_BUDGET_MS");
  if (value == nullptr || *value == '\0') return fs::PlanFile::kResolveBudget;
  char* end = nullptr;
  const long long ms = std::strtoll(value, &end, 10);
  if (*end != '\0' || ms < 0) {
    spdlog::warn("EPOCHFS_PLAN_RESOLVE_BUDGET_MS='{}' is not a number of milliseconds: using {} ms",
                 value, fs::PlanFile::kResolveBudget.count());
    return fs::PlanFile::kResolveBudget;
  }
  // A day is "wait for every check"; more would overflow the deadline's clock.
  return std::chrono::milliseconds(std::min<long long>(ms, 24LL * 3600 * 1000));
}

MemoryPlan PlanMemory(uint64_t ram) {
  MemoryPlan plan;
  plan.write_queue = std::clamp<uint64_t>(ram / 8, 4ull << 20, 64ull << 20);
  // Up to 32 MB: a streamed batch (64 files, about 8 MB of runs at ~110 KB a file)
  // holds its share of these buffers while its files are pushed, and with 16 MB only
  // two prefetch threads' batches fit at once: the others' reads waited for those
  // pushes (docs/benchmarks.md, "Figures behind design choices").
  plan.stream_buffers = std::clamp<uint64_t>(ram / 16, 1ull << 20, 32ull << 20);
  // Enough for the reads that come between an eviction and the next (buffer_pool.h).
  plan.read_buffers = std::clamp<uint64_t>(ram / 32, 1ull << 20, 16ull << 20);
  // Per-file bookkeeping grows with the data set, not with the bytes cached: 300,000
  // small files cost the prefetcher more than a 64M RAM tier holds. It gets its own
  // share, and what does not fit is served untracked.
  plan.file_table = ram / 8;
  plan.plan = ram / 16;
  const uint64_t fixed = plan.write_queue + plan.stream_buffers + plan.read_buffers +
                         kIndexMemoryBytes + plan.file_table + plan.plan;
  plan.ram_tier = ram > fixed ? ram - fixed : 0;
  return plan;
}

// One daemon per cache dir: two writers would interleave their packs.
Result<UniqueFd> LockCacheDir(const std::filesystem::path& dir) {
  const auto path = dir / "lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Status::FromErrno(errno, fmt::format("cannot open {}", path.string()));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK) {
      char pid[32] = {};
      ssize_t n = ::pread(fd.get(), pid, sizeof(pid) - 1, 0);
      return Status::Busy(fmt::format("cache dir {} is in use by another epochfs daemon{}",
                                      dir.string(), n > 0 ? fmt::format(" (pid {})", pid) : ""));
    }
    return Status::FromErrno(errno, fmt::format("cannot lock {}", path.string()));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd.get(), 0) == 0) {
    ssize_t ignored = ::pwrite(fd.get(), pid.data(), pid.size(), 0);
    (void)ignored;  // the pid is a courtesy for the error message above
  }
  return fd;
}

uint64_t DefaultDiskBudget(const std::filesystem::path& dir) {
  struct ::statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) < 0) return 1ull << 30;
  return static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize / 2;
}

// A FUSE daemon holds a directory fd per known directory and file fds for nodes and
// open files; SourceFs shares the limit out (fs/file_handle.h). The soft limit goes up
// to the hard one; the hard one is the operator's (LimitNOFILE=, a container's) and is
// respected even by a root daemon.
void RaiseFdLimit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < 1024) {
    spdlog::warn("fd limit {}: few files stay open at once; more opens share those fds",
                 lim.rlim_cur);
  }
}

// Raises the mount's readahead through its bdi (/sys/class/bdi/MAJ:MIN). Call it only
// once the kernel's INIT has been answered: the INIT reply sets the readahead to
// min(current, what libfuse says), which is the kernel's 128 KiB default.
void SetReadahead(const std::filesystem::path& mountpoint, uint64_t bytes) {
  std::string device;
  for (const auto& m : ReadMountTable()) {
    if (m.mountpoint == mountpoint.string() && m.fstype == kFsType) device = m.device;
  }
  const std::string knob = fmt::format("/sys/class/bdi/{}/read_ahead_kb", device);
  std::ofstream out(knob);
  out << (bytes / 1024);
  out.flush();
  if (device.empty() || !out) {
    spdlog::warn("cannot set readahead to {} KiB ({}): larger files take more round trips",
                 bytes / 1024, device.empty() ? "mount not found in mountinfo" : knob);
  }
}

}  // namespace

// The one snapshot of every counter: .epochfs/stats serves it as JSON, the metrics
// exporter renders it as Prometheus text (daemon/metrics.h).
MountCounters Daemon::GatherCounters() const {
  const MountOptions& options = options_;
  const FuseContext& ctx = ctx_;
  SourceFs& fs = *fs_;  // its cache's Stats() is not const
  MountCounters c;
  c.version = EPOCHFS_VERSION;
  c.pid = static_cast<uint64_t>(::getpid());
  c.source = options.source.string();
  c.mountpoint = options.mountpoint.string();
  c.cache_dir = options.cache_dir.string();
  c.consistency = ConsistencyName(options.consistency);
  {
    std::lock_guard lock(isatty_mu_);
    c.isatty = isatty_state_;
  }
  c.read_only = options.read_only;
  c.parallel_lookups = fs::ParallelDiropsGranted();
  c.passthrough = fs::PassthroughGranted();
  c.fuse_uring = fs::FuseUringGranted();
  c.fuse_uring_requests = fs::FuseUringRequests();
  c.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  c.requests = &ctx.counters;
  c.cache = fs.cache().Stats();
  const MemoryPlan memory = PlanMemory(options.ram_budget);
  c.ram_budget_bytes = options.ram_budget;
  c.ram_tier_budget_bytes = c.cache.ram_budget;
  c.ram_tier_share_bytes = memory.ram_tier;
  c.ssd_write_queue_bytes = memory.write_queue;
  c.ssd_budget_bytes = options.disk_budget;
  c.fs = fs_.get();
  c.kernel_cache = kernel_cache_.get();
  c.inodes = fs.inode_count();
  if (const fs::MetadataWarmup* warmup = fs.warmup()) {
    c.metadata_warmup = warmup->walking();
    c.metadata_warmed = warmup->opened();
  }
  c.metadata_pins = fs.inodes().pins();
  c.watcher = watcher_.get();
  if (const prefetch::Prefetcher* prefetcher = fs.prefetcher()) {
    c.prefetch = prefetcher->Stats();
    c.prefetch_threads = options.prefetch_threads;
    c.prefetch_iops_limit = options.prefetch_iops;
    c.prefetch_bandwidth_limit = options.prefetch_bandwidth;
    c.prefetch_pacing = options.prefetch_pacing;
  }
  std::tie(c.daemon_rss_bytes, c.daemon_peak_rss_bytes) = ResidentSetBytes();
  return c;
}

nlohmann::json Daemon::StatsSnapshot() const { return StatsSnapshotJson(GatherCounters()); }

std::string Daemon::StatsJson() const {
  // Paths are bytes, not always UTF-8: replace what is not rather than throw.
  return StatsSnapshot().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}


void FuseSession::Unmount() {
  if (session_ != nullptr) fuse_session_unmount(session_);  // a no-op when not mounted
}

FuseSession::~FuseSession() {
  if (session_ == nullptr) return;
  fuse_session_unmount(session_);  // a no-op when not mounted
  if (signal_handlers_) fuse_remove_signal_handlers(session_);
  fuse_session_destroy(session_);
}

Status FuseSession::InstallSignalHandlers() {
  if (fuse_set_signal_handlers(session_) != 0) {
    return Status::IoError("cannot install signal handlers");
  }
  signal_handlers_ = true;
  return Status::Ok();
}

Status FuseSession::Mount(const std::filesystem::path& mountpoint, fs::InitWishes wishes) {
  if (fuse_session_mount(session_, mountpoint.c_str()) != 0) {
    return Status::IoError(fmt::format(
        "cannot mount on {} (is /dev/fuse there, and are you root or in the fuse group?)",
        mountpoint.string()));
  }
  // Before the loop reads INIT. Without the hook the mount works, one LOOKUP or READDIR
  // per directory at a time, and without passthrough.
  if (Status st = fs::InstallInitReplyHook(session_, wishes); !st.ok()) {
    spdlog::warn("lookups in one directory will wait for each other{}: {}",
                 wishes.passthrough ? ", and no passthrough" : "", st.ToString());
  }
  return Status::Ok();
}

Daemon::Daemon(const MountOptions& options)
    : options_(options), started_(std::chrono::steady_clock::now()) {}

Result<std::unique_ptr<Daemon>> Daemon::Create(const MountOptions& options) {
  std::unique_ptr<Daemon> daemon(new Daemon(options));
  EPOCHFS_RETURN_IF_ERROR(daemon->Start());
  return daemon;
}

Status Daemon::Start() {
  EPOCHFS_RETURN_IF_ERROR(OpenSource());
  EPOCHFS_RETURN_IF_ERROR(BuildCache());
  EPOCHFS_RETURN_IF_ERROR(BuildPrefetcher());
  EPOCHFS_RETURN_IF_ERROR(BuildFilesystem());
  EPOCHFS_RETURN_IF_ERROR(BuildSession());
  EPOCHFS_RETURN_IF_ERROR(StartMetrics());
  return Status::Ok();
}

Status Daemon::OpenSource() {
  MountOptions& options = options_;
  // Taken before mounting: once mounted over itself, the source is only reachable
  // through this fd.
  root_fd_ = UniqueFd(::open(options.source.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd_) return Status::FromErrno(errno, "open source " + options.source.string());
  if (::fstat(root_fd_.get(), &root_stat_) < 0) return Status::FromErrno(errno, "stat source");

  auto lock = LockCacheDir(options.cache_dir);
  if (!lock.ok()) return lock.status();
  cache_dir_lock_ = std::move(*lock);
  clear_lock_pid_.Set([fd = cache_dir_lock_.get()] {
    if (::ftruncate(fd, 0) != 0) spdlog::warn("cannot clear the pid in the cache dir's lock file");
  });
  if (!options.disk_budget_set) options.disk_budget = DefaultDiskBudget(options.cache_dir);
  if (options.disk_budget == 0) {
    spdlog::info("--disk 0: no SSD tier; the cache is the RAM tier alone, and a restart "
                 "starts cold");
  }
  RaiseFdLimit();
  return Status::Ok();
}

Status Daemon::BuildCache() {
  MountOptions& options = options_;
  memory_ = PlanMemory(options.ram_budget);
  spdlog::info("--ram {} MiB: RAM tier {} MiB, SSD write queue {} MiB, index {} MiB, file "
               "table {} MiB, plan {} MiB",
               options.ram_budget >> 20, memory_.ram_tier >> 20, memory_.write_queue >> 20,
               kIndexMemoryBytes >> 20, memory_.file_table >> 20, memory_.plan >> 20);
  // Chunk buffers come and go by the thousand per second. Above 128 KiB malloc maps
  // each one and gives it back when freed; setting the threshold also stops glibc from
  // raising it after the first large free, which would put multi-hundred-KiB buffers in
  // its arenas, where freed memory stays in the RSS that --ram promises to bound.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  cache::CacheOptions cache_options;
  cache_options.cache_dir = options.cache_dir;
  cache_options.ram_budget = memory_.ram_tier;
  cache_options.ssd_write_queue_bytes = memory_.write_queue;
  cache_options.stream_buffer_bytes = memory_.stream_buffers;
  cache_options.read_buffer_bytes = memory_.read_buffers;
  cache_options.disk_budget = options.disk_budget;
  cache_options.chunk_size = options.chunk_size;
  cache_options.use_io_uring = options.use_io_uring;
  cache_options.read_around = options.prefetch_threads > 0;
  // The prefetcher's epoch-aware policy ranks the RAM tier.
  if (options.prefetch_pacing && options.prefetch_threads > 0) {
    // Depth from --prefetch up to 8 times that (at least 32): a latency-bound source
    // takes tens of reads in flight (SourcePacer's depth).
    pacer_ = std::make_shared<prefetch::SourcePacer>(
        static_cast<double>(options.prefetch_iops), prefetch::SourcePacer::Clock::now,
        options.prefetch_threads, std::max<uint32_t>(32, 8 * options.prefetch_threads));
    cache_options.demand_observer = pacer_.get();
  }
  // Readahead's bytes move on into the kernel's page cache (kernel_cache/kernel_cache.h).
  // Under a memory limit (a container, a job's cgroup) the bytes move into the kernel,
  // charged to --ram, and are dropped as the epoch policy lets them go: the kernel's LRU
  // would otherwise thrash the limit, and two copies would not fit. With none, the
  // kernel gets a copy it keeps or reclaims as any page a read brings.
  const bool push = options.page_cache_push && options.prefetch_threads > 0;
  const bool limited = MemoryLimitOfThisProcess().has_value();
  kernel_cache_ = std::make_unique<kernel_cache::KernelCache>(push, /*one_copy=*/limited);
  if (push) {
    spdlog::info("pushing readahead into the page cache: {}",
                 limited ? "moved, charged to --ram, dropped as the RAM policy lets them go "
                           "(a memory limit applies)"
                         : "copied, the kernel's to keep (no memory limit)");
    cache_options.drop_kernel_pages = kernel_cache_->drop_callback();
  }
  ram_policy_ = prefetch::Prefetcher::NewPolicy(memory_.ram_tier);
  cache_options.ram_policy_override = ram_policy_;
  auto cache = cache::Cache::Open(cache_options);
  if (!cache.ok()) return cache.status();
  cache_ = std::move(*cache);
  flush_cache_.Set([cache = cache_.get()] {
    Status flushed = cache->Flush();
    if (!flushed.ok()) spdlog::warn("flushing the cache on the way down: {}", flushed.ToString());
  });
  return Status::Ok();
}

Status Daemon::BuildPrefetcher() {
  MountOptions& options = options_;
  UniqueFd tree_fd(::fcntl(root_fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!tree_fd) return Status::FromErrno(errno, "dup the source fd");
  source_tree_ = std::make_unique<fs::RootSourceTree>(std::move(tree_fd));
  prefetch::PrefetcherOptions prefetch_options;
  // --prefetch 0 keeps the epoch-aware policy and the plan file but reads nothing ahead.
  prefetch_options.threads = options.prefetch_threads;
  prefetch_options.max_depth = pacer_ ? pacer_->max_depth() : options.prefetch_threads;
  prefetch_options.source_reads_per_s = options.prefetch_iops;
  prefetch_options.source_bytes_per_s = options.prefetch_bandwidth;
  prefetch_options.pacer = pacer_;
  // With the pacer, readahead also stops altogether while it does not make the readers
  // faster (prefetcher/readahead_gate.h).
  if (pacer_) prefetch_options.gate = std::make_shared<prefetch::ReadaheadGate>();
  if (options.prefetch_threads == 0) spdlog::info("readahead off (--prefetch 0)");
  prefetch_options.record_path = options.cache_dir / "epochs";
  prefetch_options.ram_budget = memory_.ram_tier;
  prefetch_options.file_table_bytes = memory_.file_table;
  prefetch_options.chunk_size = options.chunk_size;
  prefetch_options.push_to_kernel = kernel_cache_->pushing();
  prefetch_options.ssd_budget = options.disk_budget;
  prefetcher_ = prefetch::Prefetcher::Create(std::move(prefetch_options), *source_tree_,
                                             cache_.get(), ram_policy_);

  memory_trimmer_ = std::make_unique<MemoryTrimmer>(std::chrono::seconds(2),
                                                     MemoryTrimmer::kDaemonSlackBytes);
  // The shares above are ceilings: the tier gets what the rest leaves unused.
  ram_balancer_ = std::make_unique<RamBalancer>(*cache_, options.ram_budget, memory_.ram_tier,
                                                std::chrono::milliseconds(250));
  return Status::Ok();
}

Status Daemon::BuildFilesystem() {
  MountOptions& options = options_;
  SourceFsOptions fs_options;
  fs_options.read_only = options.read_only;
  fs_options.passthrough = options.passthrough;
  fs_options.hidden_root_name = ControlDir::kDirName;
  auto fs = SourceFs::Create(std::move(root_fd_), fs_options, *cache_, prefetcher_.get());
  if (!fs.ok()) return fs.status();
  fs_ = std::move(*fs);
  // What the kernel does with the files goes to readahead and pushing through one
  // observer (kernel_cache/kernel_cache.h).
  fs_->SetObserver(&kernel_cache_->Observe(*fs_, prefetcher_.get()));
  plan_file_ = std::make_unique<PlanFile>(fs_.get(), prefetcher_.get(),
                                          prefetch::PlanParserOptions{.max_bytes = memory_.plan},
                                          PlanResolveBudget());
  WarmRecordedMetadata(*prefetcher_, options.ram_budget, *fs_);

  control_ = std::make_unique<ControlDir>(
      std::vector<ControlDir::File>{
          ControlDir::File{"stats", 3,
                           [this] {
                             return StatsJson();
                           }},
          // the prefetcher's plan file
          ControlDir::File{"plan", 4, [this] { return plan_file_->Summary(); },
                           [this](uint64_t offset, std::string_view data, uid_t uid,
                                  gid_t gid, pid_t pid) {
                             return plan_file_->Write(offset, data, uid, gid, pid);
                           }}},
      root_stat_.st_uid, root_stat_.st_gid);
  return Status::Ok();
}

Status Daemon::BuildSession() {
  MountOptions& options = options_;
  // libfuse splits -o at commas; a comma or backslash in the path is escaped.
  std::string fsname;
  for (char c : options.source.string()) {
    if (c == ',' || c == '\\') fsname.push_back('\\');
    fsname.push_back(c);
  }
  std::string mount_opts =
      fmt::format("fsname=epochfs:{},subtype=epochfs,default_permissions,noatime", fsname);
  if (options.allow_other) mount_opts += ",allow_other";
  if (options.read_only) mount_opts += ",ro";
  std::vector<std::string> argv_strings = {"epochfs", "-o", mount_opts};
  if (spdlog::get_level() <= spdlog::level::trace) argv_strings.push_back("-d");
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  const auto& ops = fs::FuseOperations();
  session_.Reset(fuse_session_new(&args, &ops, sizeof(ops), &ctx_));
  fuse_opt_free_args(&args);
  if (!session_.get()) return Status::InvalidArgument("libfuse refused the mount options");

  std::string why;
  options.consistency = ResolveConsistency(options.consistency, options.source, &why);
  invalidator_ = std::make_unique<KernelInvalidator>(session_.get(), &fs_->inodes());
  // Writers through the mount are held off a file while its pages are dropped or
  // stored: by the node's open lock in "open" mode, by a read lease taken through the
  // mount in "notify" mode (fs/write_fence.h).
  auto make_fence = [&] {
    write_fence_ = std::make_unique<fs::WriteFence>(
        options.consistency == Consistency::kOpen ? std::filesystem::path() : options.mountpoint);
  };
  make_fence();
  if (options.consistency == Consistency::kNotify) {
    auto started_watcher =
        ChangeWatcher::Start(fs_->inodes(), *invalidator_, ChangeWatcher::Scope::kEverything,
                             write_fence_.get());
    if (started_watcher.ok()) {
      watcher_ = std::move(*started_watcher);
    } else {
      spdlog::warn("cannot watch the source for changes ({}); using --consistency=open",
                   started_watcher.status().ToString());
      options.consistency = Consistency::kOpen;
      why = "inotify unavailable";
      make_fence();
    }
  }
  if (options.consistency == Consistency::kOpen) {
    // Only names that go: the kernel forgets files deleted underneath, and their disk
    // space with them (fs/change_watcher.h).
    auto names_watcher =
        ChangeWatcher::Start(fs_->inodes(), *invalidator_, ChangeWatcher::Scope::kNamesGone);
    if (names_watcher.ok()) {
      watcher_ = std::move(*names_watcher);
    } else {
      spdlog::info("no watch for names deleted underneath ({}): their nodes stay until the "
                   "kernel lets go of their entries",
                   names_watcher.status().ToString());
    }
  }
  fs::FilesystemOptions core_options;
  core_options.timeouts = options.timeouts;
  core_options.kernel_asks_to_open = options.consistency == Consistency::kOpen;
  core_ = std::make_unique<fs::Filesystem>(*fs_, *control_, core_options);
  ctx_.fs = core_.get();
  ctx_.readdirplus_always = kernel_cache_->pushing();
  // A few nodes' waits at once; more queue in order.
  waiting_room_ = std::make_unique<fs::WaitingRoom>(4);
  ctx_.waiting_room = waiting_room_.get();
  // The watcher and the invalidator need the session, which needs the core: the one
  // link made after construction (Filesystem::AttachKernel).
  core_->AttachKernel(watcher_.get(), invalidator_.get());
  detach_kernel_.Set([this] { core_->AttachKernel(nullptr, nullptr); });
  stop_kernel_cache_.Set([this] { kernel_cache_->Stop(); });

  spdlog::info("consistency mode {} ({})", ConsistencyName(options.consistency), why);
  return Status::Ok();
}

Status Daemon::StartMetrics() {
  MountOptions& options = options_;
  // ---- Observability: the metrics endpoint and textfile (daemon/metrics_server.h). ----
  // Bound before mounting, so a taken port refuses the mount instead of a half start.
  if (!options.metrics_listen.empty() || !options.metrics_textfile.empty()) {
    MetricsExporter::Options metrics_options;
    metrics_options.listen = options.metrics_listen;
    metrics_options.allow_remote = options.metrics_allow_remote;
    metrics_options.textfile = options.metrics_textfile;
    auto started_exporter = MetricsExporter::Start(metrics_options, [this] {
      return PrometheusText(StatsSnapshot());
    });
    if (!started_exporter.ok()) return started_exporter.status();
    exporter_ = std::move(*started_exporter);
  }
  return Status::Ok();
}

void Daemon::StartPushing() {
  kernel_cache::KernelCache::Mount mount;
  mount.mountpoint = options_.mountpoint;
  mount.open_mode = options_.consistency == Consistency::kOpen;
  mount.session = session_.get();
  mount.fs = fs_.get();
  mount.cache = cache_.get();
  mount.invalidator = invalidator_.get();
  mount.fence = write_fence_.get();
  mount.prefetcher = prefetcher_.get();
  mount.ram_budget = options_.ram_budget;
  mount.read_only = options_.read_only;
  kernel_cache_->Start(mount);
}

void Daemon::StartIsattyGuard() {
  const auto mount = VisibleMount(options_.mountpoint);
  unsigned major = 0, minor = 0;
  std::string state;
  if (!options_.isatty_guard) {
    state = "daemon (--isatty-guard off; `epochfs run` avoids it for Python)";
  } else if (!mount || mount->fstype != kFsType ||
             std::sscanf(mount->device.c_str(), "%u:%u", &major, &minor) != 2) {
    state = "daemon (the mount's device number is unknown)";
  } else if (auto guard = IsattyGuard::Attach(major, minor); guard.ok()) {
    isatty_guard_ = std::move(*guard);
    state = "kernel (BPF LSM)";
  } else {
    state = "daemon (" + guard.status().ToString() + "; `epochfs run` avoids it for Python)";
  }
  spdlog::info("isatty() of the mount's files answered by the {}", state);
  std::lock_guard lock(isatty_mu_);
  isatty_state_ = std::move(state);
}

void Daemon::StartStatsSocket() {
  const auto mount = VisibleMount(options_.mountpoint);
  if (!mount || mount->fstype != kFsType) return;
  auto socket = StatsSocket::Start(StatsSocketPath(mount->device), options_.allow_other, [this] {
    return StatsJson();
  });
  if (socket.ok()) {
    stats_socket_ = std::move(*socket);
  } else {
    spdlog::info("no stats socket ({}): `epochfs status` reads {}/.epochfs/stats instead",
                 socket.status().ToString(), options_.mountpoint.string());
  }
}

int Daemon::Run(const std::function<void(const Status&)>& ready) {
  const MountOptions& options = options_;
  auto fail = [&](const Status& st) {
    spdlog::error("mount failed: {}", st.ToString());
    ready(st);
    return 2;
  };
  if (Status st = session_.InstallSignalHandlers(); !st.ok()) return fail(st);
  // Passthrough needs OPENs, which "notify" mode answers once with ENOSYS.
  const bool passthrough = options.passthrough && options.consistency == Consistency::kOpen;
  if (options.passthrough && !passthrough) {
    spdlog::warn("--passthrough needs --consistency open: in notify mode the kernel opens "
                 "files without the daemon");
  }
  // Over io_uring the kernel hands a request to a queue of the CPU that sent it, and only
  // that queue's threads answer it: the request threads are split among the CPUs, at
  // least two per queue, so that one waiting in the kernel (a drop waiting for a READ of
  // a page it drops, sent from the same CPU) leaves another to answer (fs/fuse_uring.h).
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  const fs::InitWishes wishes{
      .passthrough = passthrough,
      .uring_threads_per_queue =
          options.fuse_uring ? std::max(2u, options.max_threads / cpus) : 0u,
      .mountpoint = options.mountpoint.string()};
  if (Status st = session_.Mount(options.mountpoint, wishes); !st.ok()) {
    return fail(st);
  }
  mounted_ = true;
  end_connection_.Set([this] { session_.Unmount(); });
  spdlog::info("mounted {} on {} (cache {}, ram {} MiB, disk {} MiB)", options.source.string(),
               options.mountpoint.string(), options.cache_dir.string(),
               options.ram_budget >> 20, options.disk_budget >> 20);
  // The mount is ready once it answers. A stat of the mountpoint from a thread of our
  // own returns once the loop below has answered INIT (and this stat): only then is the
  // kernel's readahead raised (the INIT reply resets it), and only then is the mount
  // reported ready, to the parent that daemonized us and to systemd (READY=1). So
  // whoever is told "ready" finds the mount answering and its readahead set.
  std::atomic<bool> never_answered{false};
  std::thread readiness([&] {
    struct ::stat st {};
    if (::stat(options.mountpoint.c_str(), &st) != 0) {
      const Status why = Status::FromErrno(errno, fmt::format("the mount on {} does not answer",
                                                              options.mountpoint.string()));
      never_answered = true;
      spdlog::error("mount failed: {}", why.ToString());
      ready(why);
      // Ends the loop: the kernel closes the connection and reads of /dev/fuse fail.
      fuse_session_exit(session_.get());
      fuse_session_unmount(session_.get());
      return;
    }
    if (options.readahead > 0) SetReadahead(options.mountpoint, options.readahead);
    StartStatsSocket();
    StartIsattyGuard();
    StartPushing();
    ready(Status::Ok());
    // ---- systemd: READY=1 only now that the mount answers (daemon/service_notify.h). ----
    NotifyReady(fmt::format("Serving {} on {}", options.source.string(),
                            options.mountpoint.string()));
    status_reporter_ = std::make_unique<StatusReporter>(
        [this] {
          return ServiceStatusLine(
              StatsSnapshot());
        },
        std::chrono::seconds(10));
  });

  // The kernel has already applied the caller's umask to every mode a request carries;
  // the daemon's own would be applied on top (a file created 0666 coming out 0644).
  // Every file the daemon itself creates from here on (packs, RocksDB's tables, the
  // epoch record, the metrics textfile) passes an explicit mode, and its directories
  // were made above.
  ::umask(0);
  struct fuse_loop_config* loop_config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop_config, options.max_threads);
  fuse_loop_cfg_set_idle_threads(loop_config, std::max(2u, options.max_threads / 2));
  const int loop_rc = fuse_session_loop_mt(session_.get(), loop_config);
  fuse_loop_cfg_destroy(loop_config);
  fs::StopFuseUring();
  readiness.join();
  isatty_guard_.reset();
  // ---- systemd: going down (the flush on the way may take a while). ----
  notify_stopping_.Set([] { NotifyStopping(); });
  if (never_answered) return 2;
  return loop_rc == 0 ? 0 : 1;
}

}  // namespace epochfs::daemon
