#include "fs/source_fs.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "fmt/format.h"
#include "fs/init_reply.h"
#include "fs/open_beneath.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {
namespace {

Status Errno(const std::string& what) { return Status::FromErrno(errno, what); }

Status ErrnoValue(int err, const std::string& what) { return Status::FromErrno(err, what); }

// Opens `name`, one path component (what a FUSE request names), beneath `dir_fd`.
Result<UniqueFd> OpenChild(int dir_fd, const std::string& name, int flags, mode_t mode = 0) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return Status::InvalidArgument(fmt::format("'{}': not a single path component", name));
  }
  return OpenBeneath(dir_fd, name, flags, mode);
}

// The flags of an open the kernel forwards, reduced to what the source fd should carry.
// The kernel has resolved the name and created nothing (no O_CREAT, never follow);
// its internal bits (__FMODE_EXEC for an exec) make openat2 fail with EINVAL; and
// O_DIRECT would break the cache's unaligned reads of the source (the page cache of
// the mount is the kernel's business, not the source fd's).
int SourceOpenFlags(int kernel_flags) {
  // O_APPEND kept (a file marked append-only refuses an open for writing without it);
  // each WRITE says for itself whether it appends (SourceFs::WriteFd).
  return kernel_flags & (O_ACCMODE | O_APPEND | O_TRUNC | O_DSYNC | O_SYNC | O_LARGEFILE |
                         O_NOATIME);
}

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020  // Linux 6.9; older headers lack it
#endif

// Writes `size` bytes of `data` to `fd`: appended at the end the file has (`append`,
// the offset ignored), or at `offset` even where `fd` is O_APPEND. Returns the bytes
// written and, for an append, where they end (-1: unknown).
Result<std::pair<size_t, int64_t>> WriteSource(int fd, bool fd_appends, const char* data,
                                               size_t size, uint64_t offset, bool append) {
  // RWF_APPEND and RWF_NOAPPEND are per write; a kernel without them says EOPNOTSUPP
  // (EINVAL before 4.16), and the write goes as the fd's flag says.
  int per_write = append ? RWF_APPEND : (fd_appends ? RWF_NOAPPEND : 0);
  size_t done = 0;
  while (done < size) {
    struct iovec iov {const_cast<char*>(data + done), size - done};
    // -1 with an append: at the fd's position, which the append leaves at its end.
    const off_t at = append ? -1 : static_cast<off_t>(offset + done);
    ssize_t n = per_write != 0
                    ? ::pwritev2(fd, &iov, 1, at, per_write)
                    : ::pwritev(fd, &iov, 1, static_cast<off_t>(offset + done));
    if (n < 0 && per_write != 0 && (errno == EOPNOTSUPP || errno == EINVAL) && done == 0) {
      per_write = 0;
      append = append && fd_appends;  // an O_APPEND fd still appends a pwrite
      continue;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (done > 0) break;
      return Errno("write");
    }
    done += static_cast<size_t>(n);
  }
  int64_t end = -1;
  if (append && per_write != 0 && done > 0) end = ::lseek(fd, 0, SEEK_CUR);
  return std::make_pair(done, end);
}

Result<struct ::stat> StatAt(int dir_fd, const std::string& name) {
  struct ::stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
    return Errno(fmt::format("stat '{}'", name));
  }
  return st;
}

// The identity of `name` as the source has it now, not as its client cached it:
// AT_STATX_FORCE_SYNC makes an NFS client send a GETATTR (what its open() does for
// close-to-open) and a FUSE client (GlusterFS) ask its daemon.
Result<struct ::stat> StatFreshAt(int dir_fd, const std::string& name) {
  return cache::StatForIdentity(dir_fd, name.c_str(), AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC);
}

Result<struct ::stat> StatFd(int fd) {
  struct ::stat st {};
  if (::fstat(fd, &st) < 0) return Errno("fstat");
  return st;
}

uint64_t FdLimit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 1u << 21;
  return lim.rlim_cur;
}

// The daemon's fds, shared out: half the limit for file nodes' O_PATH fds, a quarter
// for open files' source fds ("open" mode; more opens than that share them), the rest
// for directories, the cache's packs, RocksDB and sockets.
uint64_t MaxFileFds() { return FdLimit() / 2; }
size_t MaxHandleFds() { return std::max<size_t>(8, FdLimit() / 4); }

