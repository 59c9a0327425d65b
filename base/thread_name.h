// NameThisThread: gives the calling thread a name that `top -H`, `perf --sort comm`,
// gdb and /proc/PID/task/*/comm show. A daemon with forty threads that all read
// "epochfs" cannot be profiled by thread; with names, each share of its CPU has an owner.
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace epochfs {

// Linux keeps 15 bytes of a thread name: longer names are cut, never refused.
inline void NameThisThread(std::string_view name) {
  std::string cut(name.substr(0, 15));
  ::pthread_setname_np(::pthread_self(), cut.c_str());
}

}  // namespace epochfs
