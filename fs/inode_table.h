// InodeTable: the one owner of FUSE node ids and their lookup counts.
//
// A FUSE node id names one source object (dev, ino) for as long as the kernel holds a
// lookup reference on it. Node ids come from a counter and are never reused or derived
// from pointers. Every node keeps an O_PATH fd of its source object: a directory's is
// the base of the `*at()` calls beneath it, which is what lets epochfs be mounted over
// the source folder itself; a file's reaches that very inode even after it was
// unlinked or renamed over, so a reader that opened it first keeps reading it. What a
// *name* means now is answered by resolving (parent directory, name) again and
// checking (dev, ino): a file renamed over or deleted in the source is noticed instead
// of served stale. A child holds a shared_ptr to its parent, so the parent's fd stays
// open while any child needs it.
//
// Thread-safety: all methods are thread-safe. `mutex_` guards the maps and every
// Inode's mutable fields (parent, name, nlookup, kernel_cache_id); Inode::path_fd and
// the (dev, ino) key are immutable after creation and read without the lock.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "cache/cache.h"

namespace epochfs::fs {

inline constexpr uint64_t kRootNodeId = 1;  // FUSE_ROOT_ID

// What the kernel's page cache holds of a file, as far as the daemon saw it fill. The
// belief is kernel_cache/residency.h's (which alone reads it); it lives on the node so
// that a READ updates it without a lookup. fs ends it whenever the mount drops the
// file's pages. Atomics: written by READs, pushes and drops without the table's lock.
struct KernelPagesRecord {
  std::atomic<uint64_t> read_to{0};  // READ replies since the last drop cover [0, this)
  // 1 + Residency's delivery clock when the kernel got the whole file; 0: not known whole.
  std::atomic<uint64_t> whole_at{0};
  // The kernel's pages of the file were dropped, or may have been.
  void Dropped() {
    whole_at.store(0, std::memory_order_relaxed);
    read_to.store(0, std::memory_order_relaxed);
  }
};

// Whether a caller may wait for a node's open_order. A FUSE worker may not (kNoWait):
// the holder may be dropping or storing the node's pages, which waits for any page a
// READ in flight holds locked, and only a free worker answers that READ. A call made
// with kNoWait that finds the lock held returns kBusy, and the request is made again
// from the waiting room (fs/waiting_room.h), whose threads may wait.
enum class OrderWait { kWait, kNoWait };

struct Inode {
  uint64_t nodeid = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool is_dir = false;
  UniqueFd path_fd;  // O_PATH fd of the source object (invalid if it could not be taken)
  // Open file handles ("open" mode): while there are any, the node's attributes are its
  // inode's even if its name now means something else (fstat of an unlinked open file).
  std::atomic<int> open_handles{0};
  // Of those, the ones open for writing: changed under open_order (WriteFence).
  std::atomic<int> open_for_writing{0};
  // Opens and releases of passthrough writers (fs/passthrough.h), whose writes bypass the
  // daemon: a background fill that saw this move may have read older bytes.
  std::atomic<uint64_t> passthrough_writes{0};
  // Changes the mount is making to the source file now (see MountChange), and how many
  // it has finished: the kernel follows such changes itself (writes are write-through),
  // so an identity observed while one was under way explains nothing, and dropping the
  // kernel's pages for it would only race with the next write.
  std::atomic<int> changes_in_flight{0};
  std::atomic<uint64_t> changes_made{0};
  // Held by an open while it compares the file's identity with the kernel's pages and
  // drops them ("open" mode), and by whoever else drops or stores them. A FUSE worker
  // never waits for it (OrderWait).
  Mutex open_order;
  // The kernel's pages may not be the file's, and could not be dropped then because the
  // file was open for writing through the mount (SourceFs::OpenChecked, an append that
  // landed elsewhere: SourceFs::WriteFd): the last writer's release drops them. Set
  // anywhere; cleared under open_order.
  std::atomic<bool> pages_drop_owed{false};

