// BufferPool: aligned buffers for reads into the daemon's memory, used again once freed
// (up to a capacity) instead of going back to malloc.
//
// Why: a read into memory the process has not used before pays a page fault per page,
// and on a VM whose hypervisor shadows the guest's page tables the first user-mode pass
// over it (the checksum of an entry read from a pack) pays a hypervisor exit per page
// too, many times the pass itself (docs/benchmarks.md, "Reads into buffers used
// before"). malloc does hand freed memory out again, but not reliably: it gives the top
// of a heap back to the kernel past its trim threshold, and the daemon's trims give back
// every free page. A buffer this pool keeps stays the process's, pages and all.
//
// A new buffer is the size asked, in whole pages; a kept one is handed out for any
// request it holds with at most kSlack to spare, so that entries of similar sizes share
// buffers without the pool making every buffer larger.
//
// Thread-safety: all methods are thread-safe. A buffer may outlive the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace epochfs::cache {

class BufferPool {
 public:
  static constexpr size_t kAlignment = 4096;  // O_DIRECT's
  static constexpr size_t kSlack = 16 * 1024;

  // Keeps up to `capacity` bytes of freed buffers (0: keeps none).
  explicit BufferPool(uint64_t capacity);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  struct Buffer {
    std::shared_ptr<char> memory;  // null when out of memory
    size_t len = 0;                // its size: at least what was asked
  };
  // A buffer of at least `len` bytes, aligned to kAlignment; it returns to the pool when
  // the last copy of `memory` goes.
  Buffer Take(size_t len);

  uint64_t held_bytes() const;  // freed buffers kept now
  uint64_t reused() const;      // Take calls answered with a kept buffer
  uint64_t taken() const;       // Take calls

 private:
  struct Core;
  std::shared_ptr<Core> core_;  // shared with the buffers handed out
};

}  // namespace epochfs::cache
