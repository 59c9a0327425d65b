// MemoryTrimmer: hands memory the daemon freed back to the kernel.
//
// glibc keeps freed heap memory in its arenas, where it still counts in the RSS that
// --ram promises to bound: after the kernel forgets many inodes, their nodes are free
// but the RSS stays that much higher until unmount. Every `period` this thread asks
// malloc how much free memory it holds and, past `slack` (and once it has moved by half
// of that since the last trim), trims it: malloc_trim returns the free pages inside the
// heap too, not only its top; a trim is cheap next to `period` (the figures:
// docs/benchmarks.md, "Figures behind design choices").
//
// Thread-safety: the object owns one thread; the destructor stops and joins it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace epochfs::daemon {

class MemoryTrimmer {
 public:
  // The daemon's slack: free heap malloc may keep before a trim. The RSS floats by up to
  // this much between trims (daemon/ram_balancer.h leaves room for it).
  static constexpr uint64_t kDaemonSlackBytes = 8ull << 20;

  MemoryTrimmer(std::chrono::milliseconds period, uint64_t slack);
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // Free heap bytes malloc holds now (mallinfo2's fordblks).
  static uint64_t FreeHeapBytes();

 private:
  void Loop();

  const std::chrono::milliseconds period_;
  const uint64_t slack_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace epochfs::daemon