  // Guarded by InodeTable::mutex_ (of the table that holds this node). Not written as
  // GUARDED_BY: an Inode does not know its table, so the analysis has no expression
  // that names that mutex.
  std::shared_ptr<Inode> parent;  // null for the root
  std::string name;  // a file: made with, or renamed to through the mount (Remember)
  uint64_t nlookup = 0;
  // Identity of the source file the kernel's page cache of this node holds: the latest a
  // check, an open or a change by the mount recorded (or, for a node made right after the
  // mount changed the file through a forgotten node, that change). An open that sees the
  // same identity keeps the kernel's cache.
  std::optional<cache::SourceIdentity> kernel_cache_id;
  int64_t kernel_cache_id_at_ns = 0;  // wall clock when kernel_cache_id was recorded
  bool kernel_cache_id_written = false;  // left by a MountChange
  // What the kernel's attributes of this node may show. In "open" mode the kernel keeps
  // names and attributes between opens; an open that finds the file changed since makes
  // the kernel look it up again first (SourceFs::Open), so that nothing is read with an
  // older file's size. Every reply that carries attributes counts (LOOKUP, CREATE,
  // READDIRPLUS, GETATTR, and a short READ, which tells the kernel where the file ends):
  // the kernel applies them in an order of its own, discarding a reply to a request sent
  // before another reply was applied, so the one it keeps may be the one computed first.
  // kOne: every reply since the last drop showed `kernel_attr_id`. kMixed: they
  // disagreed. kDropped: the kernel's attributes were dropped (InvalidateInode) and no
  // reply has been recorded since that the kernel surely applied (DropKernelAttrs); one
  // stat'ed before an open's check may still be recorded, and applied, after it, so
  // nothing is trusted until one is. A change by the
  // mount whose result the kernel takes (a write, a SETATTR) leaves kOne with that result
  // (`kernel_attr_made`): it discards the replies to requests sent before.
  enum class KernelAttrs : uint8_t { kNone, kDropped, kOne, kMixed };
  KernelAttrs kernel_attrs = KernelAttrs::kNone;
  cache::SourceIdentity kernel_attr_id;  // with kOne
  bool kernel_attr_made = false;         // kernel_attr_id is a change by the mount
  int64_t kernel_attrs_dropped_at_ns = 0;  // wall clock of the last DropKernelAttrs
  // The largest size a reply, a store or a change by the mount gave the kernel since it
  // last surely held one (kOne recorded): the kernel's size is no larger (MayShowSize).
  uint64_t kernel_sizes_max = 0;
  int64_t relookup_asked_at_ns = 0;  // wall clock of the last such ESTALE

  KernelPagesRecord kernel_pages;
  // Drops of the kernel's pages asked of the watcher's thread after an identity check
  // recorded a change (SwapKernelCacheId with `drop_later`), and how many of those asks
  // its drops have answered. While fewer, the kernel's pages may be older than the
  // identity recorded, and the kernel is made to refuse the attributes of replies
  // (SourceFs::CheckKernelCache).
  std::atomic<uint64_t> kernel_drops_asked{0};
  std::atomic<uint64_t> kernel_drops_answered{0};
  // While asks are pending, the smallest size the kernel's pages may have been read at
  // (guarded by the table's mutex, as kernel_cache_id): a reply with a larger size is
  // refused, a smaller one (a truncate underneath) shows no zeros and goes through.
  uint64_t size_before_drop = 0;
  // Whether a writer may have the file open through the mount: it wrote through it
  // (SourceFs::WriteFd), or the fence refused a drop for it (ChangeWatcher::DropFenced);
  // false again once the fence let a drop through. Replies then give the kernel the
  // file's attributes even while a drop is asked: its size is the writer's too, and
  // refused, the writer's appends would go where the kernel believes the file ends.
  std::atomic<bool> maybe_open_for_writing{false};
};

// Takes `node`'s open_order; with kNoWait only if no one holds it (false: not taken).
bool TakeOpenOrder(Inode& node, OrderWait wait) TRY_ACQUIRE(true, node.open_order);

// Where a non-directory lives: a parent directory fd (kept open by `parent`) and a name.
struct Location {
  std::shared_ptr<Inode> parent;
  std::string name;
  int dir_fd() const { return parent->path_fd.get(); }
};

// What the kernel learns of the result of a change the mount makes (MountChange). A
// write or a SETATTR gives it the file's new attributes itself (and it discards replies
// to requests sent before); a new name, a removed one or an xattr only moves the ctime
// it shows, and it keeps the size its attributes held.
enum class KernelLearns { kResult, kCtimeOnly };

class InodeTable {
 public:
  // The root is (dev, ino) of `root_fd`, an O_PATH fd of the source directory. At most
  // `max_file_fds` non-directory nodes keep their O_PATH fd (the fd limit is finite);
  // beyond that a file node is reached by name only. Directories always keep theirs.
  InodeTable(UniqueFd root_fd, const struct ::stat& root_stat,
             uint64_t max_file_fds = UINT64_MAX);

