#include "fs/plan_file.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <map>
#include <optional>
#include <vector>

#include "base/thread_name.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {

PlanFile::PlanFile(SourceFs* fs, prefetch::Prefetcher* prefetcher,
                   prefetch::PlanParserOptions options, std::chrono::milliseconds resolve_budget)
    : fs_(fs),
      prefetcher_(prefetcher),
      options_(options),
      resolve_budget_(resolve_budget),
      reaper_([this] { RunReaper(); }),
      resolver_([this] { RunResolver(); }) {}

PlanFile::~PlanFile() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    cancel_chunk_ = true;  // a chunk being checked stops (set under mu_: see RunResolver)
  }
  stop_cv_.notify_all();
  pending_cv_.notify_all();
  reaper_.join();
  resolver_.join();
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
  uint32_t live = 0;
  for (const auto& [pid, p] : publishers_) {
    if (!p.live()) continue;
    ++live;  // with entries still being checked, and none checked yet, it is still a plan
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
  return {std::move(merged), live};
}

bool PlanFile::ReapLocked() {
  bool dropped = false;
  for (auto it = publishers_.begin(); it != publishers_.end();) {
    const pid_t pid = it->first;
    const bool gone = pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
    if (gone) {
      SupersededLocked(it->second.generation);
      if (it->second.live()) {
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

namespace {
// A write with fewer distinct lines is resolved as the parser goes; more are resolved by
// up to kResolveThreads threads (round trips to a network source overlap).
constexpr size_t kParallelResolveMin = 64;
constexpr size_t kResolveThreads = 32;
// A folder that this many entries name is listed before they are resolved; the listing
// stops after kListPerEntry entries per entry named (a plan of a few files of a huge
// folder does not read all of it).
constexpr size_t kListFolderMin = 16;
constexpr uint64_t kListPerEntry = 4;
// Entries checked after publication go in chunks of a quarter of the plan published so
// far, within these bounds: each chunk re-merges the plans (their length, under the
// prefetcher's lock), so the chunks grow with them; and readahead sees a chunk only once
// it is checked, so they stay small enough to come often.
constexpr size_t kResolveChunkMin = 1024;
constexpr size_t kResolveChunkMax = 65536;

// The end of a refusal's log line: how many the LogLimiter held back since the last one.
std::string NotLogged(uint64_t held_back) {
  return held_back == 0 ? "" : fmt::format(" ({} more refusals not logged)", held_back);
}

bool Unchecked(const prefetch::PlannedFile& f) { return f.key.dev == 0 && f.key.ino == 0; }
}  // namespace

const prefetch::PlannedFile* PlanFile::Reused(const Reusable* reusable, const std::string& path) {
  if (reusable == nullptr) return nullptr;
  auto it = reusable->find(path);
  if (it == reusable->end()) return nullptr;
  reused_.fetch_add(1, std::memory_order_relaxed);
  return &it->second;
}

std::vector<std::optional<Result<prefetch::PlannedFile>>> PlanFile::ResolveAll(
    const std::vector<std::string>& paths, Caller caller,
    std::chrono::steady_clock::time_point until, const std::atomic<bool>* cancel) {
  std::vector<std::optional<Result<prefetch::PlannedFile>>> answers(paths.size());
  if (paths.empty()) return answers;
  const size_t threads =
      std::clamp<size_t>(paths.size() / (kParallelResolveMin / 2), 1, kResolveThreads);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      NameThisThread("plan-resolve");
      SourceFs::CheckedFolders folders;  // each thread its own: a folder is checked a few times
      for (size_t i = t; i < paths.size(); i += threads) {
        if ((cancel != nullptr && cancel->load(std::memory_order_relaxed)) ||
            std::chrono::steady_clock::now() >= until) {
          return;
        }
        answers[i] = fs_->ResolvePlanEntry(paths[i], caller, &folders);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  return answers;
}

PlanFile::Resolved PlanFile::PreResolve(std::string_view data, Caller caller,
                                        const Reusable* reusable,
                                        std::chrono::steady_clock::time_point until) {
  // Distinct complete lines; the parser decides what each line is (header, entry, end)
  // and asks for the entries it reaches, in order: an answer it never asks for is
  // dropped with the map.
  std::vector<std::string> paths;
  Resolved resolved;
  for (size_t start = data.find('\n'); start != std::string_view::npos;) {
    const size_t end = data.find('\n', start + 1);
    if (end == std::string_view::npos) break;
    std::string line(data.substr(start + 1, end - start - 1));
    start = end;
    if (line.empty() || resolved.count(line) != 0) continue;
    if (const prefetch::PlannedFile* known = Reused(reusable, line)) {
      resolved.emplace(std::move(line), *known);
      continue;
    }
    resolved.emplace(line, Status::NotFound(""));
    paths.push_back(std::move(line));
  }
  if (paths.size() < kParallelResolveMin) {
    // Few enough for the parser to resolve as it goes; the reused entries stay.
    for (const std::string& path : paths) resolved.erase(path);
    return resolved;
  }
  // A plan names each of a few folders thousands of times. On a network source each
  // entry's lookup is a round trip; a listing of the folder first leaves every name and
  // its attributes in the kernel's caches, a round trip per few hundred entries
  // (docs/benchmarks.md, "Figures behind design choices").
  std::map<std::string, uint64_t> named;  // folder -> entries in it
  for (const std::string& path : paths) {
    if (!prefetch::PlanParser::CheckPath(path, PATH_MAX).ok()) continue;  // refused anyway
    const size_t slash = path.rfind('/');
    ++named[slash == std::string::npos ? std::string() : path.substr(0, slash)];
  }
  std::vector<std::pair<std::string, uint64_t>> to_list;
  for (const auto& [folder, count] : named) {
    if (count >= kListFolderMin) to_list.emplace_back(folder, count);
  }
  if (!to_list.empty()) {
    std::vector<std::thread> listers;
    const size_t n = std::min(kResolveThreads, to_list.size());
    for (size_t t = 0; t < n; ++t) {
      listers.emplace_back([&, t] {
        NameThisThread("plan-list");
        for (size_t i = t; i < to_list.size(); i += n) {
          if (std::chrono::steady_clock::now() >= until) return;
          fs_->ListPlanFolder(to_list[i].first, caller, kListPerEntry * to_list[i].second);
        }
      });
    }
    for (std::thread& l : listers) l.join();
  }
  std::vector<std::optional<Result<prefetch::PlannedFile>>> answers = ResolveAll(paths, caller, until);
  for (size_t i = 0; i < paths.size(); ++i) {
    if (answers[i]) {
      resolved.insert_or_assign(paths[i], std::move(*answers[i]));
    } else {
      resolved.erase(paths[i]);  // not reached in time: checked after publication
    }
  }
  return resolved;
}

void PlanFile::SupersededLocked(uint64_t generation) {
  if (generation != 0 && generation == checking_generation_) cancel_chunk_ = true;
}

void PlanFile::RunResolver() {
  NameThisThread("plan-checks");
  MutexLock lock(mu_);
  pid_t last = 0;  // publishers take turns, a chunk each
  while (!stop_) {
    auto next = publishers_.upper_bound(last);
    bool found = false;
    for (size_t seen = 0; seen < publishers_.size() && !found; ++seen) {
      if (next == publishers_.end()) next = publishers_.begin();
      found = !next->second.pending.empty();
      if (!found) ++next;
    }
    if (!found) {
      lock.Wait(pending_cv_);
      continue;
    }
    last = next->first;
    Publisher& job = next->second;
    const size_t n = std::min(job.pending.size(),
                              std::clamp(job.plan.size() / 4, kResolveChunkMin, kResolveChunkMax));
    // Taken out of `pending`: the chunk is this thread's now, and `pending` shrinks.
    std::vector<prefetch::PlannedFile> chunk(std::make_move_iterator(job.pending.begin()),
                                             std::make_move_iterator(job.pending.begin() + n));
    job.pending.erase(job.pending.begin(), job.pending.begin() + n);
    const uint64_t generation = job.generation;
    const Caller caller = job.pending_for;
    std::vector<std::string> paths;
    for (const prefetch::PlannedFile& f : chunk) {
      if (Unchecked(f)) paths.push_back(f.path);
    }
    checking_generation_ = generation;
    cancel_chunk_ = false;
    lock.Unlock();
    std::vector<std::optional<Result<prefetch::PlannedFile>>> answers =
        ResolveAll(paths, caller, std::chrono::steady_clock::time_point::max(), &cancel_chunk_);
    lock.Lock();
    checking_generation_ = 0;
    if (stop_) break;
    auto it = publishers_.find(last);
    // Gone, or a newer plan replaced this one: what was checked is of no use.
    if (it == publishers_.end() || it->second.generation != generation) continue;
    Publisher& p = it->second;
    size_t answer = 0;
    uint64_t refused = 0;
    std::string first_refusal;
    for (prefetch::PlannedFile& f : chunk) {
      if (Unchecked(f)) {
        std::optional<Result<prefetch::PlannedFile>>& a = answers[answer++];
        if (!a || !a->ok()) {
          if (refused++ == 0 && a) first_refusal = fmt::format("'{}': {}", f.path, a->status().message());
          // Left out: no longer charged.
          p.plan_bytes -= std::min(p.plan_bytes, prefetch::kBytesPerPlanEntry + f.path.size());
          continue;
        }
        f = std::move(**a);
      }
      p.plan.push_back(std::move(f));
    }
    if (refused != 0) {
      refused_late_ += refused;
      uint64_t held_back = 0;
      if (refusals_logged_.Allow(&held_back)) {
        spdlog::warn("plan of process {}: {} entries left out, checked after the plan was "
                     "published (first: {}){}",
                     last, refused, first_refusal, NotLogged(held_back));
      }
    }
    auto [merged, plans] = MergeLocked();
    // The same epoch: the plan only grew.
    if (prefetcher_) prefetcher_->Publish(std::move(merged), /*new_epoch=*/false, plans);
  }
}

Status PlanFile::Write(uint64_t offset, std::string_view data, uid_t uid, gid_t gid, pid_t pid) {
  // A new plan: its entries that this publisher's previous plan had are taken from it
  // while that was checked recently enough, for the same writer (see plan_file.h).
  std::shared_ptr<const Reusable> reusable;
  // Entries this plan's writes reach by then are checked now; later ones once it is
  // published (see plan_file.h).
  auto until = std::chrono::steady_clock::now() + resolve_budget_;
  {
    MutexLock lock(mu_);
    if (auto it = publishers_.find(pid); it != publishers_.end()) {
      Publisher& p = it->second;
      if (offset == 0) {
        p.resolve_until = until;
        const auto now = std::chrono::steady_clock::now();
        const bool same_writer = p.checked_for.uid == uid && p.checked_for.gid == gid;
        if (!p.plan.empty() && same_writer && now - p.checked_at < kRecheckAfter) {
          auto previous = std::make_shared<Reusable>();
          previous->reserve(p.plan.size());
          for (const prefetch::PlannedFile& f : p.plan) previous->emplace(f.path, f);
          p.reusable = std::move(previous);
        } else {
          p.reusable.reset();
          p.checked_at = now;
          p.checked_for = Caller{uid, gid};
        }
      }
      reusable = p.reusable;
      if (offset != 0) until = p.resolve_until;
    }
  }
  // Resolving an entry stats the source a few times; on a network filesystem each stat
  // is a round trip, and the publisher's epoch waits for them all (docs/benchmarks.md,
  // "Figures behind design choices"). The lines of this write are resolved first, in
  // parallel and outside the lock; the parser then takes its answers from them. The
  // first line of `data` is skipped (it may continue the previous write's last line).
  const Resolved resolved = PreResolve(data, Caller{uid, gid}, reusable.get(), until);
  Status st;
  {
    MutexLock lock(mu_);
    // A plan that starts is merged with the live ones: a process gone since the
    // reaper's last round (up to a second ago) must not count as live. A job restarted
    // at once would otherwise join its dead predecessor's epoch.
    if (offset == 0) ReapLocked();
    auto it = publishers_.find(pid);
    if (it == publishers_.end()) {
      if (publishers_.size() >= kMaxPublishers) ReapLocked();
      if (publishers_.size() >= kMaxPublishers) {
        st = Status::FromErrno(EBUSY, fmt::format("{} processes have plans already",
                                                  kMaxPublishers));
      } else {
        it = publishers_.emplace(pid, Publisher(options_)).first;
        it->second.checked_at = std::chrono::steady_clock::now();
        it->second.checked_for = Caller{uid, gid};
        it->second.resolve_until = until;
      }
    }
    std::optional<std::vector<prefetch::PlannedFile>> published;
    if (st.ok()) {
      Publisher& p = it->second;
      const Caller caller{uid, gid};
      // What was checked stands for the plan being written, by the same writer.
      if (offset == 0 || p.folders_for.uid != uid || p.folders_for.gid != gid) {
        p.folders.clear();
        p.folders_for = caller;
      }
      st = p.parser.Write(
          offset, data,
          [&](const std::string& path) -> Result<prefetch::PlannedFile> {
            if (auto it = resolved.find(path); it != resolved.end()) return it->second;
            if (const prefetch::PlannedFile* known = Reused(reusable.get(), path)) return *known;
            if (std::chrono::steady_clock::now() < until) {
              return fs_->ResolvePlanEntry(path, caller, &p.folders);
            }
            return prefetch::PlannedFile{path, {}, 0};  // Unchecked: checked once published
          },
          &published);
      if (published || !p.parser.writing()) {  // the plan is done: what it checked goes
        p.folders.clear();
        p.reusable.reset();
      }
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
        for (const auto& [other, q] : publishers_) others |= other != pid && q.live();
        const bool new_epoch = p.live() || !others;
        p.plan_bytes = published->empty() ? 0 : p.parser.entry_bytes();
        // The checked entries up to the first unchecked one are published now; the rest
        // join them as the resolver checks them, in order.
        auto first_unchecked = std::find_if(published->begin(), published->end(), Unchecked);
        p.pending.assign(std::make_move_iterator(first_unchecked),
                         std::make_move_iterator(published->end()));
        p.pending_for = caller;
        published->erase(first_unchecked, published->end());
        p.plan = std::move(*published);
        SupersededLocked(p.generation);
        p.generation = ++generations_;
        if (!p.pending.empty()) pending_cv_.notify_one();
        auto [merged, plans] = MergeLocked();
        // The publisher's opens up to this write are its last epoch's, though fanotify may
        // not have delivered them yet ("notify" mode): counted in the new epoch, one read
        // again there would end it early, and its plan with it.
        if (new_epoch && fs_ != nullptr) fs_->BeforeNewEpochPlan();
        if (prefetcher_) prefetcher_->Publish(std::move(merged), new_epoch, plans);
      }
    }
    if (!st.ok()) ++refused_;
  }
  if (!st.ok()) {
    uint64_t held_back = 0;
    if (refusals_logged_.Allow(&held_back)) {
      spdlog::warn("plan refused (uid {}, pid {}): {}; the previous plan stays{}", uid, pid,
                   st.message(), NotLogged(held_back));
    }
  }
  return st;  // EACCES for a file the writer may not read, EINVAL for everything else
}

size_t PlanFile::live_plans() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [pid, p] : publishers_) n += p.live() ? 1 : 0;
  return n;
}

std::string PlanFile::Summary() const {
  const prefetch::PrefetcherStats s = prefetcher_ ? prefetcher_->Stats() : prefetch::PrefetcherStats{};
  MutexLock lock(mu_);
  uint64_t checking = 0;
  for (const auto& [pid, p] : publishers_) checking += p.pending.size();
  return fmt::format(
      "epochfs-plan 1\n# {} live plans, {} entries, position {}, {} plans published, {} refused, "
      "{} entries reused, {} entries being checked, {} entries left out after publication\n",
      s.plans, s.plan_entries, s.plan_position, s.plans_published, refused_, reused_.load(),
      checking, refused_late_);
}

}  // namespace epochfs::fs
