#include "cache/ram_tier.h"

#include <vector>

namespace epochfs::cache {

RamTier::RamTier(uint64_t budget_bytes, std::unique_ptr<EvictionPolicy> policy,
                 KernelDrop drop_kernel_pages)
    : drop_kernel_pages_(std::move(drop_kernel_pages)),
      budget_(budget_bytes),
      policy_(std::move(policy)) {}

void RamTier::EraseLocked(Map::iterator it, Released* released, bool kernel_lost) {
  bytes_ -= it->second.charge();
  policy_->OnErase(it->first);
  if (it->second.in_kernel()) {
    kernel_bytes_ -= KernelCharge(it->second.kernel_size);
    --kernel_entries_;
    if (!kernel_lost) {
      ++kernel_drops_;
      released->kernel.push_back(it->first);
    }
  } else {
    released->bytes.push_back(std::move(it->second.bytes));
  }
  entries_.erase(it);
}

bool RamTier::MakeRoomLocked(uint64_t need, const ChunkKey* keep, Released* released) {
  while (bytes_ + need > budget_) {
    std::optional<ChunkKey> victim = policy_->Victim();
    auto it = victim && (keep == nullptr || *victim != *keep) ? entries_.find(*victim)
                                                                : entries_.end();
    if (it == entries_.end()) return false;  // the policy wants no (more) evictions
    EraseLocked(it, released);
    ++evictions_;
  }
  return true;
}

void RamTier::Finish(Released& released) {
  released.bytes.clear();
  if (!drop_kernel_pages_) return;
  // One drop per file: a file's chunks are adjacent in the map, and so in the list.
  for (size_t i = 0; i < released.kernel.size(); ++i) {
    const ChunkKey& key = released.kernel[i];
    if (i > 0 && released.kernel[i - 1].dev == key.dev && released.kernel[i - 1].ino == key.ino) {
      continue;
    }
    drop_kernel_pages_(key.dev, key.ino);
  }
}

std::optional<ChunkBytes> RamTier::Lookup(const ChunkKey& key, const SourceIdentity& id) {
  Released released;
  std::optional<ChunkBytes> found;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    if (it->second.id != id) {
      ++stale_;
      EraseLocked(it, &released);
    } else if (it->second.in_kernel()) {
      EraseLocked(it, &released, /*kernel_lost=*/true);
    } else {
      policy_->OnAccess(key);
      it->second.copied_to_kernel = false;  // the kernel asked: its copy is gone
      found = it->second.bytes;
    }
  }
  Finish(released);
  return found;
}

bool RamTier::Insert(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes) {
  if (bytes.owner == nullptr) return false;
  const uint64_t need = Charge(bytes);
  return Admit(key, Entry{id, std::move(bytes)}, need);
}

bool RamTier::InsertKernelEntry(const ChunkKey& key, const SourceIdentity& id, uint64_t size) {
  if (!drop_kernel_pages_) return false;  // nothing could drop its pages
  Entry entry{id, ChunkBytes{}};
  entry.kernel_size = size;
  return Admit(key, std::move(entry), KernelCharge(size));
}

bool RamTier::Admit(const ChunkKey& key, Entry entry, uint64_t need) {
  Released released;  // freed and reported after the lock is dropped
  bool inserted = false;
  {
    MutexLock lock(mu_);
    if (need > budget_) return false;
    // A kernel entry of the same identity is being replaced by what a read brought: the
    // kernel lost those pages (that is why the read came).
    if (auto it = entries_.find(key); it != entries_.end()) {
      EraseLocked(it, &released, it->second.in_kernel() && it->second.id == entry.id);
    }
    inserted = [&]() REQUIRES(mu_) {
      if (bytes_ + need > budget_) {
        if (!policy_->AdmitWhenFull(key, need)) return false;
        if (!MakeRoomLocked(need, nullptr, &released)) return false;
      }
      if (entry.in_kernel()) {
        kernel_bytes_ += need;
        ++kernel_entries_;
      }
      entries_.emplace(key, std::move(entry));
      bytes_ += need;
      policy_->OnInsert(key, need);
      return true;
    }();
  }
  Finish(released);
  return inserted;
}

void RamTier::ForgetKernelEntry(const ChunkKey& key, const SourceIdentity& id) {
  Released released;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.id != id || !it->second.in_kernel()) return;
    EraseLocked(it, &released, /*kernel_lost=*/true);
  }
  Finish(released);
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

