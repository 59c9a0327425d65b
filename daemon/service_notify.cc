#include "daemon/service_notify.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdlib>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::daemon {

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

StatusReporter::StatusReporter(std::function<std::string()> status,
                               std::chrono::milliseconds interval) {
  if (std::getenv("NOTIFY_SOCKET") == nullptr) return;
  thread_ = std::thread([this, status = std::move(status), interval] {
    MutexLock lock(mutex_);
    for (;;) {
      const auto deadline = std::chrono::steady_clock::now() + interval;
      while (!stopping_ && lock.WaitUntil(stop_cv_, deadline) == std::cv_status::no_timeout) {
      }
      if (stopping_) break;
      lock.Unlock();
      try {
        sd_notify(0, ("STATUS=" + status()).c_str());
      } catch (const std::exception& e) {
        // A status line is a courtesy; it must never end the daemon.
        spdlog::debug("status line: {}", e.what());
      }
      lock.Lock();
    }
  });
}

StatusReporter::~StatusReporter() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace epochfs::daemon
