// PlanFile: `<mount>/.epochfs/plan`, where a loader publishes the upcoming read order.
//
// Writes are parsed incrementally by prefetch::PlanParser (format and rules there:
// header line, one relative path per line, an empty line publishes). Each entry is
// resolved beneath the source root and checked against the writer's uid/gid, so a plan
// can neither name anything outside the source nor reveal whether a file the writer
// may not read exists beyond "refused". A refused write fails with EINVAL (EACCES for
// an unreadable file), is logged as a warning with the reason (a few per minute at
// most: a user looping on bad plans must not fill the disk), and leaves the published
// plan as it was. Reading the file returns a one-line summary of the current plan.
//
// Thread-safety: thread-safe; writes are serialised (one plan being written at a time
// per mount: a write at offset 0 from anyone starts over).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "base/log_limit.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "fs/source_fs.h"
#include "prefetcher/plan_parser.h"
#include "prefetcher/prefetcher.h"

namespace epochfs::fs {

class PlanFile {
 public:
  // Both must outlive the PlanFile.
  PlanFile(SourceFs* fs, prefetch::Prefetcher* prefetcher,
           prefetch::PlanParserOptions options = {})
      : fs_(fs), prefetcher_(prefetcher), parser_(options) {}

  Status Write(uint64_t offset, std::string_view data, uid_t uid, gid_t gid);
  std::string Summary() const;

 private:
  SourceFs* const fs_;
  prefetch::Prefetcher* const prefetcher_;
  mutable Mutex mu_;
  prefetch::PlanParser parser_ GUARDED_BY(mu_);
  uint64_t refused_ GUARDED_BY(mu_) = 0;
  // Anyone allowed to write the plan can cause a refusal: 5 lines per minute at most
  // (all are counted in the summary).
  LogLimiter refusals_logged_{5, std::chrono::minutes(1)};
};

}  // namespace epochfs::fs
