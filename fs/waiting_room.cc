#include "fs/waiting_room.h"

#include <utility>

#include "base/thread_name.h"

namespace epochfs::fs {

WaitingRoom::WaitingRoom(size_t threads) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; i++) threads_.emplace_back([this] { Serve(); });
}

WaitingRoom::~WaitingRoom() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void WaitingRoom::Run(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void WaitingRoom::Serve() {
  NameThisThread("fuse-waiter");
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && !stopping_) lock.Wait(cv_);
      if (queue_.empty()) return;  // stopping, and everything handed here has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace epochfs::fs