Status FsyncFd(int fd, bool datasync) {
  int rc = datasync ? ::fdatasync(fd) : ::fsync(fd);
  if (rc < 0) return Errno("fsync");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SourceFs>> SourceFs::Create(UniqueFd root_fd, SourceFsOptions options,
                                                   cache::Cache& cache,
                                                   prefetch::Prefetcher* prefetcher) {
  auto st = StatFd(root_fd.get());
  if (!st.ok()) return st.status();
  if (!S_ISDIR(st->st_mode)) return Status::InvalidArgument("source is not a directory");
  return std::unique_ptr<SourceFs>(
      new SourceFs(std::move(root_fd), *st, std::move(options), cache, prefetcher));
}

SourceFs::SourceFs(UniqueFd root_fd, const struct ::stat& root_stat, SourceFsOptions options,
                   cache::Cache& cache, prefetch::Prefetcher* prefetcher)
    : options_(std::move(options)),
      inodes_(std::move(root_fd), root_stat, MaxFileFds()),
      cache_(&cache),
      running_as_root_(::geteuid() == 0),
      handle_fds_(MaxHandleFds()),
      prefetcher_(prefetcher),
      filler_(options_.passthrough ? std::make_unique<IdleFiller>() : nullptr) {}

Result<std::shared_ptr<Inode>> SourceFs::FindInode(uint64_t nodeid) const {
  auto inode = inodes_.Find(nodeid);
  if (!inode) return Status::Stale(fmt::format("node {} is not known", nodeid));
  return inode;
}

Result<std::shared_ptr<Inode>> SourceFs::FindDir(uint64_t nodeid) const {
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode;
  if (!(*inode)->is_dir) return ErrnoValue(ENOTDIR, fmt::format("node {}", nodeid));
  return inode;
}

Result<Location> SourceFs::Resolve(const Inode& inode, struct ::stat* st_out) const {
  Location loc = inodes_.LocationOf(inode);
  if (!loc.parent) return Status::Stale("node has no parent");
  auto st = StatAt(loc.dir_fd(), loc.name);
  if (!st.ok()) {
    // Deleted in the source: ESTALE makes the kernel look the name up again.
    if (st.status().code() == Code::kNotFound) return Status::Stale(st.status().message());
    return st.status();
  }
  if (static_cast<uint64_t>(st->st_ino) != inode.ino ||
      static_cast<uint64_t>(st->st_dev) != inode.dev) {
    return Status::Stale(fmt::format("'{}' now names another file", loc.name));
  }
  if (st_out) *st_out = *st;
  return loc;
}

Status SourceFs::RefuseIfReadOnly(const char* what) const {
  if (!options_.read_only) return Status::Ok();
  return Status::FromErrno(EROFS, fmt::format("{}: mounted read-only", what));
}

Status SourceFs::GiveToCaller(int dir_fd, const std::string& name, mode_t mode,
                              Caller caller) const {
  if (!running_as_root_) return Status::Ok();
  auto dir = StatFd(dir_fd);
  if (!dir.ok()) return dir.status();
  auto created = StatAt(dir_fd, name);
  if (!created.ok()) return created.status();
  // In a setgid directory the kernel already gave the entry the directory's group (and
  // a subdirectory the setgid bit): that is the group POSIX wants, not the caller's.
  const gid_t gid = (dir->st_mode & S_ISGID) ? created->st_gid : caller.gid;
  if (created->st_uid == caller.uid && created->st_gid == gid) return Status::Ok();
  if (::fchownat(dir_fd, name.c_str(), caller.uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
    return Errno(fmt::format("chown '{}'", name));
  }
  // chown clears setuid and setgid on files, even root's: put back what was asked for
  // (the kernel already took out a setgid bit the caller may not have).
  const mode_t special = mode & (S_ISUID | S_ISGID);
  if (special != 0 && !S_ISLNK(created->st_mode) && !S_ISDIR(created->st_mode) &&
      ::fchmodat(dir_fd, name.c_str(), (created->st_mode & 07777) | special, 0) < 0) {
    return Errno(fmt::format("chmod '{}'", name));
  }
  return Status::Ok();
}

Result<std::string> SourceFs::ProcPath(const Inode& inode) const {
  // "/." names the directory the O_PATH fd's magic link leads to; without it the l*()
  // calls (lchown, lsetxattr, utimensat with AT_SYMLINK_NOFOLLOW) act on the link itself.
  if (inode.is_dir) return fmt::format("/proc/self/fd/{}/.", inode.path_fd.get());
  auto loc = Resolve(inode);
  if (!loc.ok()) return loc.status();
  return fmt::format("/proc/self/fd/{}/{}", loc->dir_fd(), loc->name);
}

// ---- names ----

Result<Entry> SourceFs::LookupIn(const std::shared_ptr<Inode>& parent, const std::string& name,
                                 std::optional<uint64_t> listed_ino) {
  // A listing of files the table knows (`ls -l` again, the daemon's own listings after
  // READs: kernel_cache/attr_refresh.h) needs no open per entry.
  if (listed_ino) {
    if (std::shared_ptr<Inode> listed = inodes_.FindBySource(parent->dev, *listed_ino)) {
      if (std::optional<Entry> entry = LookupKnownFile(parent, name, std::move(listed))) {
        return *entry;
      }
    }
  }
  // O_PATH opens no data and follows no symlink: it pins the object so that the stat
  // and the node we create are of the same thing.
  auto fd = OpenChild(parent->path_fd.get(), name, O_PATH);
  if (!fd.ok()) return fd.status();
  auto st = StatFd(fd->get());
  if (!st.ok()) return st.status();
  // "notify" mode: the reply gives the kernel fresh attributes of a file it may hold
  // pages of (a LOOKUP after the entry timeout; a READDIRPLUS: `ls -l`, a data set's
  // scan, the daemon's own listings), so it is checked as a GETATTR is (GetAttrByNode):
  // otherwise listings would keep the attributes fresh, and the GETATTR that finds a
  // change inotify missed would never come. Observed first, then stated again.
  std::shared_ptr<Inode> known;
  InodeTable::Observation seen;
  ChangeWatcher* const checking = watcher_.load();
  if (checking != nullptr && checking->follows_contents() && S_ISREG(st->st_mode)) {
    known = inodes_.FindBySource(st->st_dev, st->st_ino);
    if (known) {
      seen = InodeTable::Observe(*known);
      st = StatFd(fd->get());
      if (!st.ok()) return st.status();
    }
  }
  auto inode = inodes_.Remember(parent, name, *st, std::move(*fd),
                                KnownByAnotherDeadName(*parent, name, *st));
  if (known && inode == known) {
    CheckKernelCache(*inode, cache::SourceIdentity::FromStat(*st), seen, Reply::kAttributes,
                     checking);
  }
  if (inode->is_dir) {
    if (ChangeWatcher* watcher = watcher_.load()) watcher->Watch(*inode);
    if (SourceObserver* observer = observer_.load()) observer->DirectoryKnown(*inode);
  }
  return Entry{inode->nodeid, *st};
}

std::optional<Entry> SourceFs::LookupKnownFile(const std::shared_ptr<Inode>& parent,
                                               const std::string& name,
                                               std::shared_ptr<Inode> listed) {
  // A node is its (dev, ino): the stat by name says which one the name means now, with
  // nothing to pin (the O_PATH fd of LookupIn would only be closed again: a known node
  // keeps what it has). Anything that needs a new node (a file renamed underneath, a
  // node the kernel forgot meanwhile), a directory, a name gone or changed between the
  // two stats below: the long way, which pins what it makes.
  auto st = StatAt(parent->path_fd.get(), name);
  if (!st.ok() || !S_ISREG(st->st_mode)) return std::nullopt;
  // The listing's node, if the name still means it (the common case): no second search.
  std::shared_ptr<Inode> known =
      static_cast<uint64_t>(st->st_dev) == listed->dev && static_cast<uint64_t>(st->st_ino) == listed->ino
          ? std::move(listed)
          : inodes_.FindBySource(st->st_dev, st->st_ino);
  if (!known) return std::nullopt;
  // "notify" mode: checked as a GETATTR is (see LookupIn).
  ChangeWatcher* watcher = watcher_.load();
  const bool check = watcher != nullptr && watcher->follows_contents();
  InodeTable::Observation seen;
  if (check) {
    seen = InodeTable::Observe(*known);
    auto again = StatAt(parent->path_fd.get(), name);
    if (!again.ok() || again->st_dev != st->st_dev || again->st_ino != st->st_ino) {
      return std::nullopt;
    }
    st = again;
  }
  if (KnownByAnotherDeadName(*parent, name, *st, known.get()) ||
      !inodes_.RememberKnown(known, parent, name, *st)) {
    return std::nullopt;
  }
  if (check) {
    CheckKernelCache(*known, cache::SourceIdentity::FromStat(*st), seen, Reply::kAttributes,
                     watcher);
  }
  return Entry{known->nodeid, *st};
}

bool SourceFs::KnownByAnotherDeadName(const Inode& parent, const std::string& name,
                                      const struct ::stat& st, const Inode* known) const {
  if (S_ISDIR(st.st_mode)) return false;  // directories are reached by their fd, not name
  std::shared_ptr<Inode> found;
  if (known == nullptr) {
    found = inodes_.FindBySource(st.st_dev, st.st_ino);
    known = found.get();
  }
  if (known == nullptr) return false;
  const Location loc = inodes_.LocationOf(*known);
  if (!loc.parent || (loc.parent.get() == &parent && loc.name == name)) return false;
  // Another name: a hard link (both name it) or a rename underneath (the old one does not).
  auto there = StatAt(loc.dir_fd(), loc.name);
  return !there.ok() || there->st_ino != st.st_ino || there->st_dev != st.st_dev;
}

Result<Entry> SourceFs::Lookup(uint64_t parent, const std::string& name) {
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  Result<Entry> entry = LookupIn(*dir, name);
  if (entry.ok() && !S_ISDIR(entry->attr.st_mode)) {
    if (SourceObserver* observer = observer_.load()) observer->BeforeFileKnown(**dir);
  }
  return entry;
}

void SourceFs::Forget(uint64_t nodeid, uint64_t nlookup) {
  std::shared_ptr<Inode> gone = inodes_.Forget(nodeid, nlookup);
  if (gone && gone->is_dir) {
    if (ChangeWatcher* watcher = watcher_.load()) watcher->Unwatch(*gone);
    if (SourceObserver* observer = observer_.load()) observer->DirectoryForgotten(*gone);
  }
}

void SourceFs::WarmMetadata(std::vector<std::string> paths,
                            const MetadataWarmup::Options& options) {
  warmup_ = std::make_unique<MetadataWarmup>(inodes_.root()->path_fd.get(), std::move(paths),
                                             inodes_, options);
}

void SourceFs::AttachKernel(ChangeWatcher* watcher, Invalidator* kernel) {
  // The filler pushes into the kernel and drops its pages through the observer and
  // `kernel`, which go after this: it stops first.
  if (kernel == nullptr && filler_) filler_->Stop();
  watcher_.store(watcher);
  kernel_.store(kernel);
  if (watcher) watcher->Watch(*inodes_.root());
}

Result<struct ::stat> SourceFs::GetAttr(uint64_t nodeid, FileHandle* fh, OrderWait wait) {
  std::shared_ptr<Inode> inode;
  if (fh) {
    inode = fh->inode();
  } else {
    auto found = FindInode(nodeid);
    if (!found.ok()) return found.status();
    inode = std::move(*found);
  }
  return StatForKernel(*inode, wait, [&] { return StatForReply(*inode, fh); });
}

Result<struct ::stat> SourceFs::StatForKernel(
    Inode& inode, OrderWait wait, const std::function<Result<struct ::stat>()>& stat) {
  ChangeWatcher* const watcher = watcher_.load();
  if (inode.is_dir || (watcher != nullptr && watcher->follows_contents())) {
    return StatAndCheck(inode, stat, watcher);
  }
  // "open" mode: a reply that finds the file grown drops the kernel's pages, deciding
  // under the node's open_order as an open does (DropChangedBeforeReply); taken before
  // the stat, so that no reply is recorded for a request handed to the waiting room.
  if (!TakeOpenOrder(inode, wait)) return OrderHeld(inode);
  MutexLock order(inode.open_order, std::adopt_lock);
  return StatAndCheck(inode, stat, watcher);
}

Result<struct ::stat> SourceFs::StatAndCheck(Inode& inode,
                                             const std::function<Result<struct ::stat>()>& stat,
                                             ChangeWatcher* watcher) {
  const auto seen = InodeTable::Observe(inode);
  auto st = stat();
  // The reply's attributes may be the ones the kernel keeps (InodeTable::KernelAttrsShow).
  if (st.ok() && !inode.is_dir) {
    const auto id = cache::SourceIdentity::FromStat(*st);
    inodes_.NoteKernelAttrs(inode, id, seen);
    // A reader that keeps the file open (`tail -f`) learns a size changed underneath
    // here, at its first read past the end once the attributes expired, with no open
    // in between that would check the kernel's pages.
    CheckKernelCache(inode, id, seen, Reply::kAttributes, watcher);
  }
  return st;
}

Status SourceFs::OrderHeld(const Inode& inode) {
  return Status::Busy(fmt::format("node {}: another thread holds its open_order", inode.nodeid));
}

Result<struct ::stat> SourceFs::StatForReply(const Inode& inode, FileHandle* fh) {
  if (fh && !fh->holds_fd() && inode.path_fd) {
    return StatFd(inode.path_fd.get());  // the same inode, with no open of it
  }
  if (fh) {
    auto fd = fh->Fd();
    if (!fd.ok()) return fd.status();
    return StatFd(fd->get());
  }
  if (inode.is_dir) return StatFd(inode.path_fd.get());
  // FUSE sends fstat() without a file handle: an open file is asked about its inode.
  if (inode.open_handles.load() > 0 && inode.path_fd) {
    return StatFd(inode.path_fd.get());
  }
  struct ::stat st {};
  auto loc = Resolve(inode, &st);
  if (!loc.ok()) return loc.status();
  return st;
}

Result<struct ::stat> SourceFs::SetAttr(uint64_t nodeid, const struct ::stat& attr,
                                        AttrChange what, FileHandle* fh, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("setattr"));
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  auto path = ProcPath(**inode);
  if (!path.ok()) return path.status();
  const char* p = path->c_str();
  // chmod() and truncate() follow symlinks, and a symlink's target may lie outside the
  // source: refuse them on symlinks (Linux has no symlink modes anyway).
  struct ::stat current {};
  if (::lstat(p, &current) < 0) return Errno("setattr");
  if (S_ISLNK(current.st_mode) && (what.mode || what.size)) {
    return ErrnoValue(EOPNOTSUPP, "chmod/truncate of a symlink");
  }
  // The kernel applies a setattr's result itself (a truncate drops its own pages).
  MountChange change(inodes_, (*inode)->is_dir ? nullptr : inode->get());

  if (what.mode && ::chmod(p, attr.st_mode & 07777) < 0) return Errno("chmod");
  if (what.uid || what.gid) {
    uid_t uid = what.uid ? attr.st_uid : static_cast<uid_t>(-1);
    gid_t gid = what.gid ? attr.st_gid : static_cast<gid_t>(-1);
    if (::lchown(p, uid, gid) < 0) return Errno("chown");
  }
  if (what.size) {
    int rc;
    if (fh) {
      auto fd = fh->Fd();
      if (!fd.ok()) return fd.status();
      rc = ::ftruncate(fd->get(), attr.st_size);
    } else {
      rc = ::truncate(p, attr.st_size);
    }
    if (rc < 0) return Errno("truncate");
    cache_->Invalidate((*inode)->dev, (*inode)->ino);
  }
  if (what.atime || what.mtime) {
    struct timespec ts[2];
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1] = ts[0];
    if (what.atime) ts[0] = what.atime_now ? timespec{0, UTIME_NOW} : attr.st_atim;
    if (what.mtime) ts[1] = what.mtime_now ? timespec{0, UTIME_NOW} : attr.st_mtim;
    if (::utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW) < 0) return Errno("utimens");
  }
  auto st = GetAttr(nodeid, fh);
  if (st.ok() && !(*inode)->is_dir) {
    const auto id = cache::SourceIdentity::FromStat(*st);
    if (fh) fh->set_identity(id);
    change.Made(id);
  }
  return st;
}

