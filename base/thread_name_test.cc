#include "base/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace epochfs {
namespace {

std::string CommOf(long tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(NameThisThread, ShowsInProcAndCutsLongNamesInsteadOfFailing) {
  std::string short_name, long_name;
  std::thread([&] {
    const long tid = ::syscall(SYS_gettid);
    NameThisThread("prefetch-12");
    short_name = CommOf(tid);
    // pthread_setname_np refuses names over 15 bytes (ERANGE); the helper keeps 15.
    NameThisThread("a-name-longer-than-fifteen");
    long_name = CommOf(tid);
  }).join();
  EXPECT_EQ(short_name, "prefetch-12");
  EXPECT_EQ(long_name, "a-name-longer-t");
}

}  // namespace
}  // namespace epochfs
