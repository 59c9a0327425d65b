// OrderIndex: each file at its first place; the order without repeats.
#include "prefetcher/order_index.h"

#include <gtest/gtest.h>

#include <vector>

namespace epochfs::prefetch {
namespace {

FileKey F(uint64_t ino) { return FileKey{1, ino}; }

TEST(OrderIndex, AFileKeepsItsFirstPlace) {
  OrderIndex index;
  EXPECT_TRUE(index.empty());
  EXPECT_TRUE(index.Append(F(7)));
  EXPECT_TRUE(index.Append(F(3)));
  EXPECT_FALSE(index.Append(F(7)));  // read again: not a new place
  EXPECT_TRUE(index.Append(F(5)));
  EXPECT_EQ(index.size(), 3u);
  EXPECT_EQ(index.order(), (std::vector<FileKey>{F(7), F(3), F(5)}));
  EXPECT_EQ(index.Position(F(7)), 0u);
  EXPECT_EQ(index.Position(F(5)), 2u);
  EXPECT_FALSE(index.Position(F(4)).has_value());
  EXPECT_TRUE(index.Contains(F(3)));
  EXPECT_FALSE(index.Contains(F(4)));
}

TEST(OrderIndex, BuiltFromAnOrderWithRepeatsLeavesThemOut) {
  const OrderIndex index(std::vector<FileKey>{F(1), F(2), F(1), F(3)});
  EXPECT_EQ(index.order(), (std::vector<FileKey>{F(1), F(2), F(3)}));
  EXPECT_EQ(index.Position(F(3)), 2u);
}

}  // namespace
}  // namespace epochfs::prefetch
