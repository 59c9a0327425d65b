// LogLimiter: at most `burst` log lines per `period` for one kind of message that
// anyone can cause (a refused plan from an unprivileged user, say), and a count of the
// lines it held back, to report with the next one let through. Without it a loop of bad
// writes grows the log by hundreds of MB in seconds.
//
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/thread_annotations.h"

namespace epochfs {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(uint32_t burst, Clock::duration period) : burst_(burst), period_(period) {}

  // Whether to log this one now. When it says yes, `*held_back` is how many lines it
  // said no to since the last yes (to say "N more like it were not logged").
  bool Allow(uint64_t* held_back, Clock::time_point now = Clock::now()) {
    MutexLock lock(mu_);
    if (now - window_start_ >= period_) {
      window_start_ = now;
      allowed_in_window_ = 0;
    }
    if (allowed_in_window_ >= burst_) {
      ++held_back_;
      return false;
    }
    ++allowed_in_window_;
    *held_back = held_back_;
    held_back_ = 0;
    return true;
  }

 private:
  const uint32_t burst_;
  const Clock::duration period_;
  Mutex mu_;
  Clock::time_point window_start_ GUARDED_BY(mu_){};
  uint32_t allowed_in_window_ GUARDED_BY(mu_) = 0;
  uint64_t held_back_ GUARDED_BY(mu_) = 0;
};

}  // namespace epochfs
