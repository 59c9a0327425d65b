#include "fs/inode_table.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include <vector>

namespace epochfs::fs {

bool TakeOpenOrder(Inode& node, OrderWait wait) {
  if (wait == OrderWait::kNoWait) return node.open_order.TryLock();
  node.open_order.Lock();
  return true;
}

namespace {
// Records `id` as the state of the file the kernel's pages of `inode` are of, at `now`
// (wall clock); `made`: a change the mount made itself. Under the table's mutex.
void RecordKernelCacheId(Inode& inode, const cache::SourceIdentity& id, int64_t now, bool made) {
  inode.kernel_cache_id = id;
  inode.kernel_cache_id_at_ns = now;
  inode.kernel_cache_id_written = made;
}
}  // namespace

InodeTable::InodeTable(UniqueFd root_fd, const struct ::stat& root_stat, uint64_t max_file_fds)
    : max_file_fds_(max_file_fds) {
  root_ = std::make_shared<Inode>();
  root_->nodeid = kRootNodeId;
  root_->dev = root_stat.st_dev;
  root_->ino = root_stat.st_ino;
  root_->is_dir = true;
  root_->path_fd = std::move(root_fd);
  root_->nlookup = 1;  // the kernel never forgets the root
  by_nodeid_[kRootNodeId] = root_;
  by_devino_[{root_->dev, root_->ino}] = kRootNodeId;
}

std::shared_ptr<Inode> InodeTable::Find(uint64_t nodeid) const {
  MutexLock lock(mutex_);
  auto it = by_nodeid_.find(nodeid);
  return it == by_nodeid_.end() ? nullptr : it->second;
}

void InodeTable::CountLookupLocked(Inode& inode, const std::shared_ptr<Inode>& parent,
                                   const std::string& name, const struct ::stat& st) {
  inode.nlookup++;
  // A file's node keeps the name it was made with (Remember).
  if (inode.is_dir && &inode != root_.get()) {
    inode.parent = parent;
    inode.name = name;
  }
  // While the mount changes the file, this reply is no news (NoteKernelAttrs).
  if (inode.changes_in_flight.load() == 0) {
    NoteKernelAttrsLocked(inode, cache::SourceIdentity::FromStat(st));
  }
}

bool InodeTable::RememberKnown(const std::shared_ptr<Inode>& known,
                               const std::shared_ptr<Inode>& parent, const std::string& name,
                               const struct ::stat& st) {
  MutexLock lock(mutex_);
  const DevIno key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  auto it = by_devino_.find(key);
  if (it == by_devino_.end() || it->second != known->nodeid) return false;
  CountLookupLocked(*known, parent, name, st);
  return true;
}

std::shared_ptr<Inode> InodeTable::Remember(const std::shared_ptr<Inode>& parent,
                                            const std::string& name, const struct ::stat& st,
                                            UniqueFd path_fd, bool old_name_gone) {
  MutexLock lock(mutex_);
  const DevIno key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  auto it = by_devino_.find(key);
  if (it != by_devino_.end() && old_name_gone && it->second != kRootNodeId) {
    // The caller checked the old name before taking this lock. A LOOKUP or READDIRPLUS
    // of this same name beside it may have made the new node meanwhile: that one is it.
    const Inode& known = *by_nodeid_.at(it->second);
    if (known.parent != parent || known.name != name) {
      it = by_devino_.end();  // a new node below; the old one keeps its dead name
    }
  }
  if (it != by_devino_.end()) {
    std::shared_ptr<Inode>& inode = by_nodeid_.at(it->second);
    // A directory found again under the same (dev, ino) but with the type changed cannot
    // happen without the inode being freed first, which the kernel would have noticed.
    CountLookupLocked(*inode, parent, name, st);
    return inode;
  }
  auto inode = std::make_shared<Inode>();
  inode->nodeid = next_nodeid_++;
  inode->dev = key.dev;
  inode->ino = key.ino;
  inode->is_dir = S_ISDIR(st.st_mode);
  // The node's own fd replaces the pin (closed under the lock: close() of an O_PATH fd
  // does no IO).
  if (pins_.erase(key) != 0) file_fds_--;
  if (!inode->is_dir) {
    if (file_fds_ < max_file_fds_ && path_fd) {
      file_fds_++;
    } else {
      path_fd.reset();
    }
  }
  inode->path_fd = std::move(path_fd);
  inode->parent = parent;
  inode->name = name;
  inode->nlookup = 1;
  if (auto made = made_recently_.find(key);
      !inode->is_dir && made != made_recently_.end() &&
      made->second.id == cache::SourceIdentity::FromStat(st)) {
    // The mount itself made the file as it is, just before, through a node the kernel
    // has since forgotten. The new node starts from that change, trusted as the mount's
    // own: without it the racily clean rule would drop the pages of a file only the mount
    // writes, and such a drop can race with its next write (see KernelCacheFollows).
    // Otherwise a new node has no identity yet; its first check records one.
    RecordKernelCacheId(*inode, made->second.id, cache::WallClockNs(), /*made=*/true);
  }
  NoteKernelAttrsLocked(*inode, cache::SourceIdentity::FromStat(st));
  by_nodeid_[inode->nodeid] = inode;
  by_devino_[key] = inode->nodeid;
  return inode;
}

std::shared_ptr<Inode> InodeTable::Forget(uint64_t nodeid, uint64_t n) {
  MutexLock lock(mutex_);
  if (nodeid == kRootNodeId) return nullptr;
  auto it = by_nodeid_.find(nodeid);
  if (it == by_nodeid_.end()) return nullptr;
  Inode& inode = *it->second;
  inode.nlookup = n >= inode.nlookup ? 0 : inode.nlookup - n;
  if (inode.nlookup > 0) return nullptr;
  auto dev_it = by_devino_.find({inode.dev, inode.ino});
  if (dev_it != by_devino_.end() && dev_it->second == nodeid) by_devino_.erase(dev_it);
  if (!inode.is_dir && inode.path_fd) file_fds_--;
  if (!inode.is_dir && inode.path_fd && pin_forgotten_.load(std::memory_order_relaxed) &&
      pins_.count({inode.dev, inode.ino}) == 0 && pins_.size() + 1 <= max_file_fds_ / 4 * 3 &&
      file_fds_ < max_file_fds_) {
    // The node's own fd may still be used by whoever holds the Inode: a copy is pinned.
    UniqueFd copy(::fcntl(inode.path_fd.get(), F_DUPFD_CLOEXEC, 0));
    if (copy) {
      pins_.emplace(DevIno{inode.dev, inode.ino}, std::make_shared<const UniqueFd>(std::move(copy)));
      file_fds_++;
    }
  }
  // Open file handles and children may still hold the Inode; it dies with the last one.
  std::shared_ptr<Inode> gone = std::move(it->second);
  by_nodeid_.erase(it);
  return gone;
}

std::shared_ptr<Inode> InodeTable::FindBySource(uint64_t dev, uint64_t ino) const {
  MutexLock lock(mutex_);
  auto it = by_devino_.find({dev, ino});
  return it == by_devino_.end() ? nullptr : by_nodeid_.at(it->second);
}

Location InodeTable::LocationOf(const Inode& inode) const {
  MutexLock lock(mutex_);
  return Location{inode.parent, inode.name};
}

std::string InodeTable::PathOf(const Inode& inode) const {
  std::vector<std::string> parts;
  Location loc = LocationOf(inode);
  while (loc.parent) {
    parts.push_back(std::move(loc.name));
    const Inode& parent = *loc.parent;
    if (parent.nodeid == kRootNodeId) break;
    loc = LocationOf(parent);
  }
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += *it;
  }
  return path;
}