  std::shared_ptr<Inode> Find(uint64_t nodeid) const;
  // The node of source object (dev, ino), if the kernel knows it.
  std::shared_ptr<Inode> FindBySource(uint64_t dev, uint64_t ino) const;
  std::shared_ptr<Inode> root() const { return root_; }

  // Records a lookup reference on the object `st` found as `name` in `parent`, creating
  // its node on first sight. `path_fd` is the object's O_PATH fd (kept only if the
  // node is new). Records `st` as the attributes the kernel gets (the LOOKUP or CREATE
  // reply about to be sent carries them): under the same lock, so that no thread finds
  // the node without them (a push would be refused for a file the kernel is about to
  // know).
  //
  // A directory's node moves to `name`. A file's node keeps the name it was made with
  // (renames through the mount move it: Move), which is the name it is opened by
  // (SourceFs::OpenNode). A lookup by another name must not move it: a hard link's, or
  // a name that a rename underneath ended right after the lookup's stat (a listing's
  // "x.tmp", renamed over "x"), after which every open of the node would answer ESTALE,
  // and the kernel's one retry could find the node moved again by the next such lookup.
  //
  // `old_name_gone`: the caller found that the name the object's node is known
  // by no longer names it (renamed in the source). The object then gets a new node,
  // and the old one stays bound to its old, dead name until the kernel forgets it: a
  // path the kernel still caches under the old name then answers ESTALE instead of
  // quietly reaching the object under its new name (close-to-open by name).
  std::shared_ptr<Inode> Remember(const std::shared_ptr<Inode>& parent, const std::string& name,
                                  const struct ::stat& st, UniqueFd path_fd,
                                  bool old_name_gone = false);
  // Remember for a node the caller found by `st`'s (dev, ino) and whose name is not dead
  // (a listing again): counts the lookup and records name and attributes as Remember
  // does, if `known` is still that (dev, ino)'s node. False, with nothing changed, if the
  // kernel forgot it meanwhile: the caller then makes a node the long way.
  bool RememberKnown(const std::shared_ptr<Inode>& known, const std::shared_ptr<Inode>& parent,
                     const std::string& name, const struct ::stat& st);

  // Drops `n` lookup references; the node goes away at zero (the root never does), and
  // is then returned so the caller can let go of what it holds for it.
  std::shared_ptr<Inode> Forget(uint64_t nodeid, uint64_t n);

  // The current location of a non-root node.
  Location LocationOf(const Inode& inode) const;
  // The node's path relative to the root, by the names it is known by now ("" for the
  // root).
  std::string PathOf(const Inode& inode) const;

  // After a rename in the source: the node now lives at (new_parent, new_name).
  void Move(const std::shared_ptr<Inode>& inode, const std::shared_ptr<Inode>& new_parent,
            const std::string& new_name);

  // An observation of a file's identity is ordered against the mount's own changes to
  // it: take an Observation *before* the stat whose identity is then compared. If a
  // MountChange was under way or ended in between, the stat may show the file before,
  // during or after that change, and it is no news: the kernel follows the mount's
  // changes itself. (Timestamps cannot order them: two changes within one tick of a
  // coarse clock leave the same ctime.)
  struct Observation {
    uint64_t changes_made = 0;
    bool during_change = false;
  };
  static Observation Observe(const Inode& inode);

