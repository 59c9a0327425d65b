// SourceFs: the source's half of the filesystem core (fs/filesystem.h sends each
// request here or to the control directory). It answers in terms of the source
// directory and the cache, and knows nothing of FUSE (fs/fuse_ops.cc translates).
//
// Transparency: attributes, names, link counts, symlinks and xattrs are the source's
// own, taken with *at() calls beneath the source root's O_PATH fd and never following
// a symlink, so nothing can escape the source. Writes go straight to the source and
// drop what the cache holds of the file.
//
// Freshness: a non-directory is re-resolved by (parent, name) on every use and checked
// against its (dev, ino); if the name now points elsewhere (renamed over, deleted and
// recreated) the request fails with ESTALE, which makes the kernel look the name up
// again and so find the new file. Open takes the source file's identity with fstat()
// on the fd it will read from; the cache serves only entries with that identity, and
// the kernel keeps its page cache only when the identity is the one it was filled with.
//
// Thread-safety: all methods are thread-safe. A FileHandle is used by one request at
// a time for writes (the kernel serialises them per file) but reads may run in
// parallel; its identity is guarded by its own mutex.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/counters.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "cache/cache.h"
#include "fs/change_watcher.h"
#include "fs/file_handle.h"
#include "fs/inode_table.h"
#include "fs/metadata_warmup.h"
#include "fs/passthrough.h"
#include "fs/source_observer.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {

// Who asked: files a root daemon creates are handed to the caller.
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;  // as the kernel reports it (0: unknown); tells plan publishers apart
};

struct Entry {
  uint64_t nodeid = 0;
  struct ::stat attr {};
};

class DirHandle {
 public:
  DirHandle(std::shared_ptr<Inode> inode, DIR* dir) : inode_(std::move(inode)), dir_(dir) {}
  ~DirHandle() { ::closedir(dir_); }
  DirHandle(const DirHandle&) = delete;
  DirHandle& operator=(const DirHandle&) = delete;
  const std::shared_ptr<Inode>& inode() const { return inode_; }

 private:
  friend class SourceFs;
  std::shared_ptr<Inode> inode_;
  Mutex mutex_;  // readdir on one handle is serialised
  DIR* dir_ GUARDED_BY(mutex_);  // owned
  off_t position_ = 0;
};

struct OpenResult {
  std::unique_ptr<FileHandle> handle;
  // The kernel may keep its cached pages: the source file is unchanged since they were read.
  bool keep_cache = false;
  // Reads of this open bypass the kernel's pages and its cached size (see Open).
  bool direct_io = false;
  // The kernel serves this open from the source file itself (fs/passthrough.h).
  std::optional<uint32_t> backing_id;
};

struct SourceFsOptions {
  bool read_only = false;
  // Read-only opens of files neither the kernel's pages nor the cache hold are served by
  // the kernel from the source file itself, and cached afterwards in idle CPU time
  // (fs/passthrough.h). Needs a kernel that granted passthrough at INIT.
  bool passthrough = false;
  // Names hidden from the root's listing (the control directory).
  std::string hidden_root_name = ".epochfs";
};

class SourceFs {
 public:
  // `root_fd` is an O_PATH fd of the source directory, taken before mounting. Reads go
  // through `cache` and are reported first to `prefetcher` (may be null); both must
  // outlive the SourceFs.
  static Result<std::unique_ptr<SourceFs>> Create(UniqueFd root_fd, SourceFsOptions options,
                                                  cache::Cache& cache,
                                                  prefetch::Prefetcher* prefetcher);

  Result<Entry> Lookup(uint64_t parent, const std::string& name);
  void Forget(uint64_t nodeid, uint64_t nlookup);
  // `fh` is the open file the request came through, if any. "open" mode takes the node's
  // open_order: with OrderWait::kNoWait, kBusy if another thread holds it.
  Result<struct ::stat> GetAttr(uint64_t nodeid, FileHandle* fh,
                                OrderWait wait = OrderWait::kWait);

  // `to_set` uses the FUSE_SET_ATTR_* bit values, decoded by the caller into these flags.
  struct AttrChange {
    bool mode = false, uid = false, gid = false, size = false, atime = false, mtime = false;
    bool atime_now = false, mtime_now = false;
    // Any bit not named above (ctime, kill suid/sgid): nothing here acts on them, but a
    // request carrying one is more than a truncate.
    bool other = false;
  };
  Result<struct ::stat> SetAttr(uint64_t nodeid, const struct ::stat& attr, AttrChange what,
                                FileHandle* fh, Caller caller);

