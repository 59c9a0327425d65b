#include "fs/service_notify.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::fs {

void NotifyReady(const std::string& status_line) {
  const int rc =
      sd_notify(0, fmt::format("READY=1\nMAINPID={}\nSTATUS={}", ::getpid(), status_line).c_str());
  if (rc < 0) spdlog::warn("sd_notify READY=1: {}", strerror(-rc));
  if (rc > 0) spdlog::info("told the service manager the mount is ready");
}

void NotifyStopping() {
  const int rc = sd_notify(0, "STOPPING=1\nSTATUS=Unmounted; flushing the cache");
  if (rc < 0) spdlog::warn("sd_notify STOPPING=1: {}", strerror(-rc));
}

}  // namespace epochfs::fs
