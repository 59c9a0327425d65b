// Running one epochfs mount: the daemon's life from "source fd taken" to "unmounted
// and flushed".
//
// Thread-safety: RunMount blocks the calling thread and starts libfuse's workers and
// the cache's writer; call it once per process, after any fork().
#pragma once

#include <functional>

#include "base/status.h"
#include "daemon/options.h"

namespace epochfs::daemon {

// Mounts `options.source` on `options.mountpoint` (validated and resolved already) and
// serves it until it is unmounted or the process gets SIGTERM/SIGINT/SIGHUP. `ready`
// is called exactly once: with Ok as soon as the mount answers (a stat of it has
// returned, the kernel's readahead is set), or with the reason it could not be made. It
// may be called from a thread of RunMount's own. Returns the process exit code.
int RunMount(const MountOptions& options, const std::function<void(const Status&)>& ready);

}  // namespace epochfs::daemon