  Result<std::string> ReadLink(uint64_t nodeid);
  Result<Entry> MakeNode(uint64_t parent, const std::string& name, mode_t mode, dev_t rdev,
                         Caller caller);
  Result<Entry> MakeDir(uint64_t parent, const std::string& name, mode_t mode, Caller caller);
  Result<Entry> SymLink(const std::string& target, uint64_t parent, const std::string& name,
                        Caller caller);
  Result<Entry> Link(uint64_t nodeid, uint64_t new_parent, const std::string& new_name);
  Status Unlink(uint64_t parent, const std::string& name);
  Status RemoveDir(uint64_t parent, const std::string& name);
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned int flags);

  // With ReportOpensAsAccesses, a read-only open is reported to the prefetcher as the
  // file's access (after the node's open_order lock is let go). With OrderWait::kNoWait,
  // kBusy if another thread holds that lock (nothing was decided; open again).
  Result<OpenResult> Open(uint64_t nodeid, int flags, OrderWait wait = OrderWait::kWait);
  Result<std::pair<Entry, OpenResult>> Create(uint64_t parent, const std::string& name,
                                              mode_t mode, int flags, Caller caller);
  Result<cache::ReadBuffer> Read(FileHandle& fh, uint64_t offset, size_t size);
  // `append`: the writer's file is O_APPEND (the WRITE's flags); `offset` is then where
  // the kernel believes the file ends, and the source appends where it really does.
  Result<size_t> Write(FileHandle& fh, const char* data, size_t size, uint64_t offset,
                       bool append = false);
  // Closes `fh`; the last handle for writing of a file drops the kernel's pages an open
  // could not drop while it was open for writing (OpenChecked). With OrderWait::kNoWait
  // that drop may be left owed (kBusy: the node's open_order is held): DropOwedPages
  // then makes it where waiting is allowed.
  Status Release(std::unique_ptr<FileHandle> fh, OrderWait wait = OrderWait::kWait);
  Status DropOwedPages(uint64_t nodeid);
  Status Fsync(FileHandle& fh, bool datasync);

  // The same for requests that come without a file handle: in the "notify" consistency
  // mode the kernel opens files without asking, and each request reopens the node's own
  // source inode through its O_PATH fd (a cheap syscall next to the IO of a miss). So a
  // file unlinked or renamed over while a reader has it open is still that file.
  Result<struct ::stat> GetAttrByNode(uint64_t nodeid, OrderWait wait = OrderWait::kWait);
  Result<cache::ReadBuffer> ReadNode(uint64_t nodeid, uint64_t offset, size_t size);
  Result<size_t> WriteNode(uint64_t nodeid, const char* data, size_t size, uint64_t offset,
                           bool append = false);
  Status FsyncNode(uint64_t nodeid, bool datasync);

  // The one link made after construction, because it is a cycle: the watcher and the
  // kernel invalidator notify through the FUSE session, which is made with this
  // SourceFs. Attach them before mounting; detach (nullptr, nullptr) once the session
  // loop has ended and before destroying them.
  // `watcher` ("notify" mode): from now on every directory node is watched for changes
  // made underneath the mount. `kernel` ("open" mode): an open that finds the file
  // changed since the kernel cached its pages drops them, and its attributes, through
  // it before replying (nullptr: the reply says not to keep the pages instead, and the
  // kernel keeps the old attributes until their timeout).
  void AttachKernel(ChangeWatcher* watcher, Invalidator* kernel);

  const InodeTable& inodes() const { return inodes_; }
  InodeTable& inodes() { return inodes_; }

  // After a restart: brings the source's metadata of `paths` (relative to the root, the
  // files the last epoch read) into memory ahead of the first epoch's lookups, and holds
  // it there until they come (fs/metadata_warmup.h). Call once.
  void WarmMetadata(std::vector<std::string> paths, const MetadataWarmup::Options& options);
  const MetadataWarmup* warmup() const { return warmup_.get(); }  // null: none started

  Result<std::unique_ptr<DirHandle>> OpenDir(uint64_t nodeid);
  // Calls `emit(name, entry, next_offset)` for each entry from `offset` on until it
  // returns false (the reply buffer is full). With `plus`, each entry is looked up (and
  // so counts a lookup reference); `emit` must return false without keeping the entry
  // when it does not fit, and the lookup is then undone here. The regular files a
  // `plus` listing gave the kernel are reported to the prefetcher (OnListed).
  using DirEmitter =
      std::function<bool(const std::string& name, const Entry& entry, off_t next_offset)>;
  Status ReadDir(DirHandle& dh, off_t offset, bool plus, const DirEmitter& emit);
  Status FsyncDir(DirHandle& dh, bool datasync);

  Result<struct ::statvfs> StatFs();

  Result<std::string> GetXattr(uint64_t nodeid, const std::string& name, size_t size);
  Result<std::string> ListXattr(uint64_t nodeid, size_t size);
  Status SetXattr(uint64_t nodeid, const std::string& name, const std::string& value, int flags);
  Status RemoveXattr(uint64_t nodeid, const std::string& name);

  cache::Cache& cache() { return *cache_; }
  const HandleFds& handle_fds() const { return handle_fds_; }
  // Names the counters of opens and source fds (base/counters.h); `fs` may be null:
  // they are then 0.
  static void VisitCounters(const SourceFs* fs, const CounterVisitor& visit);
  size_t inode_count() const { return inodes_.size(); }

  // ---- the plan file's view of the source (source_fs_paths.cc) ----
  // (The prefetcher's view is fs/root_source_tree.h.)
  const prefetch::Prefetcher* prefetcher() const { return prefetcher_; }
  // A plan entry: `path` must name an existing regular file beneath the root that
  // `caller` may read (mode bits of the file and search bits of its folders, checked
  // against the caller's uid and primary gid; supplementary groups are not known here,
  // so a file readable only through one is refused). kInvalidArgument, kNotFound or
  // kPermission otherwise.
  // `folders` (optional) remembers the folders already checked for this caller, for the
  // next entries of the same plan: a plan names each of a few folders thousands of times.
  using CheckedFolders = std::unordered_map<std::string, Status>;
  Result<prefetch::PlannedFile> ResolvePlanEntry(const std::string& path, Caller caller,
                                                 CheckedFolders* folders = nullptr) const;
  // Lists `folder` of the source (up to `max_entries` entries), if `caller` may search
  // it and every folder above it; nothing of the listing is returned. What for: the
  // kernel then holds every name of the folder and its attributes, so that resolving
  // many plan entries in it costs no round trip each on a network source (see
  // PlanFile::PreResolve).
  void ListPlanFolder(const std::string& folder, Caller caller, uint64_t max_entries) const;
  // The node's path relative to the source root, as last looked up.
  std::string RelativePath(const Inode& inode) const;

  // From now on what the kernel does with the files (directories looked up and
  // forgotten, read-only opens, READs, whole files read) is told to `observer`
  // (fs/source_observer.h); null: to nobody. Set before mounting, cleared after the
  // session loop ended.
  void SetObserver(SourceObserver* observer) { observer_.store(observer); }
  // A plan that begins a new epoch is about to take effect (PlanFile): the observer
  // hands over the opens made before it first (SourceObserver::BeforeNewEpochPlan).
  void BeforeNewEpochPlan() const {
    if (SourceObserver* observer = observer_.load()) observer->BeforeNewEpochPlan();
  }

 private:
  SourceFs(UniqueFd root_fd, const struct ::stat& root_stat, SourceFsOptions options,
           cache::Cache& cache, prefetch::Prefetcher* prefetcher);
  // Open's work, under the node's open_order lock.
  Result<OpenResult> OpenChecked(uint64_t nodeid, int flags, OrderWait wait);
  // What a call made with OrderWait::kNoWait returns when the node's open_order is held.
  static Status OrderHeld(const Inode& inode);
  // A reply's attributes of `inode` by `stat`, recorded as the kernel's and checked
  // against its pages; in "open" mode under the node's open_order.
  Result<struct ::stat> StatForKernel(Inode& inode, OrderWait wait,
                                      const std::function<Result<struct ::stat>()>& stat);
  Result<struct ::stat> StatAndCheck(Inode& inode,
                                     const std::function<Result<struct ::stat>()>& stat,
                                     ChangeWatcher* watcher);
  Status DropOwedPages(Inode& node, OrderWait wait);

  Result<std::shared_ptr<Inode>> FindInode(uint64_t nodeid) const;
  Result<std::shared_ptr<Inode>> FindDir(uint64_t nodeid) const;
  // Where a non-directory node lives now, verified to still be the same object.
  Result<Location> Resolve(const Inode& inode, struct ::stat* st_out = nullptr) const;
  // `listed_ino`: the inode number a listing of `parent` gave the name, if it did.
  Result<Entry> LookupIn(const std::shared_ptr<Inode>& parent, const std::string& name,
                         std::optional<uint64_t> listed_ino = std::nullopt);
  // LookupIn of a regular file the table knows already; nullopt where it is not one.
  // `listed`: the node of the inode number the listing gave `name` (not null).
  std::optional<Entry> LookupKnownFile(const std::shared_ptr<Inode>& parent,
                                       const std::string& name, std::shared_ptr<Inode> listed);
  // Whether the file `st`, just found as `name` in `parent`, has a node known by
  // another name that no longer names it (it was renamed in the source). `known`: that
  // file's node where the caller has it already (else it is looked up).
  bool KnownByAnotherDeadName(const Inode& parent, const std::string& name,
                              const struct ::stat& st, const Inode* known = nullptr) const;
  Status RefuseIfReadOnly(const char* what) const;
  // A read-only open: pushes the file's bytes, if the RAM tier holds them and the kernel
  // does not, before OpenChecked decides (see there).
  void PushBeforeOpen(uint64_t nodeid);
  // ReadDir's work; the regular files emitted with `plus` are added to `listed` (null:
  // not collected).
  Status ReadDirEntries(DirHandle& dh, off_t offset, bool plus, const DirEmitter& emit,
                        std::vector<prefetch::Prefetcher::Opened>* listed);
  // A demand READ of `inode` reached the daemon: tells the access watcher, and the
  // prefetcher unless the watcher sees the file's open. Before the cache serves it.
  void NoteDemandRead(const Inode& inode, uint64_t offset);
  // Opens a non-directory node's source file by its current name with `flags`, checked
  // to be the node's (kStale otherwise).
  Result<std::pair<UniqueFd, cache::SourceIdentity>> OpenNode(const Inode& inode, int flags);
  // The same check without opening: `inode`'s identity, stat'ed by its current name
  // with the source client's caches bypassed (kStale if the name is gone or names
  // another file); the fd is empty.
  Result<std::pair<UniqueFd, cache::SourceIdentity>> CheckNode(const Inode& inode);
  // Writes through `fd` (of `node`), then drops the cache's copy and records the
  // identity the write left; `fh` (if any) takes that identity too.
  // `fd_appends`: `fd` was opened O_APPEND; `append`: the write is an append (Write).
  Result<size_t> WriteFd(int fd, bool fd_appends, Inode& node, FileHandle* fh, const char* data,
                         size_t size, uint64_t offset, bool append);
  std::unique_ptr<FileHandle> NewHandle(std::shared_ptr<Inode> inode, UniqueFd fd,
                                        const cache::SourceIdentity& id, int flags);
  // Whether an open of `inode` with `flags` may be the first passthrough one: read-only,
  // no other handle open, no published plan left to readahead, and neither the kernel's
  // pages nor the SSD tier hold the file (checked by node, before any stat; CacheHolds
  // checks the identity once known).
  bool MayPassthrough(const Inode& inode, int flags) const;
  // `inode`'s identity, stat'ed by its current name (kStale if the name is gone or names
  // another file): past the source client's caches (CheckNode), or as they have it.
  Result<cache::SourceIdentity> NameStillNames(const Inode& inode, bool past_client_caches);
  // Whether the cache's tiers hold `id`'s file (its first chunk on the SSD tier, unchecked,
  // or all of it in RAM): an open of it is served by the daemon, not by passthrough.
  bool CacheHolds(const cache::SourceIdentity& id) const;
  // A passthrough open of `inode` (checked as `id`) that the kernel serves from the
  // source file, or the kernel's refusal. Under the node's open_order.
  Result<OpenResult> OpenPassthrough(const std::shared_ptr<Inode>& inode,
                                     const cache::SourceIdentity& id, int flags);
  // A passthrough handle of `node` was released: its backing id goes with the last one,
  // and the file is then offered to the cache (or dropped from it, when written).
  void EndPassthrough(const std::shared_ptr<Inode>& node, bool wrote);
  // Records `id` (observed as `seen`) as what the kernel now holds of `inode`, and drops
  // the kernel's pages when it held another state of the file (a change the mount did
  // not make). kAttributes: the caller's reply gives the kernel the file's attributes
  // (GETATTR, LOOKUP, READDIRPLUS), which must not meet the old file's pages: a larger
  // size shows their old last page, zero-filled past the old end, as the file's bytes.
  // "open" mode drops them before returning when the file grew (a GETATTR only: LOOKUPs
  // are checked by the open); "notify" mode has the watcher drop them, and until then
  // makes the kernel refuse such a reply's larger size. kData: a READ.
  enum class Reply { kAttributes, kData };
  // `watcher`: the one attached when the request began (null: "open" mode, as one not
  // following contents); "open" mode's kAttributes needs the node's open_order held.
  void CheckKernelCache(Inode& inode, const cache::SourceIdentity& id,
                        InodeTable::Observation seen, Reply reply, ChangeWatcher* watcher);
  // Drops the kernel's attributes and pages of `node` through `kernel`, recording the
  // attributes' drop first (InodeTable::DropKernelAttrs).
  void DropAttrsAndPages(Inode& node, Invalidator& kernel);
  // For a read-only open that cannot trust the kernel's size of `node` (OpenChecked, under
  // its open_order, no writer open): sets it to `id`'s by storing the file's last byte,
  // after dropping the pages first if they may be of an older file; or, failing that,
  // has `result` read with direct I/O. `fd` is the open's source fd, if any.
  void ShowSizeToKernel(Inode& node, const UniqueFd& fd, const cache::SourceIdentity& id,
                        InodeTable::Observation seen, bool pages_may_be_older,
                        Invalidator& kernel, OpenResult& result);
  // The byte at `size` - 1 of `node`'s file, read through `fd` or a reopen of the node.
  Result<char> ReadLastByte(const Inode& node, const UniqueFd& fd, uint64_t size);
  // "open" mode's drop before a reply with attributes (CheckKernelCache).
  void DropChangedBeforeReply(Inode& inode, const cache::SourceIdentity& id,
                              InodeTable::Observation seen) REQUIRES(inode.open_order);
  // The source object's identity now, through its O_PATH fd or its name (nullopt: gone).
  std::optional<cache::SourceIdentity> IdentityNow(const Inode& inode) const;
  // Opens the node's own inode (through its O_PATH fd), whatever its name means now.
  Result<std::pair<UniqueFd, cache::SourceIdentity>> ReopenNode(const Inode& inode, int flags);
  // The attributes a GETATTR reply gives: of the handle's inode, or the node's.
  Result<struct ::stat> StatForReply(const Inode& inode, FileHandle* fh);
  // Reads through the cache, as of `file.id` (updated if the file grew meanwhile, as
  // `stat_fd`, an fd of the same inode, shows).
  Result<cache::ReadBuffer> ReadToCurrentEnd(cache::SourceFile& file, int stat_fd, uint64_t offset,
                                             size_t size);
  // Hands an object the daemon just created, with `mode` asked for, to the caller that
  // asked for it: its uid, and its gid unless the directory is setgid; setuid and
  // setgid bits that the change of owner cleared are put back.
  Status GiveToCaller(int dir_fd, const std::string& name, mode_t mode, Caller caller) const;
  // A path that reaches the object through /proc, for the calls that have no *at() form.
  Result<std::string> ProcPath(const Inode& inode) const;

  SourceFsOptions options_;
  InodeTable inodes_;
  cache::Cache* const cache_;
  const bool running_as_root_;
  std::atomic<ChangeWatcher*> watcher_{nullptr};  // AttachKernel
  std::atomic<SourceObserver*> observer_{nullptr};  // SetObserver
  std::atomic<Invalidator*> kernel_{nullptr};     // AttachKernel
  HandleFds handle_fds_;  // declared after inodes_: handles die before their nodes
  std::atomic<uint64_t> open_relookups_{0};
  std::atomic<uint64_t> open_checks_{0};
  std::atomic<uint64_t> open_direct_fallbacks_{0};
  std::atomic<uint64_t> open_sizes_shown_{0};
  std::atomic<uint64_t> open_drops_deferred_{0};
  std::atomic<uint64_t> attrs_after_change_{0};  // CheckKernelCache with Reply::kAttributes
  prefetch::Prefetcher* const prefetcher_;  // plans are resolved for it; may be null
  BackingFiles backing_files_;
  std::unique_ptr<IdleFiller> filler_;  // with options_.passthrough; stops before the rest
  std::unique_ptr<MetadataWarmup> warmup_;  // last: stops before the table it pins into goes
};

}  // namespace epochfs::fs
