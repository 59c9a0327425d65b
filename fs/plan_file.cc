#include "fs/plan_file.h"

#include <signal.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {

PlanFile::PlanFile(SourceFs* fs, prefetch::Prefetcher* prefetcher,
                   prefetch::PlanParserOptions options)
    : fs_(fs), prefetcher_(prefetcher), options_(options), reaper_([this] { RunReaper(); }) {}

PlanFile::~PlanFile() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  reaper_.join();
}

uint64_t PlanFile::ChargedLocked(pid_t except) const {
  uint64_t bytes = 0;
  for (const auto& [pid, p] : publishers_) {
    if (pid != except) bytes += p.plan_bytes;
    if (p.parser.writing()) bytes += p.parser.entry_bytes();
  }
  return bytes;
}

std::pair<std::vector<prefetch::PlannedFile>, uint32_t> PlanFile::MergeLocked() const {
  std::vector<const std::vector<prefetch::PlannedFile>*> plans;
  size_t total = 0, longest = 0;
  for (const auto& [pid, p] : publishers_) {
    if (p.plan.empty()) continue;
    plans.push_back(&p.plan);
    total += p.plan.size();
    longest = std::max(longest, p.plan.size());
  }
  std::vector<prefetch::PlannedFile> merged;
  merged.reserve(total);
  for (size_t i = 0; i < longest; ++i) {
    for (const auto* plan : plans) {
      if (i < plan->size()) merged.push_back((*plan)[i]);
    }
  }
  return {std::move(merged), static_cast<uint32_t>(plans.size())};
}

bool PlanFile::ReapLocked() {
  bool dropped = false;
  for (auto it = publishers_.begin(); it != publishers_.end();) {
    const pid_t pid = it->first;
    const bool gone = pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
    if (gone) {
      if (!it->second.plan.empty()) {
        spdlog::info("plan of process {} dropped: the process is gone", pid);
        dropped = true;
      }
      it = publishers_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

void PlanFile::RunReaper() {
  MutexLock lock(mu_);
  while (!stop_) {
    lock.WaitFor(stop_cv_, std::chrono::seconds(1));
    if (stop_ || !ReapLocked() || prefetcher_ == nullptr) continue;
    auto [merged, plans] = MergeLocked();
    // Under mu_: publications reach the prefetcher in the order they were merged.
    prefetcher_->Publish(std::move(merged), /*new_epoch=*/false, plans);
  }
}

Status PlanFile::Write(uint64_t offset, std::string_view data, uid_t uid, gid_t gid, pid_t pid) {
  Status st;
  {
    MutexLock lock(mu_);
    auto it = publishers_.find(pid);
    if (it == publishers_.end()) {
      if (publishers_.size() >= kMaxPublishers) ReapLocked();
      if (publishers_.size() >= kMaxPublishers) {
        st = Status::FromErrno(EBUSY, fmt::format("{} processes have plans already",
                                                  kMaxPublishers));
      } else {
        it = publishers_.emplace(pid, Publisher(options_)).first;
      }
    }
    std::optional<std::vector<prefetch::PlannedFile>> published;
    if (st.ok()) {
      Publisher& p = it->second;
      const Caller caller{uid, gid};
      st = p.parser.Write(
          offset, data,
          [&](const std::string& path) { return fs_->ResolvePlanEntry(path, caller); },
          &published);
      // Every plan, live or being written, within one bound (this publisher's previous
      // plan aside: its next one replaces it).
      if (st.ok() && options_.max_bytes != 0) {
        const uint64_t mine = published ? p.parser.entry_bytes() : 0;
        if (ChargedLocked(pid) + mine > options_.max_bytes) {
          published.reset();
          st = p.parser.Abandon(Status::InvalidArgument(fmt::format(
              "the mount's plans together exceed their memory bound of {} MiB (a sixteenth "
              "of --ram)",
              options_.max_bytes >> 20)));
        }
      }
      if (st.ok() && published) {
        // A publisher's next plan is its next epoch; a first plan is the mount's, when
        // no other is live. Joining others' epoch changes nothing that was read.
        bool others = false;
        for (const auto& [other, q] : publishers_) others |= other != pid && !q.plan.empty();
        const bool new_epoch = !p.plan.empty() || !others;
        p.plan_bytes = published->empty() ? 0 : p.parser.entry_bytes();
        p.plan = std::move(*published);
        auto [merged, plans] = MergeLocked();
        if (prefetcher_) prefetcher_->Publish(std::move(merged), new_epoch, plans);
      }
    }
    if (!st.ok()) ++refused_;
  }
  if (!st.ok()) {
    uint64_t held_back = 0;
    if (refusals_logged_.Allow(&held_back)) {
      spdlog::warn("plan refused (uid {}, pid {}): {}; the previous plan stays{}", uid, pid,
                   st.message(),
                   held_back == 0 ? ""
                                  : fmt::format(" ({} more refusals not logged)", held_back));
    }
  }
  return st;  // EACCES for a file the writer may not read, EINVAL for everything else
}

size_t PlanFile::live_plans() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [pid, p] : publishers_) n += p.plan.empty() ? 0 : 1;
  return n;
}

std::string PlanFile::Summary() const {
  const prefetch::PrefetcherStats s = prefetcher_ ? prefetcher_->Stats() : prefetch::PrefetcherStats{};
  MutexLock lock(mu_);
  return fmt::format(
      "epochfs-plan 1\n# {} live plans, {} entries, position {}, {} plans published, {} refused\n",
      s.plans, s.plan_entries, s.plan_position, s.plans_published, refused_);
}

}  // namespace epochfs::fs
