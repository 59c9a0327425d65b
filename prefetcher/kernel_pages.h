// KernelPages: how readahead puts predicted bytes into the kernel's page cache, so that
// reading them sends no request to the daemon at all (docs/architecture.md, "Pushed
// pages").
//
// The prefetcher knows which files come next and brings their bytes into the RAM tier;
// this interface moves them on into the kernel. The implementation belongs to the FUSE
// layer (kernel_cache/page_cache_pusher.h), which alone knows whether the kernel has the file's
// inode, what it believes the file's size is, and how to keep a push ordered against
// the file changing. The bytes stay charged to the RAM tier's budget while the kernel
// holds them (cache::Cache::MoveToKernel), and the RAM policy decides when they go.
//
// Thread-safety: implementations are called from readahead workers concurrently.
#pragma once

#include <cstdint>

#include "cache/cache.h"

namespace epochfs::prefetch {

enum class PushResult : uint8_t {
  kPushed,    // the bytes are in the kernel's page cache now
  kNotKnown,  // the kernel has no inode for the file yet: worth trying again later
  kRefused,   // not now and not later (changed, being written, another size, an error)
};

class KernelPages {
 public:
  virtual ~KernelPages() = default;
  // Moves the bytes of `file`, now in the RAM tier with this identity, into the kernel's
  // page cache. Unless kPushed, the bytes stay in RAM. May block briefly (one store per
  // chunk).
  virtual PushResult Push(const cache::SourceIdentity& file) = 0;
  // Whether the kernel has an inode for `file` now (cheap: no kernel call), before a
  // retry of a kNotKnown push.
  virtual bool Knows(const cache::SourceIdentity& file) const = 0;
  // Whether the kernel's page cache holds the whole of file (dev, ino), as far as the
  // FUSE layer saw it fill (fs/inode_table.h, residency): readahead then has nothing to
  // bring. Cheap (no kernel call, no source stat). A wrong "yes" (pages the kernel
  // reclaimed unseen) costs the reader one demand READ, never a wrong byte.
  virtual bool HoldsWhole(uint64_t dev, uint64_t ino) const = 0;
};

}  // namespace epochfs::prefetch