std::optional<cache::SourceIdentity> SourceFs::IdentityNow(const Inode& inode) const {
  if (inode.path_fd) {
    auto st = StatFd(inode.path_fd.get());
    if (st.ok()) return cache::SourceIdentity::FromStat(*st);
    return std::nullopt;
  }
  struct ::stat st {};
  if (!Resolve(inode, &st).ok()) return std::nullopt;
  return cache::SourceIdentity::FromStat(st);
}

Result<std::string> SourceFs::ReadLink(uint64_t nodeid) {
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  auto loc = Resolve(**inode);
  if (!loc.ok()) return loc.status();
  std::string target(PATH_MAX, '\0');
  ssize_t n = ::readlinkat(loc->dir_fd(), loc->name.c_str(), target.data(), target.size());
  if (n < 0) return Errno(fmt::format("readlink '{}'", loc->name));
  target.resize(static_cast<size_t>(n));
  return target;
}

Result<Entry> SourceFs::MakeNode(uint64_t parent, const std::string& name, mode_t mode,
                                 dev_t rdev, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("mknod"));
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  if (::mknodat((*dir)->path_fd.get(), name.c_str(), mode, rdev) < 0) {
    return Errno(fmt::format("mknod '{}'", name));
  }
  EPOCHFS_RETURN_IF_ERROR(GiveToCaller((*dir)->path_fd.get(), name, mode, caller));
  return LookupIn(*dir, name);
}

Result<Entry> SourceFs::MakeDir(uint64_t parent, const std::string& name, mode_t mode,
                                Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("mkdir"));
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  if (::mkdirat((*dir)->path_fd.get(), name.c_str(), mode) < 0) {
    return Errno(fmt::format("mkdir '{}'", name));
  }
  EPOCHFS_RETURN_IF_ERROR(GiveToCaller((*dir)->path_fd.get(), name, mode, caller));
  return LookupIn(*dir, name);
}

Result<Entry> SourceFs::SymLink(const std::string& target, uint64_t parent,
                                const std::string& name, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("symlink"));
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  if (::symlinkat(target.c_str(), (*dir)->path_fd.get(), name.c_str()) < 0) {
    return Errno(fmt::format("symlink '{}'", name));
  }
  EPOCHFS_RETURN_IF_ERROR(GiveToCaller((*dir)->path_fd.get(), name, S_IFLNK | 0777, caller));
  return LookupIn(*dir, name);
}

Result<Entry> SourceFs::Link(uint64_t nodeid, uint64_t new_parent, const std::string& new_name) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("link"));
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  if ((*inode)->is_dir) return ErrnoValue(EPERM, "link: a directory");
  auto dir = FindDir(new_parent);
  if (!dir.ok()) return dir.status();
  auto loc = Resolve(**inode);
  if (!loc.ok()) return loc.status();
  // A new name moves the file's ctime.
  MountChange change(inodes_, inode->get(), KernelLearns::kCtimeOnly);
  if (::linkat(loc->dir_fd(), loc->name.c_str(), (*dir)->path_fd.get(), new_name.c_str(), 0) < 0) {
    return Errno(fmt::format("link '{}'", new_name));
  }
  if (auto id = IdentityNow(**inode)) change.Made(*id);
  return LookupIn(*dir, new_name);
}

Status SourceFs::Unlink(uint64_t parent, const std::string& name) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("unlink"));
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  auto st = StatAt((*dir)->path_fd.get(), name);
  // The file may live on, under another name or open: the unlink moves its ctime.
  auto node = st.ok() ? inodes_.FindBySource(st->st_dev, st->st_ino) : nullptr;
  MountChange change(inodes_, node && !node->is_dir ? node.get() : nullptr,
                     KernelLearns::kCtimeOnly);
  if (::unlinkat((*dir)->path_fd.get(), name.c_str(), 0) < 0) {
    return Errno(fmt::format("unlink '{}'", name));
  }
  if (node) {
    if (auto id = IdentityNow(*node)) change.Made(*id);
  }
  // The last name gone: its cached chunks can never be served again, free them now.
  if (st.ok() && st->st_nlink <= 1) cache_->Invalidate(st->st_dev, st->st_ino);
  return Status::Ok();
}

Status SourceFs::RemoveDir(uint64_t parent, const std::string& name) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("rmdir"));
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  if (::unlinkat((*dir)->path_fd.get(), name.c_str(), AT_REMOVEDIR) < 0) {
    return Errno(fmt::format("rmdir '{}'", name));
  }
  return Status::Ok();
}

Status SourceFs::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                        const std::string& new_name, unsigned int flags) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("rename"));
  auto from = FindDir(parent);
  if (!from.ok()) return from.status();
  auto to = FindDir(new_parent);
  if (!to.ok()) return to.status();
  auto moved = StatAt((*from)->path_fd.get(), name);
  auto replaced = StatAt((*to)->path_fd.get(), new_name);
  // A rename moves the ctime of the file it moves and of the one it replaces (which may
  // live on, open or under another name).
  auto moved_node = moved.ok() ? inodes_.FindBySource(moved->st_dev, moved->st_ino) : nullptr;
  auto replaced_node =
      replaced.ok() ? inodes_.FindBySource(replaced->st_dev, replaced->st_ino) : nullptr;
  MountChange moving(inodes_, moved_node && !moved_node->is_dir ? moved_node.get() : nullptr,
                     KernelLearns::kCtimeOnly);
  MountChange replacing(inodes_,
                        replaced_node && !replaced_node->is_dir ? replaced_node.get() : nullptr,
                        KernelLearns::kCtimeOnly);
  if (::syscall(SYS_renameat2, (*from)->path_fd.get(), name.c_str(), (*to)->path_fd.get(),
                new_name.c_str(), flags) < 0) {
    return Errno(fmt::format("rename '{}' to '{}'", name, new_name));
  }
  if (replaced.ok() && !S_ISDIR(replaced->st_mode) && replaced->st_nlink <= 1 &&
      !(flags & RENAME_EXCHANGE)) {
    cache_->Invalidate(replaced->st_dev, replaced->st_ino);
  }
  // Keep the nodes' locations current so they are not mistaken for stale ones.
  if (moved_node) inodes_.Move(moved_node, *to, new_name);
  if ((flags & RENAME_EXCHANGE) && replaced_node) inodes_.Move(replaced_node, *from, name);
  if (moved_node && !moved_node->is_dir) {
    if (auto id = IdentityNow(*moved_node)) moving.Made(*id);
  }
  if (replaced_node && !replaced_node->is_dir) {
    if (auto id = IdentityNow(*replaced_node)) replacing.Made(*id);
  }
  return Status::Ok();
}

// ---- files ----

namespace {
// Whether a stat of a source file just opened failed as GlusterFS's client fails it when
// it answered the open and has not yet opened the file on the brick (its open-behind):
// the FUSE bridge stats an open inode through its open fd, and that fd has no remote
// file yet ("remote_fd is -1"). A direct reader's fstat meets the same error; the daemon
// can stat the file another way instead of failing the reader's open.
bool IsOpenBehindRace(const Status& status) { return status.err() == EBADFD; }

// kStale unless `st`, just found as `name`, is `inode`'s own file.
Status IsNodesFile(const Inode& inode, const struct ::stat& st, const std::string& name) {
  if (static_cast<uint64_t>(st.st_ino) != inode.ino || static_cast<uint64_t>(st.st_dev) != inode.dev) {
    return Status::Stale(fmt::format("'{}' now names another file", name));
  }
  return Status::Ok();
}
}  // namespace

