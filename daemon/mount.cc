#include "daemon/mount.h"

#include "daemon/daemon.h"
#include "spdlog/spdlog.h"

namespace epochfs::daemon {

int RunMount(const MountOptions& options, const std::function<void(const Status&)>& ready) {
  bool mounted = false;
  int rc = 2;
  {
    auto daemon = Daemon::Create(options);
    if (!daemon.ok()) {
      spdlog::error("mount failed: {}", daemon.status().ToString());
      ready(daemon.status());
      return 2;
    }
    rc = (*daemon)->Run(ready);
    mounted = (*daemon)->mounted();
  }  // ~Daemon: the shutdown sequence (daemon/daemon.h)
  if (mounted) {
    spdlog::info("unmounted {}", options.mountpoint.string());
    spdlog::default_logger()->flush();
  }
  return rc;
}

}  // namespace epochfs::daemon