  // Compares `id`, observed as `seen`, with the identity the kernel's cached pages of
  // `inode` were read with, and records `id` as the new one.
  // kRecent (only with `can_defer`): the identity recorded, or met again, is recent and
  // not the mount's; the caller drops the kernel's pages once, at RacilyCleanUntil(id),
  // and until then the identity counts as the same.
  enum class CacheMatch { kSame, kChanged, kUnknown, kRecent };
  // An observation that overlapped a change by the mount counts as kSame and records
  // nothing. An equal identity counts only if the file had not changed shortly before
  // it was recorded (git's "racily clean" rule): a change in the same tick of a coarse
  // timestamp clock leaves size, mtime and ctime as they were. An identity older (by
  // ctime) than the one recorded is a late observation, not a change: kSame, and the
  // recorded one stays. An identity the mount's own change left is trusted even if
  // recent: the kernel's pages hold that change. (What that trust misses: a writer
  // underneath changing the same file within the same timestamp tick without changing
  // its size.)
  // With `drop_later`, a kChanged also counts one in Inode::kernel_drops_asked, in the
  // same step as the record (the caller has the watcher drop the pages).
  // Const: it changes the node, not the table (as DropKernelAttrs).
  CacheMatch SwapKernelCacheId(Inode& inode, const cache::SourceIdentity& id, Observation seen,
                               bool can_defer = false, bool drop_later = false) const;
  // Records `id` (observed as `seen`) and returns true when the kernel's pages of `inode`
  // were read from the file at a smaller size, and `id` is newer: a reply that tells the
  // kernel the larger size must not meet those pages (their old last page is zero-filled
  // past the old end). Nothing else counts here: a smaller size shows no zeros (the
  // kernel cuts its pages there), an identity met again while it is recent
  // (SwapKernelCacheId's racily clean rule) is for an open to decide, and each drop here
  // makes the kernel refuse the very reply its read waits for.
  bool SwapKernelCacheSize(Inode& inode, const cache::SourceIdentity& id, Observation seen);
  // Whether a reply telling the kernel `size` for `inode` must be refused: a drop asked
  // (SwapKernelCacheId with `drop_later`) is still pending, and `size` is larger than
  // the kernel's pages may have been read at.
  bool RefusesSize(const Inode& inode, uint64_t size) const;
  // When the racily clean window of `id` has passed, wall clock.
  static int64_t RacilyCleanUntil(const cache::SourceIdentity& id);
  // Whether the kernel's pages of `inode` are those of the file as `id` (observed as
  // `seen`) says: the change was made through the mount, overlapped one, or is the
  // settled identity already recorded (the same racily clean rule as above). Dropping the
  // pages then would only race with the write that keeps them current: the kernel
  // copies a write into its up-to-date pages before the WRITE reaches the daemon, and
  // a page dropped and read again in between holds the old bytes for good.
  bool KernelCacheFollows(const Inode& inode, const cache::SourceIdentity& id,
                          Observation seen) const;

  // Whether the kernel may hold pages of `inode`: an identity of them is recorded (a
  // READ or a push filled them, or an open kept them).
  bool KernelHasRead(const Inode& inode) const;

