#include "fs/waiting_room.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace epochfs::fs {
namespace {

TEST(WaitingRoom, ATaskThatWaitsLeavesTheOtherThreadsServing) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> second_ran;
  std::atomic<int> ran{0};
  {
    WaitingRoom room(2);  // inner: joined before what its tasks use goes
    room.Run([&] {
      released.wait();  // as a request waiting for a node's open_order
      ran++;
    });
    room.Run([&] {
      second_ran.set_value();
      ran++;
    });
    EXPECT_EQ(second_ran.get_future().wait_for(std::chrono::seconds(10)),
              std::future_status::ready);
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 2);
}

TEST(WaitingRoom, WhatIsQueuedRunsBeforeItGoes) {
  std::atomic<int> ran{0};
  {
    WaitingRoom room(1);
    for (int i = 0; i < 50; i++) {
      room.Run([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ran++;
      });
    }
  }
  EXPECT_EQ(ran.load(), 50) << "a request handed over and never answered would hang its caller";
}

}  // namespace
}  // namespace epochfs::fs
