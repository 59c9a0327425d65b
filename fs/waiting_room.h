// WaitingRoom: threads of its own for the requests that must wait for a node's
// open_order lock, so that FUSE workers never do.
//
// Why: the thread holding a node's open_order may be dropping or storing the node's
// pages (a change found at an open or a GETATTR, a push), and the kernel makes that wait
// for any page a READ in flight holds locked. That READ is answered only by a free FUSE
// worker. Workers that queued for the lock behind the drop would, once there are as many
// of them as libfuse may start, leave none: the mount hangs (a file that many readers
// open while it changes underneath; tests/mount_test.cc,
// ReadersOfAFileChangedUnderneathNeverHangTheMount). So a worker only tries the lock
// (SourceFs's OrderWait::kNoWait); when it is held, the request is handed here, made
// again by a thread that may wait, and answered from there.
//
// Thread-safety: Run may be called from any thread. The destructor runs what is queued
// and joins: the connection must have ended first (a task may wait for the lock's
// holder, who waits for a READ that only a live session answers, or that an ended
// connection fails).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace epochfs::fs {

class WaitingRoom {
 public:
  // `threads`: how many requests may wait at once; more queue up in order.
  explicit WaitingRoom(size_t threads);
  ~WaitingRoom();
  WaitingRoom(const WaitingRoom&) = delete;
  WaitingRoom& operator=(const WaitingRoom&) = delete;

  void Run(std::function<void()> task);

 private:
  void Serve();

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the rest is ready
};

}  // namespace epochfs::fs