  // Whether the kernel's attributes of `inode` show the file as `id` (observed as `seen`)
  // says, or a newer state: then the size it reads with is right. False when replies
  // that may still be the kernel's disagree, or none was recorded since a drop (see
  // Inode::kernel_attrs).
  bool KernelAttrsShow(const Inode& inode, const cache::SourceIdentity& id,
                       Observation seen) const;
  // Whether the kernel's attributes of `inode` were dropped and no reply was recorded
  // since (KernelAttrsShow is false then).
  bool KernelAttrsDropped(const Inode& inode) const;
  // The identity the kernel's attributes of `inode` show, if every reply since their
  // last drop (or the mount's own change) agrees on one.
  std::optional<cache::SourceIdentity> KernelAttrId(const Inode& inode) const;
  // Records a reply about to be sent that carries attributes of `inode` as `id` (observed
  // as `seen`) shows them (Remember records LOOKUP, CREATE and READDIRPLUS replies
  // itself). A reply whose observation overlapped a change by the mount is no news: a
  // write or SETATTR is the kernel's own once it ends (it discards the replies to
  // requests sent before, or takes the larger size and asks again), and the other
  // changes leave the size as it was.
  void NoteKernelAttrs(Inode& inode, const cache::SourceIdentity& id, Observation seen);
  // Records that the kernel's attributes of `inode` are about to be dropped: call it
  // before InvalidateInode. The kernel then discards the reply to every LOOKUP, GETATTR
  // or READ it sent before the drop, however late that reply is computed: it compares the
  // attributes' version it read when it sent the request. A reader whose read past the
  // old size waited for such a GETATTR reads with the old size (an early end of file).
  // The daemon sees when a request arrives, not when it was sent, so a reply recorded
  // within kDroppedReplyWindowNs of a drop is not trusted (NoteKernelAttrs). Const: it
  // changes the node, not the table.
  void DropKernelAttrs(Inode& inode) const;
  // Far longer than a request waits between the kernel's send and the daemon's reply,
  // and short enough that only files changed within a second are opened without trusting
  // the kernel's size (such an open sets it: SourceFs::ShowSizeToKernel).
  static constexpr int64_t kDroppedReplyWindowNs = 1'000'000'000;
  // Whether storing `size` can make the kernel's size of `inode` exactly `size`: a store
  // only grows it, so no reply since the kernel last surely held a size may have told it
  // a larger one (a truncate underneath needs direct I/O instead).
  bool MayShowSize(const Inode& inode, uint64_t size) const;
  // Records a store that set the kernel's size of `inode` to at least `size`: the kernel
  // refused the replies to requests sent before it, as after a drop.
  void NoteSizeShown(Inode& inode, uint64_t size) const;
  // Whether a change by the mount (a write, a SETATTR) began or ended since `seen`.
  bool MountChangedSince(const Inode& inode, Observation seen) const;
  // How long after an open answered ESTALE (to refresh the kernel's attributes) another
  // open of the node asks no ESTALE (the kernel retries only once; it sets the size or
  // reads with direct I/O instead), and only such opens drop the node's attributes
  // (RelookupPending).
  static constexpr int64_t kRelookupWindowNs = 100'000'000;
  // Whether an open may answer ESTALE to have the kernel look `inode` up again: not if
  // it did so within the last kRelookupWindowNs (the kernel retries an open once; a file
  // changed again in between must not turn into an error). Records the answer.
  bool MayAskRelookup(Inode& inode);
  // Whether an ESTALE relookup was asked for `inode` within kRelookupWindowNs: its LOOKUP
  // may still be on its way, and a drop of the node's attributes (which moves their
  // version on) would make the kernel discard that reply and ask again: a round trip.
  bool RelookupPending(const Inode& inode) const;

  // Pins: O_PATH fds of source files the kernel does not know yet, held so that their
  // dentries and inodes stay in memory until it looks them up (fs/metadata_warmup.h).
  // A pin counts against the file fd budget, and is closed the moment the file's node
  // is created: the node holds its own fd from then on. Pin() takes `fd` of the object
  // `st`; it refuses (returns false, closing `fd`) once pins would hold more than 3/4
  // of the budget, which leaves fds for the nodes of files nobody pinned. An object the
  // kernel already knows is not pinned (true).
  bool Pin(const struct ::stat& st, UniqueFd fd);
  // Closes the pins of files that have no name left (deleted underneath: a pin must
  // not keep their space), or every pin with `all`. Returns how many are left.
  size_t ReleasePins(bool all);
  size_t pins() const;
  // While set (the warm-up holds its pins), a file node the kernel forgets leaves a pin
  // of its object behind (a dup of its fd, within the same budget): its metadata stays
  // in memory until the next LOOKUP, as the warm-up's pin kept it until the first. The
  // kernel forgets nodes it learnt early (the kernel listing at mount: READDIRPLUS),
  // under memory pressure or a drop_caches, and the LOOKUP that follows would otherwise
  // read the source's metadata from disk again, which a slow source pays for with much
  // of a restarted epoch's speed (docs/benchmarks.md, "Figures behind design choices").
  void SetPinForgotten(bool pin) { pin_forgotten_.store(pin, std::memory_order_relaxed); }

