#include "cache/buffer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include "base/thread_annotations.h"

namespace epochfs::cache {

struct BufferPool::Core {
  explicit Core(uint64_t capacity) : capacity(capacity) {}
  ~Core() {
    for (const auto& [len, buffer] : kept) std::free(buffer);
  }

  // Keeps `buffer` of `len` bytes while there is room, else frees it.
  void Give(char* buffer, size_t len) {
    {
      MutexLock lock(mu);
      if (held + len <= capacity) {
        kept.emplace(len, buffer);
        held += len;
        return;
      }
    }
    std::free(buffer);
  }

  const uint64_t capacity;
  mutable Mutex mu;
  std::multimap<size_t, char*> kept GUARDED_BY(mu);  // freed buffers, by size
  uint64_t held GUARDED_BY(mu) = 0;
  uint64_t reused GUARDED_BY(mu) = 0;
  uint64_t taken GUARDED_BY(mu) = 0;
};

BufferPool::BufferPool(uint64_t capacity) : core_(std::make_shared<Core>(capacity)) {}

BufferPool::~BufferPool() = default;

BufferPool::Buffer BufferPool::Take(size_t len) {
  size_t size = (std::max<size_t>(len, 1) + kAlignment - 1) / kAlignment * kAlignment;
  char* buffer = nullptr;
  {
    MutexLock lock(core_->mu);
    ++core_->taken;
    auto it = core_->kept.lower_bound(size);
    if (it != core_->kept.end() && it->first <= size + kSlack) {
      size = it->first;
      buffer = it->second;
      core_->kept.erase(it);
      core_->held -= size;
      ++core_->reused;
    }
  }
  if (buffer == nullptr) {
    void* fresh = nullptr;
    if (::posix_memalign(&fresh, kAlignment, size) != 0) return Buffer{};
    buffer = static_cast<char*>(fresh);
  }
  // The deleter holds the core: a buffer in the RAM tier may outlive the pool's owner.
  std::shared_ptr<char> memory(buffer, [core = core_, size](char* p) { core->Give(p, size); });
  return Buffer{std::move(memory), size};
}

uint64_t BufferPool::held_bytes() const {
  MutexLock lock(core_->mu);
  return core_->held;
}

uint64_t BufferPool::reused() const {
  MutexLock lock(core_->mu);
  return core_->reused;
}

uint64_t BufferPool::taken() const {
  MutexLock lock(core_->mu);
  return core_->taken;
}

}  // namespace epochfs::cache
