// PlanParser: the incremental parser behind `<mount>/.epochfs/plan`.
//
// The format (what loader/plan_publisher.cc writes): UTF-8 text, first line exactly
// "epochfs-plan 1", then one path per line relative to the mount root in read order,
// then an empty line, which ends the plan and publishes it. Writes arrive as
// (offset, bytes) with no open or close in the "notify" consistency mode, so:
//  - a write at offset 0 starts a new plan (and must begin with the header);
//  - later writes must continue exactly where the last one ended;
//  - complete lines are checked and resolved as they arrive (the caller's Resolve
//    decides whether the file exists and the writer may read it); a partial line is
//    kept, at most `max_line` bytes, and the plan at most `max_entries` entries, so a
//    huge or endless plan is refused within bounded memory;
//  - the empty line publishes; data after it is an error.
// Any error (bad header, NUL byte, absolute path, `.`/`..`/empty component, a line
// longer than max_line, too many entries, an unknown or unreadable file, a write at
// the wrong offset) discards the plan being written and is returned; every later write
// fails too until a new plan starts at offset 0. The previously published plan is not
// touched by any of this: only a complete plan replaces it.
//
// Thread-safety: none; the caller serialises writes (one plan file per mount).
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prefetcher/prefetcher.h"

namespace epochfs::prefetch {

struct PlanParserOptions {
  size_t max_entries = 4'000'000;  // ImageNet-1k is 1.28M; see the memory note in architecture.md
  size_t max_line = PATH_MAX;  // bytes of one path, newline excluded
  // The most memory the plan may take once published (kBytesPerPlanEntry plus the
  // path, per entry); 0: no bound. The daemon gives it a sixteenth of --ram.
  uint64_t max_bytes = 0;
};

class PlanParser {
 public:
  static constexpr std::string_view kHeader = "epochfs-plan 1";
  using Resolve = std::function<Result<PlannedFile>(const std::string& path)>;

  explicit PlanParser(PlanParserOptions options = {}) : options_(options) {}

  // Feeds one write. On the terminating line, `*published` receives the plan.
  Status Write(uint64_t offset, std::string_view data, const Resolve& resolve,
               std::optional<std::vector<PlannedFile>>* published);

  // What the entries parsed so far are charged (kBytesPerPlanEntry plus the path each).
  uint64_t entry_bytes() const { return entry_bytes_; }
  // Whether a plan is being written (started, not yet published or refused).
  bool writing() const { return state_ == State::kHeader || state_ == State::kEntries; }
  // Abandons the plan being written with `why` (returned); later writes fail until a
  // new plan starts at offset 0.
  Status Abandon(Status why) { return Fail(std::move(why)); }

  // Checks a plan path's syntax: relative, single components, no `.`/`..`, no NUL.
  static Status CheckPath(std::string_view path, size_t max_line);

 private:
  Status Fail(Status status);
  Status Line(std::string_view line, const Resolve& resolve,
              std::optional<std::vector<PlannedFile>>* published);

  PlanParserOptions options_;
  enum class State { kIdle, kHeader, kEntries, kDone, kFailed } state_ = State::kIdle;
  uint64_t next_offset_ = 0;
  std::string partial_;
  std::vector<PlannedFile> entries_;
  uint64_t entry_bytes_ = 0;  // entries_ as counted against max_bytes
};

}  // namespace epochfs::prefetch