  size_t size() const;
  uint64_t file_fds() const;  // file nodes' fds and pins

 private:
  friend class MountChange;
  // Reads only atomics, but under mutex_ so that it is ordered with the
  // kernel_cache_id it qualifies.
  bool Overlapped(const Inode& inode, Observation seen) const REQUIRES(mutex_);
  // Ends a MountChange: records `made`, if known, as the identity the kernel's pages hold.
  void EndMountChange(Inode& inode, const std::optional<cache::SourceIdentity>& made,
                      KernelLearns learns);

  struct DevIno {
    uint64_t dev, ino;
    bool operator==(const DevIno&) const = default;
  };
  struct DevInoHash {
    size_t operator()(const DevIno& k) const { return k.ino * 0x9E3779B97F4A7C15ull ^ k.dev; }
  };
  // The identities the mount's own changes left, per source object, for a while: a node
  // made for the object after the kernel forgot the one that changed it starts from there.
  struct Made {
    cache::SourceIdentity id;
    int64_t at_ns = 0;
  };
  static constexpr int64_t kMadeMemoryNs = 1'000'000'000;  // well past cache::kRacilyCleanNs
  void RememberMadeLocked(const DevIno& key, const cache::SourceIdentity& id, int64_t now)
      REQUIRES(mutex_);
  void NoteKernelAttrsLocked(Inode& inode, const cache::SourceIdentity& id) REQUIRES(mutex_);
  CacheMatch SwapKernelCacheIdLocked(Inode& inode, const cache::SourceIdentity& id, int64_t now,
                                     bool can_defer) const REQUIRES(mutex_);
  // One more lookup of `inode` as `name` in `parent`, whose reply carries `st`.
  void CountLookupLocked(Inode& inode, const std::shared_ptr<Inode>& parent,
                         const std::string& name, const struct ::stat& st) REQUIRES(mutex_);

  std::atomic<bool> pin_forgotten_{false};     // SetPinForgotten

  mutable Mutex mutex_;
  std::shared_ptr<Inode> root_;
  uint64_t next_nodeid_ = 16;  // ids below 16 are reserved for control nodes
  const uint64_t max_file_fds_;
  uint64_t file_fds_ GUARDED_BY(mutex_) = 0;  // file nodes holding an fd, and pins
  // Shared so that ReleasePins can fstat them outside the lock while a lookup closes one.
  std::unordered_map<DevIno, std::shared_ptr<const UniqueFd>, DevInoHash> pins_
      GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, std::shared_ptr<Inode>> by_nodeid_ GUARDED_BY(mutex_);
  std::unordered_map<DevIno, uint64_t, DevInoHash> by_devino_ GUARDED_BY(mutex_);
  std::unordered_map<DevIno, Made, DevInoHash> made_recently_ GUARDED_BY(mutex_);
};

// Brackets one change the mount makes to a file's source object: a write, truncate,
// chmod or utimens, a rename, a link or an unlink of one of its names, an xattr. Each
// of these moves the file's ctime; none of them leaves the kernel's pages wrong. From
// construction to destruction, observations of the file's identity are no news (see
// InodeTable::Observe), and the identity the change leaves is recorded as the one the
// kernel's pages hold.
class MountChange {
 public:
  // `inode` may be null (an object the kernel does not know, or a directory): nothing
  // to do then. The caller keeps it alive until the MountChange ends.
  MountChange(InodeTable& table, Inode* inode, KernelLearns learns = KernelLearns::kResult);
  ~MountChange();
  MountChange(const MountChange&) = delete;
  MountChange& operator=(const MountChange&) = delete;

  // The file's identity once the change is made, from a stat taken after it. Without
  // one (the change failed) the identity recorded before stays.
  void Made(const cache::SourceIdentity& id) { made_ = id; }

 private:
  InodeTable& table_;
  Inode* const inode_;  // kept alive by the caller
  const KernelLearns learns_;
  std::optional<cache::SourceIdentity> made_;
};

}  // namespace epochfs::fs
