// PlanPublisher: tells an epochfs mount the exact order in which files will be read.
//
// The contract with the filesystem: `<mount root>/.epochfs/` is a hidden control folder
// (found by lookup, never listed). Writing UTF-8 text to `<root>/.epochfs/plan` -- first
// line exactly "epochfs-plan 1", then one path per line, relative to the mount root, in
// read order (one epoch, or this rank's shard of it), then an empty line -- publishes a
// plan, applied when the empty line arrives (in epochfs's "notify" mode there is no
// close the daemon could see). A refused plan makes write() fail (EINVAL, or EACCES for
// a file the writer may not read); the loader
// logs that as a warning and reads anyway: publishing is an optimisation.
//
// The mount root is found by walking up from the first file's folder and checking each
// ancestor for `.epochfs/plan`, stopping at a filesystem boundary or `/`. Paths are made
// relative to it through the canonical path of each file's folder (symlinked data
// folders work); a file outside the root, or whose name holds a newline, is left out of
// the plan (counted in unplannable()).
//
// Thread-safety: const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/loader.h"

namespace epochfs::loader {

// The epochfs mount root at or above folder `dir`, or "" when there is none.
std::string FindEpochfsRoot(const std::string& dir);

class PlanPublisher {
 public:
  static constexpr const char* kHeader = "epochfs-plan 1\n";

  // A publisher for `files`, or nullptr when they are not on an epochfs mount.
  static std::unique_ptr<PlanPublisher> ForFiles(const std::vector<std::string>& files);
  // A publisher writing to `root`/.epochfs/plan (root must be canonical).
  PlanPublisher(std::string root, const std::vector<std::string>& files);

  const std::string& root() const { return root_; }
  std::string plan_path() const { return root_ + "/.epochfs/plan"; }
  size_t unplannable() const { return unplannable_; }

  // The exact bytes Publish() writes for `order` (indices into files).
  std::string Format(const std::vector<int64_t>& order) const;
  // Writes Format(order) to the plan file and closes it; the filesystem's verdict comes
  // back as the Status (a failure is a warning to the caller, never fatal).
  Status Publish(const std::vector<int64_t>& order) const;

 private:
  std::string root_;
  std::vector<std::string> relative_;  // per file; "" when it cannot be planned
  size_t unplannable_ = 0;
};

}  // namespace epochfs::loader