std::optional<ChunkBytes> RamTier::TakeForKernel(const ChunkKey& key, const SourceIdentity& id) {
  Released released;  // freed and reported after the lock is dropped
  std::optional<ChunkBytes> taken;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.id != id || it->second.in_kernel()) return std::nullopt;
    const uint64_t before = it->second.charge();
    const uint64_t after = KernelCharge(it->second.bytes.size);
    // Pages round up: a kernel entry may be charged more than the bytes it replaces
    // (a streamed entry owns exactly its size). Room is made as for an insert, but
    // never by evicting this entry: then it stays as it is.
    if (after <= before || MakeRoomLocked(after - before, &key, &released)) {
      Entry& entry = it->second;
      taken = std::move(entry.bytes);
      entry.bytes = ChunkBytes{};
      entry.kernel_size = taken->size;
      bytes_ = bytes_ - before + after;
      kernel_bytes_ += after;
      ++kernel_entries_;
      // The policy keeps the entry's rank; only its size changes.
      policy_->OnErase(key);
      policy_->OnInsert(key, after);
    }
  }
  Finish(released);
  return taken;
}

std::optional<ChunkBytes> RamTier::TakeCopyForKernel(const ChunkKey& key,
                                                    const SourceIdentity& id) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.id != id || it->second.in_kernel() ||
      it->second.copied_to_kernel) {
    return std::nullopt;
  }
  it->second.copied_to_kernel = true;
  return it->second.bytes;
}

bool RamTier::CopyPending(const ChunkKey& key, const SourceIdentity& id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.id == id && !it->second.in_kernel() &&
         !it->second.copied_to_kernel;
}

void RamTier::CopyNotTaken(const ChunkKey& key, const SourceIdentity& id) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.id == id) it->second.copied_to_kernel = false;
}

void RamTier::ReturnFromKernel(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.id != id || !it->second.in_kernel()) return;
  Entry& entry = it->second;
  const uint64_t before = entry.charge();
  kernel_bytes_ -= before;
  --kernel_entries_;
  entry.bytes = std::move(bytes);
  entry.kernel_size = 0;
  const uint64_t after = entry.charge();
  // A pack buffer may own more than the chunk; if it no longer fits, it goes.
  if (bytes_ - before + after > budget_) {
    Released released;
    bytes_ = bytes_ - before + after;
    EraseLocked(it, &released);
    return;  // only bytes to free, which the vector does on the way out
  }
  bytes_ = bytes_ - before + after;
  policy_->OnErase(key);
  policy_->OnInsert(key, after);
}

bool RamTier::HoldsKernelEntry(const ChunkKey& key, const SourceIdentity& id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.id == id && it->second.in_kernel();
}

bool RamTier::HoldsBytes(const ChunkKey& key, const SourceIdentity& id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.id == id && !it->second.in_kernel();
}

bool RamTier::HasRoomFor(uint64_t bytes) const {
  MutexLock lock(mu_);
  return bytes_ + bytes + kEntryOverheadBytes <= budget_;
}

void RamTier::SetBudget(uint64_t bytes) {
  Released released;
  {
    MutexLock lock(mu_);
    budget_ = bytes;
    policy_->OnBudget(bytes);
    // The policy's victims first; where it names none (the static policy never does),
    // the rest in key order: the budget bounds memory.
    if (!MakeRoomLocked(0, nullptr, &released)) {
      while (bytes_ > budget_ && !entries_.empty()) {
        EraseLocked(entries_.begin(), &released);
        ++evictions_;
      }
    }
  }
  Finish(released);
}

uint64_t RamTier::budget() const {
  MutexLock lock(mu_);
  return budget_;
}

void RamTier::EraseFile(uint64_t dev, uint64_t ino) {
  Released released;
  {
    MutexLock lock(mu_);
    auto it = entries_.lower_bound(ChunkKey{dev, ino, 0});
    while (it != entries_.end() && it->first.dev == dev && it->first.ino == ino) {
      auto next = std::next(it);
      EraseLocked(it, &released);
      it = next;
    }
  }
  Finish(released);
}

RamTier::Stats RamTier::GetStats() const {
  MutexLock lock(mu_);
  return Stats{bytes_,         entries_.size(),  evictions_,   stale_,
               kernel_bytes_,  kernel_entries_,  kernel_drops_, budget_};
}

}  // namespace epochfs::cache
