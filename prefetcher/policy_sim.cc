#include "prefetcher/policy_sim.h"

#include <algorithm>
#include <memory>
#include <unordered_set>

#include "cache/eviction.h"
#include "prefetcher/epoch_policy.h"

namespace epochfs::prefetch {
namespace {

cache::ChunkKey KeyOf(uint32_t id) { return cache::ChunkKey{1, id, 0}; }

// The RAM tier's insert logic (cache/ram_tier.cc) on unit-size entries.
class SimTier {
 public:
  SimTier(uint32_t capacity, cache::EvictionPolicy* policy)
      : capacity_(capacity), policy_(policy) {}
  bool Contains(uint32_t id) const { return present_.count(id) != 0; }
  void Access(uint32_t id) { policy_->OnAccess(KeyOf(id)); }
  bool Insert(uint32_t id) {
    if (capacity_ == 0) return false;
    if (present_.size() + 1 > capacity_) {
      if (!policy_->AdmitWhenFull(KeyOf(id), 1)) return false;
      while (present_.size() + 1 > capacity_) {
        auto victim = policy_->Victim();
        if (!victim || present_.erase(static_cast<uint32_t>(victim->ino)) == 0) return false;
        policy_->OnErase(*victim);
      }
    }
    present_.insert(id);
    policy_->OnInsert(KeyOf(id), 1);
    return true;
  }

 private:
  const uint32_t capacity_;
  cache::EvictionPolicy* policy_;
  std::unordered_set<uint32_t> present_;
};

}  // namespace

std::vector<SimEpoch> Simulate(SimPolicy kind, const std::vector<std::vector<uint32_t>>& epochs,
                               const SimOptions& options) {
  std::unique_ptr<cache::EvictionPolicy> generic;
  std::unique_ptr<EpochPolicy> epoch_policy;
  cache::EvictionPolicy* policy = nullptr;
  switch (kind) {
    case SimPolicy::kLru:
      generic = cache::NewLruPolicy();
      policy = generic.get();
      break;
    case SimPolicy::kStatic:
      generic = cache::NewStaticPolicy();
      policy = generic.get();
      break;
    case SimPolicy::kEpochAware:
    case SimPolicy::kPublished:
      epoch_policy = std::make_unique<EpochPolicy>(options.capacity);
      policy = epoch_policy.get();
      break;
  }
  const bool readahead = epoch_policy != nullptr && options.prefetch_per_read > 0;
  uint32_t max_id = 0;
  for (const auto& e : epochs) {
    for (uint32_t id : e) max_id = std::max(max_id, id);
  }
  SimTier tier(options.capacity, policy);
  std::vector<SimEpoch> out;
  for (const auto& order : epochs) {
    SimEpoch result;
    std::unordered_set<uint32_t> read;
    if (epoch_policy) {
      epoch_policy->NewEpoch();
      std::vector<FileKey> plan;
      if (kind == SimPolicy::kPublished) {
        for (uint32_t id : order) plan.push_back(FileKey{1, id});
      }
      epoch_policy->SetPlan(plan);
    }
    double budget = 0;
    size_t scan = 0;  // readahead cursor: ids (epoch-aware) or plan positions (published)
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const uint32_t id = order[pos];
      read.insert(id);
      if (epoch_policy) epoch_policy->MarkRead(FileKey{1, id});
      if (tier.Contains(id)) {
        ++result.hits;
        tier.Access(id);
      } else {
        ++result.source_fetches;
        tier.Insert(id);
      }
      if (!readahead) continue;
      budget += options.prefetch_per_read;
      if (kind == SimPolicy::kPublished) scan = std::max(scan, pos + 1);
      while (budget >= 1.0) {
        // The next candidate in the policy's order that is neither read nor cached.
        uint32_t candidate = 0;
        bool found = false;
        if (kind == SimPolicy::kPublished) {
          while (scan < order.size() && (read.count(order[scan]) || tier.Contains(order[scan]))) {
            ++scan;
          }
          if (scan < order.size()) candidate = order[scan], found = true;
        } else {
          while (scan <= max_id && (read.count(static_cast<uint32_t>(scan)) ||
                                    tier.Contains(static_cast<uint32_t>(scan)))) {
            ++scan;
          }
          if (scan <= max_id) candidate = static_cast<uint32_t>(scan), found = true;
        }
        if (!found || !epoch_policy->WouldAdmit(FileKey{1, candidate}, 1)) break;
        budget -= 1.0;
        ++result.source_fetches;
        if (!tier.Insert(candidate)) break;
      }
      budget = std::min(budget, 1.0);  // bandwidth unused now is not saved up
    }
    out.push_back(result);
  }
  return out;
}

}  // namespace epochfs::prefetch
