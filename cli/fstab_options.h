// Translating mount(8) / fstab options into `epochfs mount` flags, for the
// `mount.epochfs` helper (cli/mount_helper.cc).
//
// mount(8) runs `mount.epochfs SOURCE MOUNTPOINT [-sfnv] [-o OPTS]` for
// `mount -t epochfs` and for fstab lines of type epochfs. OPTS is a comma-separated
// list mixing epochfs options (`ram=8G,cache_dir=/nvme/epochfs`) with options that are
// mount(8)'s or systemd's business (`_netdev`, `nofail`, `x-systemd.*`, `defaults`),
// which are ignored. Anything else is refused, unless sloppy (-s) is given, so that a
// typo in fstab fails the mount instead of being dropped. Which options exist and the
// flag each becomes are the rows of cli/option_table.h.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace epochfs::cli {

struct HelperInvocation {
  std::string source;
  std::string mountpoint;
  std::vector<std::string> options;  // the -o list, split at commas
  bool fake = false;                 // -f: do everything but mount
  bool sloppy = false;               // -s: ignore unknown options
  bool verbose = false;              // -v
};

// Parses the helper's own argv (argv[0] excluded).
Result<HelperInvocation> ParseHelperArgs(const std::vector<std::string>& args);

// The `epochfs` arguments after the program name: {"mount", SOURCE, MOUNTPOINT, flags...}.
Result<std::vector<std::string>> TranslateFstabOptions(const HelperInvocation& inv);

}  // namespace epochfs::cli
