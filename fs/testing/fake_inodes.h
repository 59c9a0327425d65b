// Inode tables over made-up stat results, for tests of what keeps state on nodes
// (fs/inode_table_test.cc, kernel_cache/residency_test.cc).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <utility>

#include "fs/inode_table.h"

namespace epochfs::testing {

// A stat result with only what the table reads: device, inode number and mode.
inline struct ::stat FakeStat(uint64_t dev, uint64_t ino, mode_t mode) {
  struct ::stat st {};
  st.st_dev = dev;
  st.st_ino = ino;
  st.st_mode = mode;
  return st;
}

// A table whose root is (1, 2), held through an O_PATH fd of /tmp.
inline fs::InodeTable MakeTable() {
  UniqueFd root(::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC));
  return fs::InodeTable(std::move(root), FakeStat(1, 2, S_IFDIR | 0755));
}

}  // namespace epochfs::testing