void InodeTable::Move(const std::shared_ptr<Inode>& inode, const std::shared_ptr<Inode>& new_parent,
                      const std::string& new_name) {
  MutexLock lock(mutex_);
  inode->parent = new_parent;
  inode->name = new_name;
}

InodeTable::Observation InodeTable::Observe(const Inode& inode) {
  // changes_made first: a change that ends after this load is caught by the count, one
  // that began before it is caught by changes_in_flight.
  Observation seen;
  seen.changes_made = inode.changes_made.load();
  seen.during_change = inode.changes_in_flight.load() > 0;
  return seen;
}

bool InodeTable::Overlapped(const Inode& inode, Observation seen) const {
  return seen.during_change || inode.changes_in_flight.load() > 0 ||
         inode.changes_made.load() != seen.changes_made;
}

int64_t InodeTable::RacilyCleanUntil(const cache::SourceIdentity& id) {
  return id.ctime_ns + cache::kRacilyCleanNs + 1'000'000;
}

bool InodeTable::KernelHasRead(const Inode& inode) const {
  MutexLock lock(mutex_);
  return inode.kernel_cache_id.has_value();
}

InodeTable::CacheMatch InodeTable::SwapKernelCacheId(Inode& inode,
                                                     const cache::SourceIdentity& id,
                                                     Observation seen, bool can_defer,
                                                     bool drop_later) const {
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  if (Overlapped(inode, seen)) return CacheMatch::kSame;
  const std::optional<cache::SourceIdentity> held = inode.kernel_cache_id;
  const CacheMatch match = SwapKernelCacheIdLocked(inode, id, now, can_defer);
  if (match == CacheMatch::kChanged && drop_later && held) {
    // The pages may be of any state since the last drop: their zero-filled tails begin
    // at no more than the smallest size recorded meanwhile.
    const bool none_pending =
        inode.kernel_drops_answered.load() >= inode.kernel_drops_asked.load();
    inode.size_before_drop = none_pending ? held->size : std::min(inode.size_before_drop,
                                                                  held->size);
    inode.kernel_drops_asked++;
  }
  return match;
}