Result<std::pair<UniqueFd, cache::SourceIdentity>> SourceFs::OpenNode(const Inode& inode,
                                                                      int flags) {
  Location loc = inodes_.LocationOf(inode);
  if (!loc.parent) return Status::Stale("open: node has no parent");
  auto fd = OpenChild(loc.dir_fd(), loc.name, SourceOpenFlags(flags));
  if (!fd.ok()) {
    if (fd.status().code() == Code::kNotFound) return Status::Stale(fd.status().message());
    return fd.status();
  }
  auto st = cache::StatForIdentity(fd->get());
  if (!st.ok() && IsOpenBehindRace(st.status()) && inode.path_fd) {
    // This fd's stat says nothing about which file it is: check that the name still
    // names the node's file, then open the node's own inode, which ReopenNode stats
    // another way should the race come again.
    spdlog::debug("node {}: {}; opening the node's inode instead", inode.nodeid,
                  st.status().ToString());
    EPOCHFS_RETURN_IF_ERROR(NameStillNames(inode, /*past_client_caches=*/true).status());
    return ReopenNode(inode, flags);
  }
  if (!st.ok()) return st.status();
  EPOCHFS_RETURN_IF_ERROR(IsNodesFile(inode, *st, loc.name));
  return std::make_pair(std::move(*fd), cache::SourceIdentity::FromStat(*st));
}

Result<std::pair<UniqueFd, cache::SourceIdentity>> SourceFs::CheckNode(const Inode& inode) {
  auto id = NameStillNames(inode, /*past_client_caches=*/true);
  if (!id.ok()) return id.status();
  return std::make_pair(UniqueFd(), *id);
}

Result<OpenResult> SourceFs::Open(uint64_t nodeid, int flags, OrderWait wait) {
  const bool read_only = (flags & O_ACCMODE) == O_RDONLY && !(flags & O_TRUNC);
  SourceObserver* observer = read_only ? observer_.load() : nullptr;
  if (observer != nullptr) {
    if (auto inode = FindInode(nodeid); inode.ok()) observer->BeforeReadOnlyOpen(**inode);
  }
  Result<OpenResult> opened = OpenChecked(nodeid, flags, wait);
  if (opened.ok() && observer != nullptr) observer->ReadOnlyOpened(*opened->handle->inode());
  return opened;
}

Result<OpenResult> SourceFs::OpenChecked(uint64_t nodeid, int flags, OrderWait wait) {
  const int access = flags & O_ACCMODE;
  if (access != O_RDONLY || (flags & O_TRUNC)) {
    EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("open for writing"));
  }
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  // Concurrent opens of one file decide about the kernel's pages one at a time: the
  // open that finds the file changed drops them before another open may keep them.
  if (!TakeOpenOrder(**inode, wait)) return OrderHeld(**inode);
  MutexLock order((*inode)->open_order, std::adopt_lock);
  const auto seen = InodeTable::Observe(**inode);
  // Close-to-open needs the file's identity now, not an fd: a read-only open of a file
  // the kernel has read before (a warm epoch: no READ will come) only stats the name,
  // freshly. Its handle opens the source on its first READ, through the node's O_PATH
  // fd (that very inode). On a network source an open and its close are round trips of
  // their own: GlusterFS's client answers an open, a flush and a release per file.
  // Passthrough (fs/passthrough.h): every open of a node with passthrough handles (the
  // kernel allows no other mode beside them), and a first read-only open of a file that
  // neither the kernel's pages nor the cache hold. The kernel then reads the node's own
  // inode (its O_PATH fd) from the source, as fresh as the source is, so the name is
  // checked as a direct reader's open would check it (the source client's caches), not
  // past them: on GlusterFS the forced stat is a round trip to the brick per open.
  const bool joins_passthrough = backing_files_.Has(nodeid);
  if (joins_passthrough || MayPassthrough(**inode, flags)) {
    auto named = NameStillNames(**inode, /*past_client_caches=*/false);
    if (!named.ok()) return named.status();
    if (joins_passthrough ||
        (!CacheHolds(*named) && inodes_.KernelAttrsShow(**inode, *named, seen))) {
      auto served = OpenPassthrough(*inode, *named, flags);
      // Refused: a first open goes on as any other; one beside passthrough handles cannot.
      if (served.ok() || joins_passthrough) return served;
    }
  }
  const bool check_only = access == O_RDONLY && !(flags & O_TRUNC) && (*inode)->path_fd &&
                          inodes_.KernelHasRead(**inode);
  auto opened = check_only ? CheckNode(**inode) : OpenNode(**inode, flags);
  if (!opened.ok()) return opened.status();
  if (check_only) open_checks_.fetch_add(1, std::memory_order_relaxed);
  auto& [fd, id] = *opened;
  OpenResult result;
  const bool may_write = access != O_RDONLY || (flags & O_TRUNC);
  // A buffered write through the mount is in the kernel's pages before it is in the
  // source: the kernel copies the bytes in, sends the WRITE, and extends the file when
  // the reply comes. A drop of the pages in between lets a reader read that page again
  // from the source, without the bytes, and the kernel then keeps zeros where the write
  // went. So while another handle holds the file open for writing, this open drops no
  // page: it reads around them (direct I/O) and the drop waits for the last writer's
  // release (Release). Handles for writing are made under open_order, so no writer
  // appears while it is held.
  const bool writers = (*inode)->open_for_writing.load() > 0;
  Invalidator* const kernel = kernel_.load();
  bool show_size = false;
  if (!inodes_.KernelAttrsShow(**inode, id, seen)) {
    // The kernel kept this name and its attributes since an older state of the file
    // (no LOOKUP per open: entries of files have their timeout in "open" mode too), and
    // would read with that size. ESTALE makes it look the name up again (the VFS
    // retries an open once, with LOOKUP_REVAL) and open anew with fresh attributes.
    // Dropped with no reply trusted since: the kernel's attributes are invalid already,
    // and one stat'ed before this check may still arrive; setting the size (or direct
    // I/O) covers it, and an ESTALE here could be the second the kernel gets for one
    // open (its retry found this node right after another opener's drop), which fails
    // the open.
    const bool relookup =
        !inodes_.KernelAttrsDropped(**inode) && inodes_.MayAskRelookup(**inode);
    spdlog::debug("open of node {} (source inode {}, {} bytes, {}): the kernel's attributes "
                  "may show another state{}",
                  nodeid, id.ino, id.size, may_write ? "for writing" : "read-only",
                  relookup ? "; it looks the name up again" : "");
    // Dropped first: a reply still in flight with older attributes is then refused by
    // the kernel (the drop moves their version on). The pages go too, unless another
    // handle writes the file: the LOOKUP's larger size would otherwise make the old
    // last page, zero-filled past the old end, readable to whoever has the file open.
    // Under a writer only the attributes go, and the pages at its last release.
    auto drop = [&] {
      if (kernel == nullptr) return;
      inodes_.DropKernelAttrs(**inode);
      if (writers) {
        kernel->InvalidateAttrs(nodeid);
        (*inode)->pages_drop_owed = true;
      } else {
        kernel->InvalidateInode(nodeid);
      }
    };
    if (relookup) {
      drop();
      open_relookups_.fetch_add(1, std::memory_order_relaxed);
      return Status::Stale(fmt::format("node {}: changed since the kernel's attributes",
                                       nodeid));
    }
    if (may_write) {
      // Never direct I/O for a writer: the kernel drops a direct write's range from its
      // pages before the write reaches the source (the window above, for every write).
      // Dropped instead: a reply stat'ed before this check is then refused, and the next
      // read past the size asks anew. That reply to the LOOKUP a relookup asked for is
      // refused too (a round trip more), which a writer can bear.
      drop();
      open_direct_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    } else if (writers || kernel == nullptr || !inodes_.MayShowSize(**inode, id.size)) {
      // Another handle writes the file (no store may land under its writes), the kernel
      // may have been told a larger size (a store cannot shrink it), or no kernel to store
      // into (a test): this open reads from the daemon, with direct I/O, which the kernel
      // neither clamps to its size nor reads past the file's end with.
      result.direct_io = true;
      open_direct_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    } else {
      // Changed again right after that LOOKUP, another opener's LOOKUP is still on its
      // way, or the replies since a drop may all have been refused: the kernel's size is
      // set to this open's below, once its pages are dealt with (ShowSize). No drop of
      // the attributes here: it would refuse the reply to the LOOKUP the ESTALE asked
      // for (and the kernel would ask again at its next use: a round trip more).
      show_size = true;
    }
  }
  const auto match = inodes_.SwapKernelCacheId(**inode, id, seen);
  // While a relookup's reply may be on its way, the kernel's pages are dropped by this
  // open (keep_cache off, which moves no attribute version), whatever it found, so that
  // no opener keeps pages older than a change another one saw.
  const bool relookup_pending = inodes_.RelookupPending(**inode);
  const bool owed_drop = (*inode)->pages_drop_owed;
  const bool stale = match != InodeTable::CacheMatch::kSame || relookup_pending || owed_drop;
  result.keep_cache = !stale;
  if (stale && writers) {
    spdlog::debug("open of node {} (source inode {}): the kernel's pages may be older than "
                  "the file, which is open for writing; dropped at its last release",
                  nodeid, id.ino);
    (*inode)->pages_drop_owed = true;
    result.keep_cache = true;
    if (!may_write) result.direct_io = true;
    open_drops_deferred_.fetch_add(1, std::memory_order_relaxed);
  } else if (match == InodeTable::CacheMatch::kChanged && kernel != nullptr &&
             !relookup_pending) {
    spdlog::debug("open of node {} (source inode {}): changed since its pages were read",
                  nodeid, id.ino);
    // Dropped now (attributes and pages), while the lock holds other opens back: an
    // open that raced this one and found the new identity already recorded would
    // otherwise keep the old pages until this opener's reply dropped them.
    DropAttrsAndPages(**inode, *kernel);
    (*inode)->pages_drop_owed = false;
    result.keep_cache = true;
  } else if (stale) {
    (*inode)->pages_drop_owed = false;  // keep_cache off drops them at this open
  }
  if (match == InodeTable::CacheMatch::kChanged) cache_->Invalidate(id.dev, id.ino);
  if (show_size) {
    // Pages of an older file that nothing dropped yet: a change found while a relookup's
    // reply may be on its way (the drop above waits for it), or a drop owed since a
    // writer had the file open. (Only relookup_pending: the relookup's drop took the
    // older pages, and a READ since read the file as it is.)
    const bool pages_may_be_older =
        !result.keep_cache && (match == InodeTable::CacheMatch::kChanged || owed_drop);
    ShowSizeToKernel(**inode, fd, id, seen, pages_may_be_older, *kernel, result);
  }
  // Without keep_cache the kernel drops the file's pages at this open.
  if (!result.keep_cache) (*inode)->kernel_pages.Dropped();
  result.handle = NewHandle(*inode, std::move(fd), id, flags);
  if (result.direct_io || (flags & O_DIRECT)) result.handle->set_reads_bypass_page_cache();
  return result;
}

