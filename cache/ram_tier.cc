#include "cache/ram_tier.h"

#include <vector>

namespace epochfs::cache {

RamTier::RamTier(uint64_t budget_bytes, std::unique_ptr<EvictionPolicy> policy)
    : budget_(budget_bytes), policy_(std::move(policy)) {}

void RamTier::EraseLocked(Map::iterator it, std::vector<ChunkBytes>* released) {
  bytes_ -= Charge(it->second.bytes);
  policy_->OnErase(it->first);
  released->push_back(std::move(it->second.bytes));
  entries_.erase(it);
}

std::optional<ChunkBytes> RamTier::Lookup(const ChunkKey& key, const SourceIdentity& id) {
  std::vector<ChunkBytes> released;
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  if (it->second.id != id) {
    ++stale_;
    EraseLocked(it, &released);
    return std::nullopt;
  }
  policy_->OnAccess(key);
  return it->second.bytes;
}

bool RamTier::Insert(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes) {
  const uint64_t need = Charge(bytes);
  if (need > budget_ || bytes.owner == nullptr) return false;
  std::vector<ChunkBytes> released;  // freed after the lock is dropped
  MutexLock lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) EraseLocked(it, &released);
  if (bytes_ + need > budget_) {
    if (!policy_->AdmitWhenFull(key, need)) return false;
    while (bytes_ + need > budget_) {
      std::optional<ChunkKey> victim = policy_->Victim();
      auto it = victim ? entries_.find(*victim) : entries_.end();
      if (it == entries_.end()) return false;  // the policy wants no (more) evictions
      EraseLocked(it, &released);
      ++evictions_;
    }
  }
  entries_.emplace(key, Entry{id, std::move(bytes)});
  bytes_ += need;
  policy_->OnInsert(key, need);
  return true;
}

bool RamTier::InsertIfRoom(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes) {
  const uint64_t need = Charge(bytes);
  if (bytes.owner == nullptr) return false;
  MutexLock lock(mu_);
  if (bytes_ + need > budget_ || entries_.count(key) != 0) return false;
  entries_.emplace(key, Entry{id, std::move(bytes)});
  bytes_ += need;
  policy_->OnInsert(key, need);
  return true;
}

bool RamTier::Contains(const ChunkKey& key) const {
  MutexLock lock(mu_);
  return entries_.count(key) != 0;
}

bool RamTier::HasRoomFor(uint64_t bytes) const {
  MutexLock lock(mu_);
  return bytes_ + bytes + kEntryOverheadBytes <= budget_;
}

void RamTier::EraseFile(uint64_t dev, uint64_t ino) {
  std::vector<ChunkBytes> released;
  MutexLock lock(mu_);
  auto it = entries_.lower_bound(ChunkKey{dev, ino, 0});
  while (it != entries_.end() && it->first.dev == dev && it->first.ino == ino) {
    auto next = std::next(it);
    EraseLocked(it, &released);
    it = next;
  }
}

RamTier::Stats RamTier::GetStats() const {
  MutexLock lock(mu_);
  return Stats{bytes_, entries_.size(), evictions_, stale_};
}

}  // namespace epochfs::cache
