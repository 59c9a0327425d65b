// PlanFile: `<mount>/.epochfs/plan`, where loaders publish their upcoming read orders.
//
// Writes are parsed incrementally by prefetch::PlanParser (format and rules there:
// header line, one relative path per line, an empty line publishes). Each entry is
// resolved beneath the source root and checked against the writer's uid/gid, so a plan
// can neither name anything outside the source nor reveal whether a file the writer
// may not read exists beyond "refused". A refused write fails with EINVAL (EACCES for
// an unreadable file), is logged as a warning with the reason (a few per minute at
// most: a user looping on bad plans must not fill the disk), and leaves the published
// plans as they were. Reading the file returns a one-line summary.
//
// Many publishers. Each writing process (its pid, as the kernel reports it: a rank, or
// the main process of a loader) has a plan of its own: a write at offset 0 starts that
// process's next plan and touches no other's. The prefetcher gets one order merged from
// every live plan by position (entry 0 of each, then entry 1 of each, ...), so each
// publisher gets a fair share of the readahead ahead of it and of the RAM budget. A
// process's plan goes when it publishes an empty one, or when the process is gone
// (checked every second). A publisher's new plan starts a new epoch; a plan joining or
// leaving the others does not (what was read this epoch stays read). Memory: the live
// plans and those being written share one bound (PlanParserOptions::max_bytes, a
// sixteenth of --ram), apart from a publisher's previous plan while its next one is
// written; at most kMaxPublishers processes at once (EBUSY beyond).
//
// Checked once a minute. Each entry costs a few stats of the source, and on a network
// filesystem each is a round trip, which holds the publisher, a DataLoader at the start
// of its epoch, for all of them (docs/benchmarks.md, "Figures behind design choices").
// A process publishes much the same files every epoch, so an entry its previous plan
// had is taken from that plan while the writer is the same uid/gid and its plans were
// last checked in full less than kRecheckAfter ago; new entries are checked as always.
// A file made unreadable to the writer thus leaves its plans within a minute (a plan
// only guides readahead: reads are checked by the kernel, and their bytes by identity).
//
// Checking takes at most a moment of the writer's time. On a cold source (after a
// reboot, a data set of millions of files) each entry's check reads its folder and inode
// from a slow disk, for seconds of the writer's time (docs/benchmarks.md, "Figures
// behind design choices"), and the epoch then started, its metadata warm, after the
// whole wait. So the entries a plan's writes reach within `resolve_budget` of its first
// write are checked as above (a refusal fails the write); the rest are checked
// afterwards, in plan order, by a thread of the PlanFile, and join the published plan
// as they are (the same epoch): readahead follows the checked part, and the checks warm
// the source's metadata in the order the reader needs it. An entry refused there is
// left out of the plan, counted and logged; the write that carried it has succeeded
// already.
//
// Thread-safety: thread-safe; writes are serialised. Owns a thread that drops the plans
// of processes that are gone, and one that checks entries past the budget.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/log_limit.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "fs/source_fs.h"
#include "prefetcher/plan_parser.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {

class PlanFile {
 public:
  static constexpr size_t kMaxPublishers = 256;
  static constexpr std::chrono::seconds kRecheckAfter{60};
  static constexpr std::chrono::milliseconds kResolveBudget{200};

  // Both must outlive the PlanFile.
  PlanFile(SourceFs* fs, prefetch::Prefetcher* prefetcher,
           prefetch::PlanParserOptions options = {},
           std::chrono::milliseconds resolve_budget = kResolveBudget);
  ~PlanFile();
  PlanFile(const PlanFile&) = delete;
  PlanFile& operator=(const PlanFile&) = delete;

  // A write by process `pid` (0: unknown, all such writes share one plan).
  Status Write(uint64_t offset, std::string_view data, uid_t uid, gid_t gid, pid_t pid = 0);
  std::string Summary() const;
  // Live plans now (for tests and the summary).
  size_t live_plans() const;

