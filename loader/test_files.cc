#include "loader/test_files.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace epochfs::loader::testing {
namespace {

int CountEntries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}
}  // namespace

int CountOpenFds() { return CountEntries("/proc/self/fd") - 1; }  // minus opendir's own
int CountThreads() { return CountEntries("/proc/self/task"); }

int WaitForThreadsAtMost(int n, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int count = CountThreads();
  while (count > n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    count = CountThreads();
  }
  return count;
}

}  // namespace epochfs::loader::testing
