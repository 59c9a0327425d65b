// RamTier: the byte-budgeted in-memory tier, ChunkKey -> (identity, immutable bytes).
//
// Entries are shared, immutable buffers: a hit hands out a reference (no copy), so
// a ReadBuffer stays valid after its entry is evicted. The budget counts the memory
// held by the buffers, and each entry's bookkeeping, and is never exceeded: an entry larger than the budget is not
// admitted, and an insert that does not fit either evicts (as the EvictionPolicy
// says) or is refused. A lookup with a different identity than the entry's drops the
// entry (the source file changed) and misses.
//
// Kernel entries. Once the chunk's bytes have been pushed into the kernel's page cache
// (Cache::MoveToKernel), the tier keeps a *kernel entry* in their place: no bytes, but
// the same key, identity and charge (the chunk's length, rounded up to whole pages).
// So what the daemon put in the page cache stays within the one budget, and the
// eviction policy decides when it goes like anything else; when a kernel entry leaves
// (evicted, invalidated, stale), `drop_kernel_pages` is told the file, after the lock
// is dropped, and drops the kernel's pages. A Lookup that meets a kernel entry misses
// and forgets it without a drop: a read reached the daemon, so the kernel had lost
// those pages already.
//
// Thread-safety: all methods are thread-safe. One mutex guards the map and the
// policy; it is held only for map operations, never while copying chunk data, and
// erased buffers are released (and kernel drops reported) after it is dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/thread_annotations.h"
#include "cache/cache.h"
#include "cache/chunk_bytes.h"
#include "cache/eviction.h"

namespace epochfs::cache {

class RamTier {
 public:
  // What an entry holds besides its bytes: its map node, the buffer's shared owner, the
  // eviction policy's state for it and the allocator's rounding. Charged to the budget
  // with the bytes, so that many small files stay within --ram (measured with 300,000
  // files of 100 bytes: docs/operations.md).
  static constexpr uint64_t kEntryOverheadBytes = 384;
  static uint64_t Charge(const ChunkBytes& bytes) { return bytes.footprint() + kEntryOverheadBytes; }

  // Told (dev, ino) of a file whose kernel entry left the tier; called from any thread
  // that erased it, never under the tier's lock.
  using KernelDrop = std::function<void(uint64_t dev, uint64_t ino)>;
  static uint64_t KernelCharge(uint64_t size) {
    return ((size + kPageBytes - 1) / kPageBytes) * kPageBytes + kEntryOverheadBytes;
  }

  RamTier(uint64_t budget_bytes, std::unique_ptr<EvictionPolicy> policy,
          KernelDrop drop_kernel_pages = nullptr);
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // The entry's bytes if it is present with identity `id`. An entry with another
  // identity is erased (counted in Stats::stale).
  std::optional<ChunkBytes> Lookup(const ChunkKey& key, const SourceIdentity& id);

  // Inserts or replaces; evicts as the policy says to make room. Returns whether the
  // entry is now in the tier.
  bool Insert(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes);

  // Inserts only if the key is absent and the entry fits without evicting anything
  // (read-around neighbours: welcome, but not at the expense of what is cached).
  bool InsertIfRoom(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes);

  // Whether the key has an entry, with bytes or a kernel entry.
  bool Contains(const ChunkKey& key) const;

  // Turns the entry (key, id) with bytes into a kernel entry and returns its bytes, for
  // the caller to push into the kernel's page cache; nullopt if there is no such entry.
  std::optional<ChunkBytes> TakeForKernel(const ChunkKey& key, const SourceIdentity& id);
  // Inserts a kernel entry for (key, id) of `size` bytes that the caller is about to
  // push into the kernel's page cache itself (bytes the tier never held), charged and
  // admitted like an insert of that charge. Returns whether the entry is now in the tier.
  bool InsertKernelEntry(const ChunkKey& key, const SourceIdentity& id, uint64_t size);
  // The store of InsertKernelEntry's pages failed: the entry goes, with no drop (nothing
  // was stored, and a drop queued now could land on pages a later push stores).
  void ForgetKernelEntry(const ChunkKey& key, const SourceIdentity& id);
  // The push of TakeForKernel's bytes failed: the kernel entry gets its bytes back (if
  // it is still there; nothing is reported as dropped).
  void ReturnFromKernel(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes);
  // The bytes of (key, id) for a copy into the kernel's page cache that the tier keeps
  // too: nullopt when absent, a kernel entry, or copied already and not read since (a
  // read reaching the daemon means the kernel lost the copy). Marks the entry copied.
  std::optional<ChunkBytes> TakeCopyForKernel(const ChunkKey& key, const SourceIdentity& id);
  // Whether TakeCopyForKernel would hand out (key, id) now.
  bool CopyPending(const ChunkKey& key, const SourceIdentity& id) const;
  // The copy TakeCopyForKernel handed out did not reach the kernel: the next may.
  void CopyNotTaken(const ChunkKey& key, const SourceIdentity& id);

