#include "prefetcher/epoch_policy.h"

#include <algorithm>
#include <limits>

namespace epochfs::prefetch {

uint64_t EpochPolicy::RankLocked(const FileKey& file) const {
  if (auto it = read_.find(file); it != read_.end()) {
    // The read used the file's first plan position; its next one, if any, ranks it.
    if (auto later = plan_later_pos_.find(file); later != plan_later_pos_.end()) return later->second;
    if (replay_) {
      if (auto place = replay_->Position(file)) return replay_->size() + *place;  // next run
    }
    return std::numeric_limits<uint64_t>::max() - it->second;  // oldest read is highest
  }
  if (auto it = plan_pos_.find(file); it != plan_pos_.end()) return it->second;
  if (replay_) {
    if (auto place = replay_->Position(file)) return *place;
  }
  return kUnplanned;
}

void EpochPolicy::RerankFileLocked(const FileKey& file) {
  const uint64_t rank = RankLocked(file);
  auto it = cached_.lower_bound(cache::ChunkKey{file.dev, file.ino, 0});
  for (; it != cached_.end() && it->first.dev == file.dev && it->first.ino == file.ino; ++it) {
    if (it->second.rank == rank) continue;
    by_rank_.erase({it->second.rank, it->first});
    it->second.rank = rank;
    by_rank_.insert({rank, it->first});
  }
}

void EpochPolicy::RerankLocked() {
  by_rank_.clear();
  for (auto& [key, cached] : cached_) {
    cached.rank = RankLocked(FileKey{key.dev, key.ino});
    by_rank_.insert({cached.rank, key});
  }
}

void EpochPolicy::FreshRanksLocked() {
  if (ranks_stale_) RerankLocked();
  ranks_stale_ = false;
  ranks_needed_ = true;
}

void EpochPolicy::MarkRead(const FileKey& file) {
  MutexLock lock(mu_);
  if (read_.count(file) != 0) return;
  read_.emplace(file, read_seq_++);
  if (ranks_stale_) return;  // rebuilt whole when next needed
  if (ranks_needed_) {
    RerankFileLocked(file);
  } else {
    ranks_stale_ = true;
  }
}

void EpochPolicy::NewEpoch() {
  MutexLock lock(mu_);
  read_.clear();
  read_seq_ = 0;
  ranks_stale_ = true;
  ranks_needed_ = false;
}

void EpochPolicy::SetPlan(const std::vector<FileKey>& order) {
  // The tables are built, and the old ones freed, outside mu_: the RAM tier waits on mu_
  // for every insert and eviction.
  PositionMap pos;
  PositionMap later_pos;
  pos.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    if (!pos.emplace(order[i], i).second) later_pos.emplace(order[i], i);
  }
  std::shared_ptr<const OrderIndex> replay;
  {
    MutexLock lock(mu_);
    plan_pos_.swap(pos);
    plan_later_pos_.swap(later_pos);
    replay_.swap(replay);
    ranks_stale_ = true;
  }
}

void EpochPolicy::RankByReplay(std::shared_ptr<const OrderIndex> last_epoch) {
  PositionMap pos;
  PositionMap later_pos;
  {
    MutexLock lock(mu_);
    plan_pos_.swap(pos);
    plan_later_pos_.swap(later_pos);
    replay_.swap(last_epoch);
    ranks_stale_ = true;
  }
}

bool EpochPolicy::WouldAdmit(const FileKey& file, uint64_t bytes) {
  MutexLock lock(mu_);
  if (bytes_ + bytes <= budget_) return true;
  if (SpentLocked(file) || by_rank_.empty()) return false;
  FreshRanksLocked();
  return RankLocked(file) < by_rank_.rbegin()->first;
}

void EpochPolicy::OnBudget(uint64_t bytes) {
  MutexLock lock(mu_);
  budget_ = bytes;
}

uint32_t EpochPolicy::Displaceable(const FileKey& file, uint32_t limit) {
  MutexLock lock(mu_);
  uint32_t n = 0;
  if (bytes_ < budget_) {
    const uint64_t average = cached_.empty() ? 1 : std::max<uint64_t>(1, bytes_ / cached_.size());
    n = static_cast<uint32_t>(std::min<uint64_t>(limit, (budget_ - bytes_) / average));
  }
  if (n >= limit || SpentLocked(file)) return n;  // a spent file never evicts
  FreshRanksLocked();
  const uint64_t rank = RankLocked(file);
  for (auto it = by_rank_.rbegin(); it != by_rank_.rend() && n < limit && it->first > rank; ++it) {
    ++n;
  }
  return n;
}

bool EpochPolicy::WasRead(const FileKey& file) const {
  MutexLock lock(mu_);
  return read_.count(file) != 0;
}

void EpochPolicy::OnInsert(const cache::ChunkKey& key, uint64_t bytes) {
  MutexLock lock(mu_);
  if (auto it = cached_.find(key); it != cached_.end()) {
    by_rank_.erase({it->second.rank, key});
    bytes_ -= it->second.bytes;
    cached_.erase(it);
  }
  const uint64_t rank = RankLocked(FileKey{key.dev, key.ino});
  cached_.emplace(key, Cached{rank, bytes});
  by_rank_.insert({rank, key});
  bytes_ += bytes;
}

void EpochPolicy::OnErase(const cache::ChunkKey& key) {
  MutexLock lock(mu_);
  auto it = cached_.find(key);
  if (it == cached_.end()) return;
  by_rank_.erase({it->second.rank, key});
  bytes_ -= it->second.bytes;
  cached_.erase(it);
}

std::optional<cache::ChunkKey> EpochPolicy::Victim() {
  MutexLock lock(mu_);
  if (by_rank_.empty()) return std::nullopt;
  FreshRanksLocked();
  return by_rank_.rbegin()->second;
}

bool EpochPolicy::AdmitWhenFull(const cache::ChunkKey& key, uint64_t bytes) {
  MutexLock lock(mu_);
  const FileKey file{key.dev, key.ino};
  if (SpentLocked(file) || by_rank_.empty()) return false;
  FreshRanksLocked();
  return RankLocked(file) < by_rank_.rbegin()->first;
}

}  // namespace epochfs::prefetch
