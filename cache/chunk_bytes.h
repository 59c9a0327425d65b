// ChunkBytes: the immutable bytes of one chunk, shared between the tiers and the
// ReadBuffers handed to callers without copying.
//
// Thread-safety: immutable after construction; copies may be used from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

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
  std::span<const char> span() const { return {data, size}; }
  // Memory kept alive by holding these bytes: what the RAM tier's budget counts.
  uint64_t footprint() const { return owner ? owned : 0; }
};

}  // namespace epochfs::cache
