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
// entry read together with its header: the header is skipped, not copied away).
struct ChunkBytes {
  std::shared_ptr<const std::string> owner;
  const char* data = nullptr;
  size_t size = 0;

  static ChunkBytes Own(std::string bytes) {
    auto owner = std::make_shared<const std::string>(std::move(bytes));
    return ChunkBytes{owner, owner->data(), owner->size()};
  }
  std::span<const char> span() const { return {data, size}; }
  // Memory kept alive by holding these bytes: what the RAM tier's budget counts.
  uint64_t footprint() const { return owner ? owner->capacity() : 0; }
};

}  // namespace epochfs::cache