  // Whether (key, id) is a kernel entry / an entry with its bytes.
  bool HoldsKernelEntry(const ChunkKey& key, const SourceIdentity& id) const;
  bool HoldsBytes(const ChunkKey& key, const SourceIdentity& id) const;
  bool HasRoomFor(uint64_t bytes) const;

  // The budget is now `bytes`. Lowered below what the tier holds, it evicts at once (the
  // policy's victims, then in key order where the policy names none) and drops the
  // kernel's pages of what it evicts: the budget bounds memory, so it is kept now, not
  // at the next insert. The policy hears of it (EvictionPolicy::OnBudget).
  void SetBudget(uint64_t bytes);
  uint64_t budget() const;

  // Drops every chunk of file (dev, ino).
  void EraseFile(uint64_t dev, uint64_t ino);

  struct Stats {
    uint64_t bytes = 0;
    uint64_t entries = 0;
    uint64_t evictions = 0;
    uint64_t stale = 0;
    uint64_t kernel_bytes = 0;    // charged for kernel entries (included in bytes)
    uint64_t kernel_entries = 0;
    uint64_t kernel_drops = 0;    // kernel entries that left and had their pages dropped
    uint64_t budget = 0;
  };
  Stats GetStats() const;

 private:
  static constexpr uint64_t kPageBytes = 4096;
  struct Entry {
    SourceIdentity id;
    ChunkBytes bytes;          // empty for a kernel entry
    uint64_t kernel_size = 0;  // a kernel entry: the bytes pushed (its charge's basis)
    bool copied_to_kernel = false;  // bytes kept, and a copy pushed (TakeCopyForKernel)
    bool in_kernel() const { return bytes.owner == nullptr; }
    uint64_t charge() const { return in_kernel() ? KernelCharge(kernel_size) : Charge(bytes); }
  };
  using Map = std::map<ChunkKey, Entry>;  // ordered: a file's chunks are one range

  // What an erase leaves to do once the lock is dropped: free the bytes, drop the
  // kernel's pages.
  struct Released {
    std::vector<ChunkBytes> bytes;
    std::vector<ChunkKey> kernel;
  };
  // Removes `it`. A kernel entry's pages are dropped unless `kernel_lost` (the kernel
  // no longer has them).
  void EraseLocked(Map::iterator it, Released* released, bool kernel_lost = false)
      REQUIRES(mu_);
  // Frees and reports what EraseLocked left; call without the lock.
  void Finish(Released& released);
  // Inserts or replaces (key, entry), charged `need`, evicting as the policy says.
  bool Admit(const ChunkKey& key, Entry entry, uint64_t need) EXCLUDES(mu_);
  // Evicts the policy's victims until `need` more bytes fit the budget, never `keep`
  // (an entry being resized). Returns whether they fit.
  bool MakeRoomLocked(uint64_t need, const ChunkKey* keep, Released* released) REQUIRES(mu_);

  const KernelDrop drop_kernel_pages_;
  mutable Mutex mu_;
  uint64_t budget_ GUARDED_BY(mu_);
  Map entries_ GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> policy_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
  uint64_t stale_ GUARDED_BY(mu_) = 0;
  uint64_t kernel_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t kernel_entries_ GUARDED_BY(mu_) = 0;
  uint64_t kernel_drops_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::cache