Result<std::pair<Entry, OpenResult>> SourceFs::Create(uint64_t parent, const std::string& name,
                                                      mode_t mode, int flags, Caller caller) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("create"));
  auto dir = FindDir(parent);
  if (!dir.ok()) return dir.status();
  // Always exclusive: the kernel sends CREATE when it believes the name is free. If the
  // source has the name after all (made underneath the mount), opening it here would
  // skip the kernel's permission check of that file and hand it to the caller; ESTALE
  // instead makes the kernel look the name up again and open what it finds.
  auto fd = OpenChild((*dir)->path_fd.get(), name,
                        SourceOpenFlags(flags) | O_CREAT | O_EXCL, mode);
  if (!fd.ok()) {
    if (fd.status().err() == EEXIST && !(flags & O_EXCL)) {
      return Status::Stale(fmt::format("create '{}': made underneath the mount", name));
    }
    return fd.status();
  }
  EPOCHFS_RETURN_IF_ERROR(GiveToCaller((*dir)->path_fd.get(), name, mode, caller));
  auto st = StatFd(fd->get());
  if (!st.ok()) return st.status();
  // A node's O_PATH fd; without one it is still reached by name.
  auto path_fd = OpenChild((*dir)->path_fd.get(), name, O_PATH);
  auto inode = inodes_.Remember(*dir, name, *st, path_fd.ok() ? std::move(*path_fd) : UniqueFd(),
                                KnownByAnotherDeadName(**dir, name, *st));
  const auto id = cache::SourceIdentity::FromStat(*st);
  MountChange(inodes_, inode.get()).Made(id);
  OpenResult open;
  open.handle = NewHandle(inode, std::move(*fd), id, flags);
  return std::make_pair(Entry{inode->nodeid, *st}, std::move(open));
}

void SourceFs::NoteDemandRead(const Inode& inode, uint64_t offset) {
  if (SourceObserver* observer = observer_.load()) observer->DemandRead(inode, offset);
}

Result<cache::ReadBuffer> SourceFs::Read(FileHandle& fh, uint64_t offset, size_t size) {
  NoteDemandRead(*fh.inode(), offset);
  // The source fd is opened only if a chunk must come from the source: a READ the cache
  // answers (or one a readahead is bringing) needs none. On GlusterFS each open is an
  // OPEN, a FLUSH and a RELEASE at the bricks. The node's O_PATH fd is the same inode,
  // so its identity is the one an fd would show.
  std::optional<FdLease> lease;
  const int path_fd = fh.inode()->path_fd.get();
  if (fh.holds_fd() || path_fd < 0) {
    auto fd = fh.Fd();
    if (!fd.ok()) return fd.status();
    lease.emplace(std::move(*fd));
  }
  const int stat_fd = lease ? lease->get() : path_fd;
  const auto seen = InodeTable::Observe(*fh.inode());
  // The kernel's page cache is one per file, shared by every open: a read for an
  // open that predates a change must fill it with the file as it is now, not with
  // cached bytes of the identity that open saw (and a read past the size it saw must
  // not be cut short). So the identity is taken anew for every read.
  auto st = cache::StatForIdentity(stat_fd);
  if (!st.ok()) return st.status();
  cache::SourceFile file{lease ? lease->get() : -1, cache::SourceIdentity::FromStat(*st), nullptr};
  if (!lease) {
    file.open = [&fh, &lease]() -> Result<int> {
      if (!lease) {
        auto fd = fh.Fd();
        if (!fd.ok()) return fd.status();
        lease.emplace(std::move(*fd));
      }
      return lease->get();
    };
  }
  auto data = ReadToCurrentEnd(file, stat_fd, offset, size);
  if (data.ok()) {
    const cache::SourceIdentity& now = file.id;  // grown meanwhile: as read
    if (now != fh.identity()) fh.set_identity(now);
    if (data->size < size && fh.reads_fill_page_cache()) {
      inodes_.NoteKernelAttrs(*fh.inode(), now, seen);  // the kernel takes the end from it
    }
    if (SourceObserver* observer = observer_.load(); observer && fh.reads_fill_page_cache()) {
      observer->ReadAnswered(*fh.inode(), offset, data->size, now);
    }
  }
  return data;
}

Result<cache::ReadBuffer> SourceFs::ReadToCurrentEnd(cache::SourceFile& file, int stat_fd,
                                                     uint64_t offset, size_t size) {
  // A reply shorter than asked tells the kernel where the file ends: it zero-fills the
  // rest of the page and keeps it. If a write extended the file after `id` was taken,
  // those zeros would stand in the page cache where the written bytes are. So a short
  // read is checked against the file's size now, and read again if it grew.
  for (int attempt = 0;; ++attempt) {
    auto data = cache_->Read(file, offset, size);
    if (!data.ok() || data->size >= size || attempt == 3) return data;
    auto st = cache::StatForIdentity(stat_fd);
    if (!st.ok() || static_cast<uint64_t>(st->st_size) <= offset + data->size) return data;
    file.id = cache::SourceIdentity::FromStat(*st);
  }
}

Result<size_t> SourceFs::Write(FileHandle& fh, const char* data, size_t size, uint64_t offset,
                               bool append) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("write"));
  auto fd = fh.Fd();
  if (!fd.ok()) return fd.status();
  return WriteFd(fd->get(), fh.appends(), *fh.inode(), &fh, data, size, offset, append);
}

Status SourceFs::Release(std::unique_ptr<FileHandle> fh, OrderWait wait) {
  if (!fh) return Status::Ok();
  const std::shared_ptr<Inode> node = fh->inode();
  const bool wrote = fh->may_write();
  const bool passthrough = fh->passthrough();
  fh.reset();
  if (passthrough) {
    EndPassthrough(node, wrote);
    return Status::Ok();
  }
  if (!wrote) return Status::Ok();
  return DropOwedPages(*node, wait);
}

bool SourceFs::MayPassthrough(const Inode& inode, int flags) const {
  if (!options_.passthrough) return false;
  // Under a published plan readahead brings the files ahead of their readers; a
  // passthrough open of one it is still bringing would throw that work away
  // (docs/benchmarks.md, "Passthrough"). Unless the gate has stopped readahead: then
  // nothing brings them, and without passthrough each would be READs through the daemon.
  if (prefetcher_ != nullptr && prefetcher_->PlanLeftToReadahead()) return false;
  // Not granted at INIT (an older kernel): every attempt would be refused.
  return PassthroughGranted() && backing_files_.Usable() &&
         (flags & O_ACCMODE) == O_RDONLY &&
         !(flags & O_TRUNC) && inode.path_fd && inode.open_handles.load() == 0 &&
         !inodes_.KernelHasRead(inode) && !cache_->SsdPosition(inode.dev, inode.ino).has_value();
}

Result<cache::SourceIdentity> SourceFs::NameStillNames(const Inode& inode,
                                                      bool past_client_caches) {
  Location loc = inodes_.LocationOf(inode);
  if (!loc.parent) return Status::Stale("open: node has no parent");
  auto st = past_client_caches ? StatFreshAt(loc.dir_fd(), loc.name)
                               : StatAt(loc.dir_fd(), loc.name);
  if (!st.ok()) {
    if (st.status().code() == Code::kNotFound) return Status::Stale(st.status().message());
    return st.status();
  }
  EPOCHFS_RETURN_IF_ERROR(IsNodesFile(inode, *st, loc.name));
  return cache::SourceIdentity::FromStat(*st);
}

