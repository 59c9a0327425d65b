#include "cache/eviction.h"

#include <list>
#include <unordered_map>

namespace epochfs::cache {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  void OnInsert(const ChunkKey& key, uint64_t /*bytes*/) override {
    auto it = where_.find(key);
    if (it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.push_front(key);
    where_.emplace(key, order_.begin());
  }
  void OnAccess(const ChunkKey& key) override {
    auto it = where_.find(key);
    if (it != where_.end()) order_.splice(order_.begin(), order_, it->second);
  }
  void OnErase(const ChunkKey& key) override {
    auto it = where_.find(key);
    if (it == where_.end()) return;
    order_.erase(it->second);
    where_.erase(it);
  }
  std::optional<ChunkKey> Victim() override {
    if (order_.empty()) return std::nullopt;
    return order_.back();
  }
  bool AdmitWhenFull(const ChunkKey&, uint64_t) override { return true; }

 private:
  std::list<ChunkKey> order_;  // most recent first
  std::unordered_map<ChunkKey, std::list<ChunkKey>::iterator, ChunkKeyHash> where_;
};

class StaticPolicy final : public EvictionPolicy {
 public:
  void OnInsert(const ChunkKey&, uint64_t) override {}
  void OnAccess(const ChunkKey&) override {}
  void OnErase(const ChunkKey&) override {}
  std::optional<ChunkKey> Victim() override { return std::nullopt; }
  bool AdmitWhenFull(const ChunkKey&, uint64_t) override { return false; }
};

class SharedPolicy final : public EvictionPolicy {
 public:
  explicit SharedPolicy(std::shared_ptr<EvictionPolicy> policy) : policy_(std::move(policy)) {}
  void OnInsert(const ChunkKey& key, uint64_t bytes) override { policy_->OnInsert(key, bytes); }
  void OnAccess(const ChunkKey& key) override { policy_->OnAccess(key); }
  void OnErase(const ChunkKey& key) override { policy_->OnErase(key); }
  std::optional<ChunkKey> Victim() override { return policy_->Victim(); }
  bool AdmitWhenFull(const ChunkKey& key, uint64_t bytes) override {
    return policy_->AdmitWhenFull(key, bytes);
  }
  void OnBudget(uint64_t bytes) override { policy_->OnBudget(bytes); }

 private:
  std::shared_ptr<EvictionPolicy> policy_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewSharedPolicy(std::shared_ptr<EvictionPolicy> policy) {
  return std::make_unique<SharedPolicy>(std::move(policy));
}

std::unique_ptr<EvictionPolicy> NewLruPolicy() { return std::make_unique<LruPolicy>(); }
std::unique_ptr<EvictionPolicy> NewStaticPolicy() { return std::make_unique<StaticPolicy>(); }

}  // namespace epochfs::cache