bool InodeTable::RefusesSize(const Inode& inode, uint64_t size) const {
  // Nothing pending, the common case, needs no lock: an ask is counted under it in the
  // same step as its record, so a caller whose SwapKernelCacheId met that record sees it.
  if (inode.kernel_drops_answered.load() >= inode.kernel_drops_asked.load()) return false;
  MutexLock lock(mutex_);
  return inode.kernel_drops_answered.load() < inode.kernel_drops_asked.load() &&
         size > inode.size_before_drop;
}

InodeTable::CacheMatch InodeTable::SwapKernelCacheIdLocked(Inode& inode,
                                                           const cache::SourceIdentity& id,
                                                           int64_t now, bool can_defer) const {
  // A recent identity may hide a second change within its timestamp tick. One drop of
  // the pages once that window has passed covers every page read until then; the
  // identity counts as settled from that drop on, so the observations in between drop
  // nothing (each drop is a refetch, and a refetch is another observation).
  auto defer = [&] {
    inode.kernel_cache_id_at_ns = RacilyCleanUntil(id);
    return CacheMatch::kRecent;
  };
  const bool recent = now <= id.ctime_ns + cache::kRacilyCleanNs;
  if (!inode.kernel_cache_id) {
    RecordKernelCacheId(inode, id, now, /*made=*/false);
    return can_defer && recent ? defer() : CacheMatch::kUnknown;
  }
  if (id.ctime_ns < inode.kernel_cache_id->ctime_ns) {
    // Taken before the identity already recorded: old news, not a change.
    return CacheMatch::kSame;
  }
  if (*inode.kernel_cache_id == id) {
    // The same identity again: keep when it was first recorded (what "settled" is
    // measured against) and whether the mount made it.
    const bool settled = id.ctime_ns + cache::kRacilyCleanNs < inode.kernel_cache_id_at_ns;
    if (settled || inode.kernel_cache_id_written) return CacheMatch::kSame;
    if (can_defer && recent) return defer();
    inode.kernel_cache_id_at_ns = now;  // recent and not ours: it settles from now on
    return CacheMatch::kChanged;
  }
  RecordKernelCacheId(inode, id, now, /*made=*/false);
  return CacheMatch::kChanged;
}

bool InodeTable::SwapKernelCacheSize(Inode& inode, const cache::SourceIdentity& id,
                                     Observation seen) {
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  if (Overlapped(inode, seen) || !inode.kernel_cache_id) return false;
  const cache::SourceIdentity& held = *inode.kernel_cache_id;
  if (id.size <= held.size || id.ctime_ns < held.ctime_ns) return false;
  RecordKernelCacheId(inode, id, now, /*made=*/false);
  return true;
}

bool InodeTable::KernelCacheFollows(const Inode& inode, const cache::SourceIdentity& id,
                                    Observation seen) const {
  MutexLock lock(mutex_);
  if (Overlapped(inode, seen)) return true;
  if (!inode.kernel_cache_id) return false;
  // Older than what the kernel holds: the watcher's stat of an event it reads late,
  // after later changes through the mount.
  if (id.ctime_ns < inode.kernel_cache_id->ctime_ns) return true;
  // Equal: the mount's own, or settled when it was recorded. A recent one may hide a
  // second change within the same timestamp tick (the racily clean rule, as in
  // SwapKernelCacheId), which is the very change this event may be reporting.
  return *inode.kernel_cache_id == id &&
         (inode.kernel_cache_id_written ||
          id.ctime_ns + cache::kRacilyCleanNs < inode.kernel_cache_id_at_ns);
}