bool SourceFs::CacheHolds(const cache::SourceIdentity& id) const {
  return cache_->SsdPosition(id.dev, id.ino).has_value() || cache_->HoldsInRam(id);
}

Result<OpenResult> SourceFs::OpenPassthrough(const std::shared_ptr<Inode>& inode,
                                             const cache::SourceIdentity& id, int flags) {
  Invalidator* const kernel = kernel_.load();
  if (kernel == nullptr) return Status::Unsupported("passthrough: no kernel attached");
  auto backing = backing_files_.Acquire(inode->nodeid, inode->path_fd.get(), *kernel);
  if (!backing.ok()) return backing.status();
  // Writes through this open go to the source beside the daemon: its cached copy goes
  // now and again at the release (EndPassthrough).
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
    inode->passthrough_writes.fetch_add(1);
    cache_->Invalidate(id.dev, id.ino);
  }
  // The kernel drops the node's pages at an open without keep_cache, as this one is.
  inode->kernel_pages.Dropped();
  OpenResult result;
  result.backing_id = *backing;
  result.handle = NewHandle(inode, UniqueFd(), id, flags);
  result.handle->set_passthrough();
  return result;
}

void SourceFs::EndPassthrough(const std::shared_ptr<Inode>& node, bool wrote) {
  Invalidator* const kernel = kernel_.load();
  const bool last = kernel != nullptr && backing_files_.Release(node->nodeid, *kernel);
  if (wrote) {
    node->passthrough_writes.fetch_add(1);
    cache_->Invalidate(node->dev, node->ino);
    return;
  }
  if (!last) return;
  if (SourceObserver* observer = observer_.load()) observer->PassthroughClosed(*node);
  if (!filler_) return;
  // A weak reference: a queued fill keeps no forgotten node (and its O_PATH fd) alive.
  filler_->Offer([this, weak = std::weak_ptr<Inode>(node)] {
    const std::shared_ptr<Inode> node = weak.lock();
    if (!node || node->open_for_writing.load() > 0) return;
    const uint64_t writes = node->passthrough_writes.load();
    auto opened = OpenNode(*node, O_RDONLY);
    if (!opened.ok()) return;  // gone or renamed since: nothing to cache
    const auto& [fd, id] = *opened;
    if (id.size == 0 || CacheHolds(id)) return;
    // The bytes go on into the kernel's page cache where they can, rather than into RAM:
    // the next open then reads them with no request, as after READs the daemon answered.
    cache::Cache::WholeFileTaker take;
    if (SourceObserver* observer = observer_.load()) {
      take = [observer, writes](const cache::SourceIdentity& file, std::span<const char> bytes) {
        return observer->TakeFilled(file, bytes, writes);
      };
    }
    auto filled =
        cache_->PrefetchTaken(cache::SourceFile{.fd = fd.get(), .id = id, .open = {}}, take);
    if (!filled.ok()) {
      spdlog::debug("node {}: caching after its passthrough reads: {}", node->nodeid,
                    filled.status().ToString());
    }
    // A passthrough writer came while the file was read: its writes bypass the daemon,
    // and one through a shared mapping moves no timestamp the identity would show.
    const bool passthrough_writer_came = node->passthrough_writes.load() != writes;
    if (node->open_for_writing.load() > 0 || passthrough_writer_came) {
      cache_->Invalidate(id.dev, id.ino);
    }
    // The kernel's pages too, should the store have come before that writer (a writer
    // through the mount writes through them instead). Not under a writer's open: its
    // release drops them (DropOwedPages), as for any drop owed to a writer.
    if (passthrough_writer_came) {
      node->pages_drop_owed = true;
      (void)DropOwedPages(*node, OrderWait::kWait);  // off the FUSE workers: may wait
    }
  });
}

Status SourceFs::DropOwedPages(uint64_t nodeid) {
  auto node = FindInode(nodeid);
  if (!node.ok()) return Status::Ok();  // forgotten: the kernel's pages went with it
  return DropOwedPages(**node, OrderWait::kWait);
}

Status SourceFs::DropOwedPages(Inode& node, OrderWait wait) {
  if (!node.pages_drop_owed.load()) return Status::Ok();
  // Every write() through the released handle has returned: no write of it is in flight.
  if (!TakeOpenOrder(node, wait)) return OrderHeld(node);
  MutexLock order(node.open_order, std::adopt_lock);
  if (!node.pages_drop_owed.load() || node.open_for_writing.load() > 0) return Status::Ok();
  node.pages_drop_owed = false;
  if (Invalidator* kernel = kernel_.load()) {
    spdlog::debug("node {}: dropping the kernel's pages an open found older, now that no "
                  "handle writes it", node.nodeid);
    DropAttrsAndPages(node, *kernel);
  }
  return Status::Ok();
}

Result<size_t> SourceFs::WriteFd(int fd, bool fd_appends, Inode& node, FileHandle* fh,
                                 const char* data, size_t size, uint64_t offset, bool append) {
  // The kernel's pages were written through and stay valid; only the cache drops.
  MountChange change(inodes_, &node);
  node.maybe_open_for_writing = true;
  // An append: the kernel chose `offset` from the size it believes, which may be older
  // than the file (changed underneath, the watcher or the next open not there yet). The
  // source appends where it ends now, as a writer of its own would: what was written
  // underneath is not overwritten.
  auto written = WriteSource(fd, fd_appends, data, size, offset, append);
  if (!written.ok()) return written.status();
  const auto [done, end] = *written;
  cache_->Invalidate(node.dev, node.ino);
  if (auto st = StatFd(fd); st.ok()) {
    auto id = cache::SourceIdentity::FromStat(*st);
    if (fh) fh->set_identity(id);
    if (end >= 0 && static_cast<uint64_t>(end) != offset + done) {
      // The bytes went elsewhere than where the kernel put them in its pages: its pages
      // and size are not the file's. Not recorded as the kernel's; its pages are dropped
      // at the last writer's release ("open" mode: meanwhile opens read around them),
      // or by the watcher right after this write ("notify" mode: nothing else would
      // correct them while the writer keeps the file open; the writer's next write, if
      // already under way, may leave zeros in its page, and the append after it, placed
      // elsewhere again, drops them again).
      spdlog::debug("node {}: an append the kernel placed at {} ended at {}", node.nodeid,
                    offset, end);
      if (fh != nullptr) {
        node.pages_drop_owed = true;
      } else if (ChangeWatcher* watcher = watcher_.load();
                 watcher != nullptr && watcher->follows_contents()) {
        watcher->InvalidateUnfenced(node.nodeid);
      }
    } else {
      change.Made(id);
    }
  }
  return done;
}

std::unique_ptr<FileHandle> SourceFs::NewHandle(std::shared_ptr<Inode> inode, UniqueFd fd,
                                                const cache::SourceIdentity& id, int flags) {
  return std::make_unique<FileHandle>(
      std::move(inode), std::move(fd), id, SourceOpenFlags(flags), handle_fds_,
      // Closed by the budget, the handle's fd is opened again on the same inode.
      [this](const Inode& node, int reopen_flags) -> Result<UniqueFd> {
        auto reopened = ReopenNode(node, reopen_flags);
        if (!reopened.ok()) return reopened.status();
        return std::move(reopened->first);
      });
}

Result<std::pair<UniqueFd, cache::SourceIdentity>> SourceFs::ReopenNode(const Inode& inode,
                                                                        int flags) {
  if (!inode.path_fd) return OpenNode(inode, flags);
  // The /proc link of an O_PATH fd reopens exactly that inode, even if it has no name.
  const std::string path = fmt::format("/proc/self/fd/{}", inode.path_fd.get());
  UniqueFd fd(::open(path.c_str(), (SourceOpenFlags(flags) & ~O_TRUNC) | O_CLOEXEC));
  if (!fd) return Errno("reopen node");
  auto st = cache::StatForIdentity(fd.get());
  // The fd is the O_PATH fd's inode, so that fd's stat describes it just as well.
  if (!st.ok() && IsOpenBehindRace(st.status())) st = cache::StatForIdentity(inode.path_fd.get());
  if (!st.ok()) return st.status();
  return std::make_pair(std::move(fd), cache::SourceIdentity::FromStat(*st));
}

Result<struct ::stat> SourceFs::GetAttrByNode(uint64_t nodeid, OrderWait wait) {
  auto found = FindInode(nodeid);
  if (!found.ok()) return found.status();
  Inode& inode = **found;
  return StatForKernel(inode, wait, [&] {
    return inode.path_fd ? StatFd(inode.path_fd.get()) : StatForReply(inode, nullptr);
  });
}

