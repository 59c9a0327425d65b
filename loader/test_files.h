// Test helpers for loader/ tests: a temporary folder of sample files, and counters of
// the process's fds and threads for leak checks. Test-only; not in epochfs_loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epochfs::loader::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `bytes` to path()/rel (parent folders created); returns the full path.
  std::string Write(const std::string& rel, const std::string& bytes) const;
  std::string Mkdir(const std::string& rel) const;

 private:
  std::string path_;
};

std::string RandomBytes(size_t n, uint64_t seed);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& bytes);
// Entries in /proc/self/fd and /proc/self/task.
int CountOpenFds();
int CountThreads();
// Polls until CountThreads() <= n (io_uring workers exit asynchronously); returns the
// last count.
int WaitForThreadsAtMost(int n, int timeout_ms = 5000);

}  // namespace epochfs::loader::testing