void InodeTable::NoteKernelAttrsLocked(Inode& inode, const cache::SourceIdentity& id) {
  using KernelAttrs = Inode::KernelAttrs;
  inode.kernel_sizes_max = std::max(inode.kernel_sizes_max, id.size);
  if (cache::WallClockNs() < inode.kernel_attrs_dropped_at_ns + kDroppedReplyWindowNs) {
    // Perhaps the reply to a request sent before the drop, which the kernel discards
    // (DropKernelAttrs). Nothing since the drop is trusted; a result of the mount's own
    // change recorded meanwhile is, unless this reply disagrees with it.
    if (inode.kernel_attrs == KernelAttrs::kOne && !(inode.kernel_attr_id == id)) {
      inode.kernel_attrs = KernelAttrs::kMixed;
    }
    return;
  }
  switch (inode.kernel_attrs) {
    case KernelAttrs::kNone:
    case KernelAttrs::kDropped:
      inode.kernel_attrs = KernelAttrs::kOne;
      inode.kernel_attr_id = id;
      inode.kernel_attr_made = false;
      inode.kernel_sizes_max = id.size;
      break;
    case KernelAttrs::kOne:
      if (inode.kernel_attr_id == id) break;
      // Stat'ed before the mount's own write or SETATTR that is recorded: its request was
      // sent before the kernel took that result, which it then discards or overrides.
      if (inode.kernel_attr_made && id.ctime_ns < inode.kernel_attr_id.ctime_ns) break;
      inode.kernel_attrs = KernelAttrs::kMixed;
      break;
    case KernelAttrs::kMixed:
      break;
  }
}

void InodeTable::NoteKernelAttrs(Inode& inode, const cache::SourceIdentity& id,
                                 Observation seen) {
  MutexLock lock(mutex_);
  if (Overlapped(inode, seen)) return;
  NoteKernelAttrsLocked(inode, id);
}

void InodeTable::DropKernelAttrs(Inode& inode) const {
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  inode.kernel_attrs = Inode::KernelAttrs::kDropped;
  inode.kernel_attrs_dropped_at_ns = now;
}

bool InodeTable::KernelAttrsShow(const Inode& inode, const cache::SourceIdentity& id,
                                 Observation seen) const {
  MutexLock lock(mutex_);
  if (Overlapped(inode, seen)) return true;  // the kernel follows the mount's changes
  switch (inode.kernel_attrs) {
    case Inode::KernelAttrs::kOne:
      // An identity older than the kernel's: the file changed after this observation.
      return inode.kernel_attr_id == id || id.ctime_ns < inode.kernel_attr_id.ctime_ns;
    case Inode::KernelAttrs::kNone:
    case Inode::KernelAttrs::kDropped:
    case Inode::KernelAttrs::kMixed:
      return false;
  }
  return false;
}

bool InodeTable::MayShowSize(const Inode& inode, uint64_t size) const {
  MutexLock lock(mutex_);
  return size >= inode.kernel_sizes_max;
}

void InodeTable::NoteSizeShown(Inode& inode, uint64_t size) const {
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  inode.kernel_sizes_max = std::max(inode.kernel_sizes_max, size);
  inode.kernel_attrs_dropped_at_ns = now;
}

bool InodeTable::MountChangedSince(const Inode& inode, Observation seen) const {
  MutexLock lock(mutex_);
  return Overlapped(inode, seen);
}

bool InodeTable::KernelAttrsDropped(const Inode& inode) const {
  MutexLock lock(mutex_);
  return inode.kernel_attrs == Inode::KernelAttrs::kDropped;
}

std::optional<cache::SourceIdentity> InodeTable::KernelAttrId(const Inode& inode) const {
  MutexLock lock(mutex_);
  if (inode.kernel_attrs != Inode::KernelAttrs::kOne) return std::nullopt;
  return inode.kernel_attr_id;
}

bool InodeTable::RelookupPending(const Inode& inode) const {
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  return inode.relookup_asked_at_ns != 0 && now - inode.relookup_asked_at_ns < kRelookupWindowNs;
}

bool InodeTable::MayAskRelookup(Inode& inode) {
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  if (inode.relookup_asked_at_ns != 0 && now - inode.relookup_asked_at_ns < kRelookupWindowNs) {
    return false;
  }
  inode.relookup_asked_at_ns = now;
  return true;
}

