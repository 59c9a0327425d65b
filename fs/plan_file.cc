#include "fs/plan_file.h"

#include <optional>
#include <vector>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {

Status PlanFile::Write(uint64_t offset, std::string_view data, uid_t uid, gid_t gid) {
  std::optional<std::vector<prefetch::PlannedFile>> published;
  Status st;
  {
    MutexLock lock(mu_);
    const Caller caller{uid, gid};
    st = parser_.Write(
        offset, data,
        [&](const std::string& path) { return fs_->ResolvePlanEntry(path, caller); }, &published);
    if (!st.ok()) ++refused_;
  }
  if (!st.ok()) {
    uint64_t held_back = 0;
    if (refusals_logged_.Allow(&held_back)) {
      spdlog::warn("plan refused (uid {}): {}; the previous plan stays{}", uid, st.message(),
                   held_back == 0 ? ""
                                  : fmt::format(" ({} more refusals not logged)", held_back));
    }
    return st;  // EACCES for a file the writer may not read, EINVAL for everything else
  }
  if (published && prefetcher_) prefetcher_->Publish(std::move(*published));
  return Status::Ok();
}

std::string PlanFile::Summary() const {
  const prefetch::PrefetcherStats s = prefetcher_ ? prefetcher_->Stats() : prefetch::PrefetcherStats{};
  MutexLock lock(mu_);
  return fmt::format("epochfs-plan 1\n# {} entries, position {}, {} plans published, {} refused\n",
                     s.plan_entries, s.plan_position, s.plans_published, refused_);
}

}  // namespace epochfs::fs
