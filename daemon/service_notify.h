// Telling systemd (Type=notify) where the daemon is in its life: READY=1 once the
// mount answers, STOPPING=1 when it starts to go down.
//
// Both are sd_notify(3) messages to $NOTIFY_SOCKET and do nothing when it is unset, so
// a mount started by hand or by mount(8) behaves as before. READY=1 carries MAINPID
// (the daemon is the process that stays) and a STATUS= line `systemctl status` shows.
//
// Thread-safety: thread-safe (each call is one datagram); StatusReporter's `status`
// runs on its own thread and must be thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "base/thread_annotations.h"

namespace epochfs::daemon {

void NotifyReady(const std::string& status_line);
void NotifyStopping();

// Sends STATUS=<status()> every `interval` while it lives, so `systemctl status` shows
// the mount's hit ratio and source IO. Starts no thread when $NOTIFY_SOCKET is unset.
class StatusReporter {
 public:
  StatusReporter(std::function<std::string()> status, std::chrono::milliseconds interval);
  ~StatusReporter();
  StatusReporter(const StatusReporter&) = delete;
  StatusReporter& operator=(const StatusReporter&) = delete;

 private:
  Mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace epochfs::daemon
