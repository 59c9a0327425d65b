#include "kernel_cache/attr_refresh.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/thread_name.h"
#include "kernel_cache/kernel_listing.h"

namespace epochfs::kernel_cache {
namespace {

// How often the thread looks for folders to list while reads come, and the most entries
// it lists in one look: the FUSE workers that answer its READDIRPLUS also answer the
// readers, so it lists in short bursts with a tick's pause between them.
constexpr auto kTick = std::chrono::milliseconds(50);
constexpr uint64_t kEntriesPerTick = 2048;

}  // namespace

AttrRefresh::AttrRefresh(const MountView& mount)
    : mount_(mount), thread_([this] { Run(); }) {}

AttrRefresh::~AttrRefresh() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void AttrRefresh::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void AttrRefresh::ReadToEnd(const std::string& path) {
  MutexLock lock(mu_);
  if (stop_) return;
  Folder& folder = folders_[KernelListing::FolderOf(path)];
  const auto now = std::chrono::steady_clock::now();
  if (folder.last_read != std::chrono::steady_clock::time_point{}) {
    folder.gap = (3 * folder.gap + (now - folder.last_read)) / 4;
  }
  ++folder.pending;
  folder.last_read = now;
}

bool AttrRefresh::Due(const Folder& folder, std::chrono::steady_clock::time_point now) {
  if (folder.pending == 0 || folder.entries > kMaxEntries) return false;
  const bool quiet = now - folder.last_read >= std::max<std::chrono::steady_clock::duration>(
                                                  kQuiet, kQuietGaps * folder.gap);
  // A listed entry costs the daemon a little less than the GETATTR it saves (a stat in
  // the source each), so a folder is listed only when most of it is due: the listing
  // then costs no more CPU than the GETATTRs, and none of it is in the readers' opens.
  if (folder.entries == 0) {
    return folder.pending >= kFirstBatch || (quiet && folder.pending >= kFirstBatchQuiet);
  }
  if (4 * uint64_t{folder.pending} >= 3 * folder.entries) return true;
  return quiet && 4 * uint64_t{folder.pending} >= folder.entries;
}

void AttrRefresh::Run() {
  NameThisThread("attr-refresh");
  MutexLock lock(mu_);
  while (!stop_) {
    lock.WaitFor(cv_, kTick);
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::string> due;
    for (const auto& [name, folder] : folders_) {
      if (Due(folder, now)) due.push_back(name);
    }
    uint64_t listed = 0;
    for (const std::string& name : due) {
      if (stop_ || listed >= kEntriesPerTick) break;  // the rest at the next tick
      const uint32_t pending = std::exchange(folders_[name].pending, 0);
      lock.Unlock();
      const auto started = std::chrono::steady_clock::now();
      const std::optional<uint64_t> entries =
          KernelListing::ListFolder(mount_, name, kMaxEntries);
      const auto took = std::chrono::steady_clock::now() - started;
      lock.Lock();
      Folder& folder = folders_[name];
      if (!entries || took > kMaxListing) {
        // Gone, the mount going, or a source too slow to list: never again.
        folder.entries = kMaxEntries + 1;
        if (!entries) continue;
      } else {
        // One listed empty is known; one past kMaxEntries is never listed again.
        folder.entries = std::max<uint64_t>(std::min(*entries, kMaxEntries + 1), 1);
      }
      listed += *entries;
      listings_.fetch_add(1, std::memory_order_relaxed);
      entries_listed_.fetch_add(*entries, std::memory_order_relaxed);
      files_refreshed_.fetch_add(pending, std::memory_order_relaxed);
    }
  }
}

void AttrRefresh::VisitCounters(const AttrRefresh* refresh, const CounterVisitor& visit) {
  constexpr auto kCounter = CounterKind::kCounter;
  const auto value = [refresh](const std::atomic<uint64_t> AttrRefresh::*counter) -> uint64_t {
    return refresh ? (refresh->*counter).load(std::memory_order_relaxed) : 0;
  };
  visit(CounterInfo{"attr_refresh_listings",
                    "Folders listed again through the mount so that the kernel's attributes "
                    "of the files READs just read are fresh (no GETATTR at their next stat).",
                    kCounter}
            .Show({.row = "kernel attrs", .label = "folders relisted", .quiet = true}),
        value(&AttrRefresh::listings_));
  visit(CounterInfo{"attr_refresh_entries",
                    "Entries those listings gave the kernel.", kCounter}
            .Show({.row = "kernel attrs", .label = "entries", .quiet = true}),
        value(&AttrRefresh::entries_listed_));
  visit(CounterInfo{"attr_refresh_files",
                    "Files read by READs whose attributes those listings refreshed.", kCounter}
            .Show({.row = "kernel attrs", .label = "files refreshed", .quiet = true}),
        value(&AttrRefresh::files_refreshed_));
}

}  // namespace epochfs::kernel_cache
