#include "cache/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace epochfs::cache {
namespace {

TEST(BufferPoolTest, AFreedBufferIsHandedOutAgainForASimilarSize) {
  BufferPool pool(1 << 20);
  BufferPool::Buffer first = pool.Take(110'000);
  ASSERT_NE(first.memory, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first.memory.get()) % BufferPool::kAlignment, 0u);
  EXPECT_EQ(first.len, 110'592u);  // whole pages
  std::memset(first.memory.get(), 7, first.len);
  const char* const address = first.memory.get();
  first.memory.reset();
  EXPECT_EQ(pool.held_bytes(), 110'592u);

  // A little smaller: the same memory, with its full size.
  BufferPool::Buffer again = pool.Take(100'000);
  EXPECT_EQ(again.memory.get(), address);
  EXPECT_EQ(again.len, 110'592u);
  EXPECT_EQ(pool.held_bytes(), 0u);
  EXPECT_EQ(pool.reused(), 1u);
  EXPECT_EQ(pool.taken(), 2u);
}

TEST(BufferPoolTest, AKeptBufferMuchLargerOrSmallerThanAskedIsLeftForOthers) {
  BufferPool pool(1 << 20);
  pool.Take(200'000);  // freed at once: kept
  BufferPool::Buffer small = pool.Take(64 * 1024);  // would waste more than kSlack
  BufferPool::Buffer large = pool.Take(300'000);    // does not fit in it
  EXPECT_EQ(small.len, 64u * 1024);
  EXPECT_EQ(large.len, 303'104u);
  EXPECT_EQ(pool.reused(), 0u);
  EXPECT_EQ(pool.held_bytes(), 200'704u);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsCapacity) {
  BufferPool pool(300 * 1024);
  {
    BufferPool::Buffer a = pool.Take(128 * 1024);
    BufferPool::Buffer b = pool.Take(128 * 1024);
    BufferPool::Buffer c = pool.Take(128 * 1024);
  }  // three freed: two fit
  EXPECT_EQ(pool.held_bytes(), 256u * 1024);
  BufferPool none(0);
  none.Take(4096);
  EXPECT_EQ(none.held_bytes(), 0u);
}

TEST(BufferPoolTest, ABufferMayOutliveThePool) {
  BufferPool::Buffer kept;
  {
    BufferPool pool(1 << 20);
    kept = pool.Take(8192);
  }
  std::memset(kept.memory.get(), 1, kept.len);  // still the caller's (ASan would see)
  kept.memory.reset();                          // returned to the pool's core, then freed
}

}  // namespace
}  // namespace epochfs::cache
