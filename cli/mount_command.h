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

// What `epochfs umount` is asked to do besides unmounting.
struct UmountOptions {
  bool lazy = false;       // detach now, finish once nothing uses the mount
  bool dead_only = false;  // only a mount whose daemon is gone (the unit's ExecStopPost)
  // Abort the mount's FUSE connection first (/sys/fs/fuse/connections/N/abort): every
  // request in flight fails with ENOTCONN, which frees a daemon that no longer answers,
  // even one killed while its thread waited on the kernel (a zombie holding /dev/fuse).
  bool abort = false;
};

// Unmounts `mountpoint` and waits up to 5 minutes for its daemon to flush.
int RunUmountCommand(const std::string& mountpoint, const UmountOptions& options);

}  // namespace epochfs::cli