void InodeTable::EndMountChange(Inode& inode, const std::optional<cache::SourceIdentity>& made,
                                KernelLearns learns) {
  // A write or truncate may leave a file larger than the pages the kernel holds.
  inode.kernel_pages.Dropped();
  const int64_t now = cache::WallClockNs();
  MutexLock lock(mutex_);
  // Without a result (the change failed, or the stat after it did) the recorded identity
  // stays: the next observation compares with it.
  if (made) inode.kernel_sizes_max = std::max(inode.kernel_sizes_max, made->size);
  if (made && (!inode.kernel_cache_id || made->ctime_ns >= inode.kernel_cache_id->ctime_ns)) {
    // Concurrent changes end in any order; the newest identity is the file's.
    RecordKernelCacheId(inode, *made, now, /*made=*/true);
    RememberMadeLocked(DevIno{inode.dev, inode.ino}, *made, now);
  }
  if (made && learns == KernelLearns::kCtimeOnly) {
    // The kernel keeps the size it showed: only a record of the same size and mtime (the
    // file as it was, its ctime moved) stays right.
    if (inode.kernel_attrs == Inode::KernelAttrs::kOne && made->size == inode.kernel_attr_id.size &&
        made->mtime_ns == inode.kernel_attr_id.mtime_ns &&
        made->ctime_ns >= inode.kernel_attr_id.ctime_ns) {
      inode.kernel_attr_id = *made;
    }
  } else if (made) {
    // The kernel takes the result itself once this ends, and discards the replies to
    // requests sent before. One recorded newer than it (a concurrent change of the mount's
    // that ended first, or a reply computed since) may be the kernel's too.
    if (inode.kernel_attrs == Inode::KernelAttrs::kOne &&
        made->ctime_ns < inode.kernel_attr_id.ctime_ns) {
      inode.kernel_attrs = Inode::KernelAttrs::kMixed;
    } else {
      inode.kernel_attrs = Inode::KernelAttrs::kOne;
      inode.kernel_attr_id = *made;
      inode.kernel_attr_made = true;
    }
  }
  inode.changes_made.fetch_add(1);
}

void InodeTable::RememberMadeLocked(const DevIno& key, const cache::SourceIdentity& id,
                                    int64_t now) {
  // Only a short memory is needed: an identity older than the racily clean window is
  // trusted as settled anyway. Trimmed when it grows, so it stays small.
  if (made_recently_.size() >= 1024) {
    std::erase_if(made_recently_, [&](const auto& entry) {
      return entry.second.at_ns + kMadeMemoryNs < now;
    });
  }
  made_recently_[key] = Made{id, now};
}

MountChange::MountChange(InodeTable& table, Inode* inode, KernelLearns learns)
    : table_(table), inode_(inode), learns_(learns) {
  if (inode_) inode_->changes_in_flight.fetch_add(1);
}

MountChange::~MountChange() {
  if (!inode_) return;
  // Counted as made before it stops being in flight: an observation never sees neither.
  table_.EndMountChange(*inode_, made_, learns_);
  inode_->changes_in_flight.fetch_sub(1);
}

bool InodeTable::Pin(const struct ::stat& st, UniqueFd fd) {
  const DevIno key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  MutexLock lock(mutex_);
  if (by_devino_.count(key) != 0 || pins_.count(key) != 0) return true;
  if (pins_.size() + 1 > max_file_fds_ / 4 * 3 || file_fds_ >= max_file_fds_) return false;
  pins_.emplace(key, std::make_shared<const UniqueFd>(std::move(fd)));
  file_fds_++;
  return true;
}

size_t InodeTable::ReleasePins(bool all) {
  std::vector<std::pair<DevIno, std::shared_ptr<const UniqueFd>>> held;
  {
    MutexLock lock(mutex_);
    held.assign(pins_.begin(), pins_.end());
  }
  std::vector<std::shared_ptr<const UniqueFd>> closing;  // closed after the lock
  std::erase_if(held, [&](const auto& pin) {
    struct ::stat st {};
    const bool gone = all || ::fstat(pin.second->get(), &st) != 0 || st.st_nlink == 0;
    return !gone;
  });
  MutexLock lock(mutex_);
  for (auto& [key, fd] : held) {
    auto it = pins_.find(key);
    if (it == pins_.end() || it->second != fd) continue;  // a lookup took it meanwhile
    closing.push_back(std::move(it->second));
    pins_.erase(it);
    file_fds_--;
  }
  return pins_.size();
}

size_t InodeTable::pins() const {
  MutexLock lock(mutex_);
  return pins_.size();
}

uint64_t InodeTable::file_fds() const {
  MutexLock lock(mutex_);
  return file_fds_;
}

size_t InodeTable::size() const {
  MutexLock lock(mutex_);
  return by_nodeid_.size();
}

}  // namespace epochfs::fs