 private:
  // A publisher's previous plan, by path (see Write).
  using Reusable = std::unordered_map<std::string, prefetch::PlannedFile>;
  struct Publisher {
    explicit Publisher(const prefetch::PlanParserOptions& options) : parser(options) {}
    prefetch::PlanParser parser;
    std::vector<prefetch::PlannedFile> plan;  // published; empty: none
    uint64_t plan_bytes = 0;                  // what `plan` is charged (kBytesPerPlanEntry + path)
    // The folders the plan being written has had checked, and for whom (SourceFs).
    SourceFs::CheckedFolders folders;
    Caller folders_for;
    // When, and for whom, this publisher's plans were last checked in full; the
    // previous plan's entries, by path, for the plan being written while that holds.
    std::chrono::steady_clock::time_point checked_at{};
    Caller checked_for;
    std::shared_ptr<const Reusable> reusable;
    // The plan being written is checked as it is written until this moment; later
    // entries are checked after it is published (see the top of this file).
    std::chrono::steady_clock::time_point resolve_until{};
    // The published plan's entries not checked yet, in plan order, for `pending_for`;
    // an entry with key {0, 0} is not checked (a checked one may follow: taken from the
    // previous plan). `generation` names the publication (unique in the PlanFile, also
    // across a reused pid), so that checks made for a plan since replaced are dropped.
    std::deque<prefetch::PlannedFile> pending;
    Caller pending_for;
    uint64_t generation = 0;
    bool live() const { return !plan.empty() || !pending.empty(); }
  };
  // The merged order of every live plan, and how many there are.
  std::pair<std::vector<prefetch::PlannedFile>, uint32_t> MergeLocked() const REQUIRES(mu_);
  uint64_t ChargedLocked(pid_t except) const REQUIRES(mu_);
  // The complete lines of one write, resolved in parallel (see Write); lines not
  // reached by `until` are left out.
  using Resolved = std::unordered_map<std::string, Result<prefetch::PlannedFile>>;
  Resolved PreResolve(std::string_view data, Caller caller, const Reusable* reusable,
                      std::chrono::steady_clock::time_point until);
  // `paths` resolved by up to kResolveThreads threads, in order; an entry not reached
  // before `until`, or before `*cancel` is set (a superseded chunk, the PlanFile
  // stopping), is nullopt.
  std::vector<std::optional<Result<prefetch::PlannedFile>>> ResolveAll(
      const std::vector<std::string>& paths, Caller caller,
      std::chrono::steady_clock::time_point until, const std::atomic<bool>* cancel = nullptr);
  // A publisher's plan of generation `generation` is replaced or gone: a chunk of it being
  // checked now stops.
  void SupersededLocked(uint64_t generation) REQUIRES(mu_);
  // Checks published plans' pending entries, a chunk at a time (see the top of the file).
  void RunResolver();
  // `path`'s entry in `reusable` (may be null), counted as reused; null if none.
  const prefetch::PlannedFile* Reused(const Reusable* reusable, const std::string& path);
  // Drops the plans of processes that are gone; returns whether any went.
  bool ReapLocked() REQUIRES(mu_);
  void RunReaper();

  SourceFs* const fs_;
  prefetch::Prefetcher* const prefetcher_;
  const prefetch::PlanParserOptions options_;
  mutable Mutex mu_;
  std::map<pid_t, Publisher> publishers_ GUARDED_BY(mu_);
  const std::chrono::milliseconds resolve_budget_;
  uint64_t refused_ GUARDED_BY(mu_) = 0;
  uint64_t refused_late_ GUARDED_BY(mu_) = 0;  // entries left out after publication
  std::atomic<uint64_t> reused_{0};  // entries taken from a previous plan unchecked
  bool stop_ GUARDED_BY(mu_) = false;
  std::condition_variable stop_cv_;
  std::condition_variable pending_cv_;  // a plan with pending entries was published
  uint64_t generations_ GUARDED_BY(mu_) = 0;
  uint64_t checking_generation_ GUARDED_BY(mu_) = 0;  // of the chunk being checked; 0: none
  // Set, under mu_, to stop the chunk being checked (superseded, or the PlanFile stops).
  std::atomic<bool> cancel_chunk_{false};
  // Anyone allowed to write the plan can cause a refusal: 5 lines per minute at most
  // (all are counted in the summary).
  LogLimiter refusals_logged_{5, std::chrono::minutes(1)};
  std::thread reaper_;
  std::thread resolver_;
};

}  // namespace epochfs::fs