void SourceFs::CheckKernelCache(Inode& inode, const cache::SourceIdentity& id,
                                InodeTable::Observation seen, Reply reply,
                                ChangeWatcher* watcher) {
  if (watcher == nullptr || !watcher->follows_contents()) {  // "open" mode
    if (reply == Reply::kAttributes) {
      inode.open_order.AssertHeld();  // StatForKernel
      DropChangedBeforeReply(inode, id, seen);
    }
    return;
  }
  // A change recorded counts as a drop asked of the watcher, in the same step, so that a
  // reply beside this one that finds the change recorded already knows it is pending.
  const auto match = inodes_.SwapKernelCacheId(inode, id, seen, /*can_defer=*/true,
                                               /*drop_later=*/true);
  if (match == InodeTable::CacheMatch::kRecent) {
    // A recent identity met again (the same size): one drop once its racily clean window
    // has passed covers a second change within its timestamp tick.
    watcher->InvalidateLater(inode.nodeid, InodeTable::RacilyCleanUntil(id));
  } else if (match == InodeTable::CacheMatch::kChanged) {
    // Within the watcher's lag after an event, or a change inotify does not report (a
    // hard link outside the source, a shared mapping): the kernel may hold pages of the
    // old file. Dropped from the watcher's thread: a request must not wait for that
    // drop (its fence opens the file through the mount, which may need this request
    // answered, or its folder's lock).
    spdlog::debug("node {} (source inode {}) changed without the mount: size now {}",
                  inode.nodeid, inode.ino, id.size);
    watcher->InvalidateLater(inode.nodeid);
  }
  if (reply == Reply::kAttributes && !inode.maybe_open_for_writing.load() &&
      inodes_.RefusesSize(inode, id.size)) {
    // Until that drop is made the kernel must not take a larger size: over the old
    // pages it shows their last page, zero-filled past the old end, as the file's bytes.
    // Its attributes are dropped first, so it refuses this reply's (the caller's stat
    // goes back still, and the next use asks again). A smaller size goes through: the
    // kernel cuts its pages there, and a short READ would not shrink the size once
    // the attributes' version moved on.
    inodes_.DropKernelAttrs(inode);
    watcher->InvalidateAttrsNow(inode.nodeid);
    attrs_after_change_.fetch_add(1, std::memory_order_relaxed);
  }
}

