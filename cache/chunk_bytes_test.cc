#include "cache/chunk_bytes.h"

#include <gtest/gtest.h>

#include <string>

namespace epochfs::cache {
namespace {

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 23);
  return s;
}

// Sizes around the page-population threshold and around page boundaries.
TEST(ChunkBytesTest, FreshMemoryHoldsWhatWasWrittenAtEverySize) {
  for (size_t size : {size_t{1}, size_t{4095}, size_t{64 * 1024 - 1}, size_t{64 * 1024},
                      size_t{64 * 1024 + 1}, size_t{110'000}, size_t{128 * 1024 + 7},
                      size_t{1} << 20}) {
    const std::string want = Pattern(size);
    ChunkBytes::Fresh fresh = ChunkBytes::Fresh::Allocate(size);
    std::memcpy(fresh.data(), want.data(), size);
    ChunkBytes bytes = std::move(fresh).Bytes(size);
    EXPECT_EQ(std::string(bytes.data, bytes.size), want) << size;
    EXPECT_GE(bytes.footprint(), size) << size;
    EXPECT_FALSE(bytes.borrowed());
  }
}

TEST(ChunkBytesTest, BytesMayBeFewerThanTheMemoryAndOutliveTheFresh) {
  ChunkBytes::Fresh fresh = ChunkBytes::Fresh::Allocate(200'000);
  std::memset(fresh.data(), 'z', 150'000);
  ChunkBytes bytes = std::move(fresh).Bytes(150'000);  // a file that shrank under the read
  EXPECT_EQ(bytes.size, 150'000u);
  EXPECT_GE(bytes.footprint(), 200'000u);  // the budget counts all the memory kept
  EXPECT_EQ(std::string(bytes.data, bytes.size), std::string(150'000, 'z'));
}

TEST(ChunkBytesTest, ACopyOfBorrowedBytesOutlivesTheLender) {
  ChunkBytes owned;
  {
    std::string lender = Pattern(100'000);
    ChunkBytes borrowed = ChunkBytes::Borrow(lender);
    ASSERT_TRUE(borrowed.borrowed());
    owned = std::move(borrowed).Owned();
    lender.assign(lender.size(), '#');
  }
  EXPECT_FALSE(owned.borrowed());
  EXPECT_EQ(std::string(owned.data, owned.size), Pattern(100'000));
}

}  // namespace
}  // namespace epochfs::cache
