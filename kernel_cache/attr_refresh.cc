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
  folders_[KernelListing::FolderOf(path)].Read(std::chrono::steady_clock::now());
}

void AttrRefresh::FolderReads::Read(Clock::time_point now) {
  if (last_read_ != Clock::time_point{}) gap_ = (3 * gap_ + (now - last_read_)) / 4;
  ++pending_;
  if (first_pass_) ++first_pass_reads_;
  last_read_ = now;
}

bool AttrRefresh::FolderReads::Due(Clock::time_point now) const {
  if (pending_ == 0 || given_up()) return false;
  const bool quiet =
      now - last_read_ >= std::max<Clock::duration>(kQuiet, kQuietGaps * gap_);
  // A listed entry costs the daemon a little less than the GETATTR it saves (a stat in
  // the source each), so a folder is listed mostly when much of it is due: the listing
  // then costs about what the GETATTRs would, and none of it is in the readers' opens.
  if (entries_ == 0) {
    return pending_ >= kFirstBatch || (quiet && pending_ >= kFirstBatchQuiet);
  }
  if (4 * uint64_t{pending_} >= 3 * entries_) return true;
  // The first pass is over: the folder's last files were just read. Listed now, not
  // once quiet: the next epoch may begin at once and stat them (a small data set's
  // epochs follow each other within the quiet); an eighth of it due is worth a listing.
  if (first_pass_ && files_ > 0 && first_pass_reads_ >= files_ &&
      8 * uint64_t{pending_} >= files_) {
    return true;
  }
  return quiet && 4 * uint64_t{pending_} >= entries_;
}

uint32_t AttrRefresh::FolderReads::StartListing() {
  first_pass_reads_listed_ = first_pass_reads_;
  return std::exchange(pending_, 0);
}

void AttrRefresh::FolderReads::Listed(const std::optional<KernelListing::Listed>& listed,
                                      Clock::duration took) {
  if (!listed || took > kMaxListing) {
    entries_ = kMaxEntries + 1;  // gone, the mount going, or a source too slow: never again
    return;
  }
  // One listed empty is known; one past kMaxEntries is never listed again.
  entries_ = std::max<uint64_t>(std::min(listed->entries, kMaxEntries + 1), 1);
  files_ = listed->files;
  // The first pass ends with the listing that came after its last READ; one that came
  // while this listing ran is for the next listing.
  if (first_pass_reads_listed_ >= files_) first_pass_ = false;
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
      if (folder.Due(now)) due.push_back(name);
    }
    uint64_t listed_entries = 0;
    for (const std::string& name : due) {
      if (stop_ || listed_entries >= kEntriesPerTick) break;  // the rest at the next tick
      const uint32_t refreshed = folders_[name].StartListing();
      lock.Unlock();
      const auto started = std::chrono::steady_clock::now();
      const std::optional<KernelListing::Listed> listed =
          KernelListing::ListFolder(mount_, name, kMaxEntries);
      const auto took = std::chrono::steady_clock::now() - started;
      lock.Lock();
      folders_[name].Listed(listed, took);
      if (!listed) continue;
      listed_entries += listed->entries;
      listings_.fetch_add(1, std::memory_order_relaxed);
      entries_listed_.fetch_add(listed->entries, std::memory_order_relaxed);
      files_refreshed_.fetch_add(refreshed, std::memory_order_relaxed);
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
