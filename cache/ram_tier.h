// RamTier: the byte-budgeted in-memory tier, ChunkKey -> (identity, immutable bytes).
//
// Entries are shared, immutable buffers: a hit hands out a reference (no copy), so
// a ReadBuffer stays valid after its entry is evicted. The budget counts the memory
// held by the buffers, and each entry's bookkeeping, and is never exceeded: an entry larger than the budget is not
// admitted, and an insert that does not fit either evicts (as the EvictionPolicy
// says) or is refused. A lookup with a different identity than the entry's drops the
// entry (the source file changed) and misses.
//
// Thread-safety: all methods are thread-safe. One mutex guards the map and the
// policy; it is held only for map operations, never while copying chunk data, and
// erased buffers are released after it is dropped.
#pragma once

#include <cstdint>
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

  RamTier(uint64_t budget_bytes, std::unique_ptr<EvictionPolicy> policy);
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

  bool Contains(const ChunkKey& key) const;
  bool HasRoomFor(uint64_t bytes) const;

  // Drops every chunk of file (dev, ino).
  void EraseFile(uint64_t dev, uint64_t ino);

  struct Stats {
    uint64_t bytes = 0;
    uint64_t entries = 0;
    uint64_t evictions = 0;
    uint64_t stale = 0;
  };
  Stats GetStats() const;

 private:
  struct Entry {
    SourceIdentity id;
    ChunkBytes bytes;
  };
  using Map = std::map<ChunkKey, Entry>;  // ordered: a file's chunks are one range

  // Removes `it`, moving its bytes to `released` so they are freed after unlocking.
  void EraseLocked(Map::iterator it, std::vector<ChunkBytes>* released) REQUIRES(mu_);

  const uint64_t budget_;
  mutable Mutex mu_;
  Map entries_ GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> policy_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
  uint64_t stale_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs::cache
