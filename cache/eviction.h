// Eviction policies for the RAM tier: which chunk goes when the tier is full, and
// whether a new chunk may come in at all.
//
// Why a plug-in: under reshuffled epochs the best policy is not LRU. A training epoch
// reads every sample once in a fresh random order; with a cache holding a fraction c
// of the data set, LRU hits about c*c/2 of reads, a static set (CoorDL's MinIO:
// once full, admit nothing new) hits c, and a policy that evicts what was already
// read this epoch can do better still. The last one needs the epoch's order, so the
// prefetcher brings its own implementation of this interface.
//
// Contract. The RAM tier owns its policy and calls it only under the tier's lock, so
// implementations need no locking of their own and must not call back into the tier
// or block. Calls arrive in this order for a key: OnInsert, then any number of
// OnAccess, then OnErase (eviction, staleness or invalidation all end in OnErase).
// When an insert does not fit, the tier asks AdmitWhenFull once; if admitted, it calls
// Victim() and erases what it names until the new entry fits.
//
// Thread-safety: none needed (see above); an instance belongs to one tier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace epochfs::cache {

// A chunk of a source file: file (dev, ino), chunk index = offset / chunk_size.
struct ChunkKey {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint32_t chunk = 0;

  bool operator==(const ChunkKey&) const = default;
  auto operator<=>(const ChunkKey&) const = default;
};

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& key) const noexcept {
    // splitmix64-style mixing: inode numbers are dense and sequential.
    uint64_t h = key.dev * 0x9e3779b97f4a7c15ull ^ key.ino;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h ^= key.chunk;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // A new entry of `bytes` bytes was inserted.
  virtual void OnInsert(const ChunkKey& key, uint64_t bytes) = 0;
  // An entry was read (a hit).
  virtual void OnAccess(const ChunkKey& key) = 0;
  // An entry left the tier, for whatever reason.
  virtual void OnErase(const ChunkKey& key) = 0;
  // The entry to evict next, or nullopt to evict nothing (the insert then fails).
  // Must name an entry currently in the tier.
  virtual std::optional<ChunkKey> Victim() = 0;
  // Whether an entry of `bytes` bytes that does not fit may evict others to get in.
  virtual bool AdmitWhenFull(const ChunkKey& key, uint64_t bytes) = 0;
  // The tier's budget is now `bytes` (RamTier::SetBudget); for a policy that answers
  // questions about room outside the tier's calls.
  virtual void OnBudget(uint64_t bytes) {}
};

// Least recently inserted-or-accessed goes first; everything is admitted.
std::unique_ptr<EvictionPolicy> NewLruPolicy();

// Admits while there is room, then nothing new; evicts nothing (entries still leave
// when stale or invalidated, which makes room again).
std::unique_ptr<EvictionPolicy> NewStaticPolicy();

// Forwards every call to `policy`, which the caller may share (and feed) elsewhere.
std::unique_ptr<EvictionPolicy> NewSharedPolicy(std::shared_ptr<EvictionPolicy> policy);

}  // namespace epochfs::cache

template <>
struct std::hash<epochfs::cache::ChunkKey> : epochfs::cache::ChunkKeyHash {};