void SourceFs::DropChangedBeforeReply(Inode& inode, const cache::SourceIdentity& id,
                                      InodeTable::Observation seen) {
  // As an open decides (OpenChecked), under the same lock (StatForKernel took it): no
  // handle for writing can appear meanwhile, and none may be open while the pages go
  // (the write fence).
  if (!inodes_.SwapKernelCacheSize(inode, id, seen)) return;
  spdlog::debug("node {} (source inode {}) grew underneath while open: size now {}",
                inode.nodeid, inode.ino, id.size);
  cache_->Invalidate(id.dev, id.ino);
  attrs_after_change_.fetch_add(1, std::memory_order_relaxed);
  if (inode.open_for_writing.load() > 0) {
    inode.pages_drop_owed = true;  // the last writer's release drops them (Release)
    open_drops_deferred_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (Invalidator* kernel = kernel_.load()) {
    DropAttrsAndPages(inode, *kernel);
    inode.pages_drop_owed = false;
  }
}

void SourceFs::ShowSizeToKernel(Inode& node, const UniqueFd& fd, const cache::SourceIdentity& id,
                                InodeTable::Observation seen, bool pages_may_be_older,
                                Invalidator& kernel, OpenResult& result) {
  if (id.size == 0) return;  // no size is smaller
  // The kernel's size may be smaller than this open's: it may hold an older one, or have
  // refused every reply that carried this one (InodeTable::DropKernelAttrs), and its
  // reads stop at its size. Direct I/O would read past it, but the kernel refuses a
  // shared mapping of a file opened so (ENODEV: numpy's mmap_mode, for one). A store of
  // the last byte sets the size instead, in the same step that refuses older replies.
  // Pages that may be older go first: under a larger size their old last page would show
  // its zero-filled tail as the file's bytes. Called under open_order, no writer open.
  auto last_byte = ReadLastByte(node, fd, id.size);
  if (!last_byte.ok()) {
    spdlog::debug("open of node {}: its last byte: {}; direct I/O", node.nodeid,
                  last_byte.status().ToString());
    result.direct_io = true;
    open_direct_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (pages_may_be_older) {
    DropAttrsAndPages(node, kernel);  // now, not at the kernel's handling of this reply
    node.pages_drop_owed = false;
    result.keep_cache = true;
  }
  if (!kernel.ShowSize(node.nodeid, id.size, *last_byte)) {
    result.direct_io = true;  // not known to the kernel: nothing to store into
    open_direct_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  inodes_.NoteSizeShown(node, id.size);
  open_sizes_shown_.fetch_add(1, std::memory_order_relaxed);
  if (inodes_.MountChangedSince(node, seen)) {
    // A truncate by name through the mount (it takes no open_order) may have ended
    // between this open's stat and the store, which then gave the kernel the larger
    // size back. Its attributes go: the next use asks for the size, and the kernel cuts
    // its pages to it.
    inodes_.DropKernelAttrs(node);
    kernel.InvalidateAttrs(node.nodeid);
  }
}

Result<char> SourceFs::ReadLastByte(const Inode& node, const UniqueFd& fd, uint64_t size) {
  UniqueFd reopened;
  int read_fd = fd.get();
  if (!fd) {
    auto opened = ReopenNode(node, O_RDONLY);
    if (!opened.ok()) return opened.status();
    reopened = std::move(opened->first);
    read_fd = reopened.get();
  }
  char byte = 0;
  ssize_t n;
  do {
    n = ::pread(read_fd, &byte, 1, static_cast<off_t>(size - 1));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("read the last byte");
  if (n == 0) return Status::Stale("shrunk since its stat");
  return byte;
}

void SourceFs::DropAttrsAndPages(Inode& node, Invalidator& kernel) {
  inodes_.DropKernelAttrs(node);  // first: a reply recorded after it is judged against it
  kernel.InvalidateInode(node.nodeid);
}

Result<cache::ReadBuffer> SourceFs::ReadNode(uint64_t nodeid, uint64_t offset, size_t size) {
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  const auto seen = InodeTable::Observe(**inode);
  // As in Read(): the node is opened only if a chunk must come from the source, and its
  // O_PATH fd (the same inode) tells the identity. Without one, it is opened by name
  // now (OpenNode checks the name still means this node's file).
  const Inode& node = **inode;
  UniqueFd fd;
  cache::SourceFile file;
  int stat_fd = node.path_fd.get();
  if (stat_fd < 0) {
    auto opened = ReopenNode(node, O_RDONLY);
    if (!opened.ok()) return opened.status();
    fd = std::move(opened->first);
    stat_fd = file.fd = fd.get();
    file.id = opened->second;
  } else {
    auto st = cache::StatForIdentity(stat_fd);
    if (!st.ok()) return st.status();
    file.id = cache::SourceIdentity::FromStat(*st);
    file.open = [this, &node, &fd]() -> Result<int> {
      if (!fd) {
        auto opened = ReopenNode(node, O_RDONLY);
        if (!opened.ok()) return opened.status();
        fd = std::move(opened->first);
      }
      return fd.get();
    };
  }
  NoteDemandRead(node, offset);
  auto data = ReadToCurrentEnd(file, stat_fd, offset, size);
  if (data.ok()) {
    if (data->size < size) inodes_.NoteKernelAttrs(**inode, file.id, seen);  // the file's end
    CheckKernelCache(**inode, file.id, seen, Reply::kData, watcher_.load());
    if (SourceObserver* observer = observer_.load()) {
      observer->ReadAnswered(**inode, offset, data->size, file.id);
    }
  }
  return data;
}

Result<size_t> SourceFs::WriteNode(uint64_t nodeid, const char* data, size_t size,
                                   uint64_t offset, bool append) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("write"));
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  // O_APPEND for an append: a file marked append-only (chattr +a) takes nothing else.
  auto opened = ReopenNode(**inode, O_WRONLY | (append ? O_APPEND : 0));
  if (!opened.ok()) return opened.status();
  return WriteFd(opened->first.get(), append, **inode, nullptr, data, size, offset, append);
}

Status SourceFs::FsyncNode(uint64_t nodeid, bool datasync) {
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  if ((*inode)->is_dir) return Status::Ok();
  auto opened = ReopenNode(**inode, O_RDONLY);
  if (!opened.ok()) return opened.status();
  return FsyncFd(opened->first.get(), datasync);
}

Status SourceFs::Fsync(FileHandle& fh, bool datasync) {
  auto fd = fh.Fd();
  if (!fd.ok()) return fd.status();
  return FsyncFd(fd->get(), datasync);
}

// ---- directories ----

Result<std::unique_ptr<DirHandle>> SourceFs::OpenDir(uint64_t nodeid) {
  auto dir = FindDir(nodeid);
  if (!dir.ok()) return dir.status();
  // An O_PATH fd cannot be read; "." opened relative to it is the same directory.
  int fd = ::openat((*dir)->path_fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("opendir");
  DIR* d = ::fdopendir(fd);
  if (!d) {
    UniqueFd owned(fd);
    return Errno("fdopendir");
  }
  return std::make_unique<DirHandle>(*dir, d);
}

Status SourceFs::ReadDir(DirHandle& dh, off_t offset, bool plus, const DirEmitter& emit) {
  std::vector<prefetch::Prefetcher::Opened> listed;
  SourceObserver* observer = observer_.load();
  if (plus && observer != nullptr) observer->BeforeFileKnown(*dh.inode());
  Status status = ReadDirEntries(dh, offset, plus, emit, observer != nullptr ? &listed : nullptr);
  if (!listed.empty()) observer->FilesListed(listed);
  return status;
}

Status SourceFs::ReadDirEntries(DirHandle& dh, off_t offset, bool plus, const DirEmitter& emit,
                               std::vector<prefetch::Prefetcher::Opened>* listed) {
  MutexLock lock(dh.mutex_);
  std::optional<std::string> folder;  // the listed folder's path, once a file needs it
  if (offset != dh.position_) {
    ::seekdir(dh.dir_, offset);
    dh.position_ = offset;
  }
  const bool is_root = dh.inode_->nodeid == kRootNodeId;
  while (true) {
    errno = 0;
    struct dirent* de = ::readdir(dh.dir_);
    if (!de) {
      if (errno != 0) return Errno("readdir");
      return Status::Ok();
    }
    const off_t next = de->d_off;
    const std::string name = de->d_name;
    if (is_root && name == options_.hidden_root_name) {
      dh.position_ = next;
      continue;
    }
    Entry entry;
    const bool dot = name == "." || name == "..";
    if (plus && !dot) {
      auto looked_up = LookupIn(dh.inode_, name,
                                de->d_type == DT_REG ? std::optional<uint64_t>(de->d_ino) : std::nullopt);
      if (!looked_up.ok()) {
        // Gone between readdir and lookup: skip it, the listing is a snapshot anyway.
        dh.position_ = next;
        continue;
      }
      entry = *looked_up;
    } else {
      entry.attr.st_ino = de->d_ino;
      entry.attr.st_mode = static_cast<mode_t>(DTTOIF(de->d_type));
    }
    if (!emit(name, entry, next)) {
      if (plus && !dot) Forget(entry.nodeid, 1);
      // Rewind so the entry that did not fit comes first next time.
      ::seekdir(dh.dir_, dh.position_);
      return Status::Ok();
    }
    dh.position_ = next;
    if (listed != nullptr && plus && !dot && S_ISREG(entry.attr.st_mode)) {
      if (!folder) folder = RelativePath(*dh.inode_);
      listed->push_back({prefetch::FileKey{static_cast<uint64_t>(entry.attr.st_dev),
                                           static_cast<uint64_t>(entry.attr.st_ino)},
                         folder->empty() ? name : *folder + "/" + name});
    }
  }
}

Status SourceFs::FsyncDir(DirHandle& dh, bool datasync) {
  MutexLock lock(dh.mutex_);
  int fd = ::dirfd(dh.dir_);
  int rc = datasync ? ::fdatasync(fd) : ::fsync(fd);
  if (rc < 0) return Errno("fsyncdir");
  return Status::Ok();
}

Result<struct ::statvfs> SourceFs::StatFs() {
  struct ::statvfs sv {};
  if (::fstatvfs(inodes_.root()->path_fd.get(), &sv) < 0) return Errno("statfs");
  return sv;
}

// ---- xattrs ----

Result<std::string> SourceFs::GetXattr(uint64_t nodeid, const std::string& name, size_t size) {
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  auto path = ProcPath(**inode);
  if (!path.ok()) return path.status();
  if (size == 0) {  // the caller asks only for the length
    ssize_t n = ::lgetxattr(path->c_str(), name.c_str(), nullptr, 0);
    if (n < 0) return Errno(fmt::format("getxattr '{}'", name));
    return std::string(static_cast<size_t>(n), '\0');
  }
  std::string value(size, '\0');
  ssize_t n = ::lgetxattr(path->c_str(), name.c_str(), value.data(), size);
  if (n < 0) return Errno(fmt::format("getxattr '{}'", name));
  value.resize(static_cast<size_t>(n));
  return value;
}

Result<std::string> SourceFs::ListXattr(uint64_t nodeid, size_t size) {
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  auto path = ProcPath(**inode);
  if (!path.ok()) return path.status();
  if (size == 0) {  // the caller asks only for the length
    ssize_t n = ::llistxattr(path->c_str(), nullptr, 0);
    if (n < 0) return Errno("listxattr");
    return std::string(static_cast<size_t>(n), '\0');
  }
  std::string list(size, '\0');
  ssize_t n = ::llistxattr(path->c_str(), list.data(), size);
  if (n < 0) return Errno("listxattr");
  list.resize(static_cast<size_t>(n));
  return list;
}

Status SourceFs::SetXattr(uint64_t nodeid, const std::string& name, const std::string& value,
                          int flags) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("setxattr"));
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  auto path = ProcPath(**inode);
  if (!path.ok()) return path.status();
  MountChange change(inodes_, (*inode)->is_dir ? nullptr : inode->get(),  // moves the ctime
                     KernelLearns::kCtimeOnly);
  if (::lsetxattr(path->c_str(), name.c_str(), value.data(), value.size(), flags) < 0) {
    return Errno(fmt::format("setxattr '{}'", name));
  }
  if (auto id = IdentityNow(**inode)) change.Made(*id);
  return Status::Ok();
}

Status SourceFs::RemoveXattr(uint64_t nodeid, const std::string& name) {
  EPOCHFS_RETURN_IF_ERROR(RefuseIfReadOnly("removexattr"));
  auto inode = FindInode(nodeid);
  if (!inode.ok()) return inode.status();
  auto path = ProcPath(**inode);
  if (!path.ok()) return path.status();
  MountChange change(inodes_, (*inode)->is_dir ? nullptr : inode->get(),  // moves the ctime
                     KernelLearns::kCtimeOnly);
  if (::lremovexattr(path->c_str(), name.c_str()) < 0) {
    return Errno(fmt::format("removexattr '{}'", name));
  }
  if (auto id = IdentityNow(**inode)) change.Made(*id);
  return Status::Ok();
}

void SourceFs::VisitCounters(const SourceFs* fs, const CounterVisitor& visit) {
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kGauge = CounterKind::kGauge;
  uint64_t open = 0, max_open = 0, reopens = 0, checks = 0, relookups = 0, direct_fallbacks = 0,
           sizes_shown = 0, drops_deferred = 0, attrs_after_change = 0;
  if (fs) {
    open = fs->handle_fds_.open();
    max_open = fs->handle_fds_.max_open();
    reopens = fs->handle_fds_.reopens();
    checks = fs->open_checks_.load(std::memory_order_relaxed);
    relookups = fs->open_relookups_.load(std::memory_order_relaxed);
    direct_fallbacks = fs->open_direct_fallbacks_.load(std::memory_order_relaxed);
    sizes_shown = fs->open_sizes_shown_.load(std::memory_order_relaxed);
    drops_deferred = fs->open_drops_deferred_.load(std::memory_order_relaxed);
    attrs_after_change = fs->attrs_after_change_.load(std::memory_order_relaxed);
  }
  BackingFiles::VisitCounters(fs ? &fs->backing_files_ : nullptr, visit);
  IdleFiller::VisitCounters(fs ? fs->filler_.get() : nullptr, visit);
  visit(CounterInfo{"open_file_fds", "Source file descriptors held open.", kGauge}.Show(
            {.row = "source fds", .label = "", .of = "open_file_fds_max"}),
        open);
  visit(CounterInfo{"open_file_fds_max", "The limit on source file descriptors held by open files; beyond it, opens share fds and reopen.",
                    kGauge}
            .Show({.row = "source fds", .label = "limit"}),
        max_open);
  visit(CounterInfo{"open_file_fd_reopens", "Source files reopened after their fd was shared out.",
                    kCounter}
            .Show({.row = "source fds", .label = "reopened"}),
        reopens);
  visit(CounterInfo{"open_checks",
                    "Opens answered with a fresh stat of the source file, no open of it (open "
                    "mode: files the kernel had read; the source is opened at a READ).",
                    kCounter}
            .Show({.row = "source fds", .label = "opens checked only", .quiet = true}),
        checks);
  visit(CounterInfo{"open_relookups",
                    "Opens answered ESTALE so that the kernel looked the file up again (open mode: "
                    "it changed since).",
                    kCounter}
            .Show({.row = "source fds", .label = "re-looked-up", .quiet = true}),
        relookups);
  visit(CounterInfo{"open_direct_fallbacks",
                    "Opens that could not trust the kernel's size of a file changed underneath "
                    "and could not set it (it may have shrunk, another handle writes it, or its "
                    "last byte could not be read): read-only ones read with direct I/O, ones "
                    "for writing drop what the kernel holds of it.",
                    kCounter}
            .Show({.row = "source fds", .label = "direct I/O opens", .quiet = true}),
        direct_fallbacks);
  visit(CounterInfo{"open_sizes_shown",
                    "Read-only opens that could not trust the kernel's size of a file changed "
                    "underneath and set it, by storing the file's last byte into its pages.",
                    kCounter}
            .Show({.row = "source fds", .label = "sizes set", .quiet = true}),
        sizes_shown);
  visit(CounterInfo{"open_drops_deferred",
                    "Opens that found the kernel's pages older than a file open for writing "
                    "through the mount: read with direct I/O, the pages dropped at the last "
                    "writer's release.",
                    kCounter}
            .Show({.row = "source fds", .label = "drops deferred", .quiet = true}),
        drops_deferred);
  visit(CounterInfo{"attrs_after_change",
                    "Replies with a file's attributes (GETATTR, LOOKUP, listings) that found it "
                    "changed underneath since the kernel read its pages: open mode drops the "
                    "pages first, notify mode has the kernel refuse the attributes until the "
                    "watcher dropped them.",
                    kCounter}
            .Show({.row = "change watch", .label = "attributes held back", .quiet = true}),
        attrs_after_change);
}

}  // namespace epochfs::fs
