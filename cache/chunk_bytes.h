// ChunkBytes: the immutable bytes of one chunk, shared between the tiers and the
// ReadBuffers handed to callers without copying.
//
// Thread-safety: immutable after construction; copies may be used from any thread.
#pragma once

#include <sys/mman.h>

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
  // A copy of `bytes` in memory of its own. A large copy gets a mapping whose pages are
  // all made present in one call before the copy (MADV_POPULATE_WRITE), rather than one
  // page fault per 4 KiB page taken by the copy itself: a chunk's bytes are mostly
  // written once into fresh memory, where those faults cost more than the copy
  // (docs/benchmarks.md, "The daemon's CPU per file"). Unmapped when the last holder goes.
  static ChunkBytes Copy(std::span<const char> bytes) {
    constexpr size_t kMapFrom = 64 * 1024;
    if (bytes.size() >= kMapFrom) {
      const size_t len = (bytes.size() + 4095) / 4096 * 4096;
      void* map = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map != MAP_FAILED) {
        (void)::madvise(map, len, MADV_POPULATE_WRITE);  // an older kernel faults instead
        std::memcpy(map, bytes.data(), bytes.size());
        std::shared_ptr<const void> owner(map, [len](const void* p) { ::munmap(const_cast<void*>(p), len); });
        return ChunkBytes{std::move(owner), static_cast<const char*>(map), bytes.size(), len};
      }
    }
    return Own(std::string(bytes.data(), bytes.size()));
  }
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
