// `epochfs mount` and `epochfs umount`: checks that refuse bad input before anything is
// made, the daemon started in the background (the command returns once the mount
// answers) or in the foreground, and an unmount that waits for the daemon's flush.
//
// Thread-safety: each function blocks the calling thread; call from main only (the
// background mount forks).
#pragma once

#include <string>

#include "daemon/options.h"

namespace epochfs::cli {

// Exit codes: 0 mounted; 2 refused (a one-line message says why, nothing is left
// mounted or created); 1 a failure while running (foreground).
int RunMountCommand(daemon::MountOptions options);

// Unmounts `mountpoint` (lazily with `lazy`) and waits up to 5 minutes for its daemon
// to flush. `dead_only`: only a mount whose daemon is gone (the unit's ExecStopPost).
int RunUmountCommand(const std::string& mountpoint, bool lazy, bool dead_only);

}  // namespace epochfs::cli
