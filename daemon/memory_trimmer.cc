#include "daemon/memory_trimmer.h"
#include "base/thread_name.h"

#include <malloc.h>

namespace epochfs::daemon {

MemoryTrimmer::MemoryTrimmer(std::chrono::milliseconds period, uint64_t slack)
    : period_(period), slack_(slack), thread_([this] { Loop(); }) {}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t MemoryTrimmer::FreeHeapBytes() { return ::mallinfo2().fordblks; }

void MemoryTrimmer::Loop() {
  NameThisThread("mem-trimmer");
  // A trim leaves the free chunks in malloc's lists (only their pages go back), so the
  // free total stays high after it: trim again only once it has moved by half the slack.
  uint64_t free_at_last_trim = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    const uint64_t free_now = FreeHeapBytes();
    const uint64_t moved = free_now > free_at_last_trim ? free_now - free_at_last_trim
                                                        : free_at_last_trim - free_now;
    if (free_now > slack_ && moved > slack_ / 2) {
      ::malloc_trim(0);
      free_at_last_trim = free_now;
    }
    lock.lock();
  }
}

}  // namespace epochfs::daemon
