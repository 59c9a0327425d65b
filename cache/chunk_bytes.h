// ChunkBytes: the immutable bytes of one chunk, shared between the tiers and the
// ReadBuffers handed to callers without copying.
//
// Thread-safety: immutable after construction; copies may be used from any thread.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace epochfs::cache {

// `size` bytes at `data`, kept alive by `owner`, which may be larger (e.g. a raw pack
// entry read together with its header and the O_DIRECT alignment around it: the extra
// bytes are skipped, not copied away). `owned` is what the owner holds in all.
struct ChunkBytes {
  std::shared_ptr<const void> owner;
  const char* data = nullptr;
  size_t size = 0;
  uint64_t owned = 0;

  static ChunkBytes Own(std::string bytes) {
    auto owner = std::make_shared<const std::string>(std::move(bytes));
    return ChunkBytes{owner, owner->data(), owner->size(), owner->capacity()};
  }
  // `size` bytes at `data` inside `buffer`, which holds `buffer_len` bytes in all.
  template <typename Buffer>
  static ChunkBytes Share(std::shared_ptr<const Buffer> buffer, const char* data, size_t size,
                          uint64_t buffer_len) {
    return ChunkBytes{std::move(buffer), data, size, buffer_len};
  }
  // A copy of `bytes` in memory of its own (Fresh below).
  static ChunkBytes Copy(std::span<const char> bytes) {
    Fresh fresh = Fresh::Allocate(bytes.size());
    std::memcpy(fresh.data(), bytes.data(), bytes.size());
    return std::move(fresh).Bytes(bytes.size());
  }
  // Memory for `size` bytes about to be written once and then only read: a chunk read
  // from the source, or a copy. malloc's, so that memory freed by eviction is used again
  // (below the daemon's mmap threshold: daemon.cc); the pages of a large one are then
  // made present in one call (MADV_POPULATE_WRITE), which costs little where they
  // already are and, where they are fresh, less than the one page fault per page that
  // whatever writes them would take (docs/benchmarks.md, "Fresh memory").
  class Fresh {
   public:
    static Fresh Allocate(size_t size) {
      static const uintptr_t kPage = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
      constexpr size_t kPopulateFrom = 64 * 1024;
      const bool large = size >= kPopulateFrom;
      // A large block counts as the whole pages it takes (malloc maps those above its
      // threshold).
      Fresh fresh(std::shared_ptr<char>(new char[size], std::default_delete<char[]>()),
                  large ? (size + kPage - 1) / kPage * kPage : size);
      if (!large) return fresh;
      const uintptr_t start = reinterpret_cast<uintptr_t>(fresh.data());
      const uintptr_t first = (start + kPage - 1) / kPage * kPage;
      const uintptr_t end = (start + size) / kPage * kPage;  // the block's whole pages only
      // An older kernel refuses (EINVAL): the writes fault the pages in instead.
      if (end > first) {
        (void)::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_WRITE);
      }
      return fresh;
    }
    char* data() const { return memory_.get(); }
    // The first `size` bytes, written by now, as immutable chunk bytes.
    ChunkBytes Bytes(size_t size) && {
      const char* data = memory_.get();
      return ChunkBytes{std::move(memory_), data, size, len_};
    }

   private:
    Fresh(std::shared_ptr<char> memory, size_t len) : memory_(std::move(memory)), len_(len) {}
    std::shared_ptr<char> memory_;
    size_t len_;
  };
  // `bytes` borrowed, not owned: valid only while whoever lent them keeps them (a
  // stream's run buffer). Owned() makes a copy that can be kept.
  static ChunkBytes Borrow(std::span<const char> bytes) {
    return ChunkBytes{nullptr, bytes.data(), bytes.size(), 0};
  }
  bool borrowed() const { return owner == nullptr && data != nullptr; }
  // These bytes, in memory that outlives the lender: a copy when borrowed.
  ChunkBytes Owned() && { return borrowed() ? Copy(span()) : std::move(*this); }
  std::span<const char> span() const { return {data, size}; }
  // Memory kept alive by holding these bytes: what the RAM tier's budget counts.
  uint64_t footprint() const { return owner ? owned : 0; }
};

}  // namespace epochfs::cache
