// KernelPages: how readahead puts predicted bytes into the kernel's page cache, so that
// reading them sends no request to the daemon at all (docs/architecture.md, "Pushed
// pages").
//
// The prefetcher knows which files come next and brings their bytes into the RAM tier;
// it offers each to this interface, and that is all it does about the kernel. The
// implementation (kernel_cache/page_cache_pusher.h) alone knows whether the kernel has
// the file's inode, what it believes the file's size is, how to keep a push ordered
// against the file changing, and when to try again a file whose inode the kernel does
// not have yet. The bytes stay charged to the RAM tier's budget while the kernel
// holds them (cache::Cache::MoveToKernel), and the RAM policy decides when they go.
//
// Thread-safety: implementations are called from readahead workers concurrently.
#pragma once

#include <cstdint>
#include <span>

#include "cache/cache.h"

namespace epochfs::prefetch {

class KernelPages {
 public:
  virtual ~KernelPages() = default;
  // `file` is in the RAM tier with this identity, read ahead for a reader: its bytes go
  // on into the kernel's page cache now, or once the kernel has its inode (retried while
  // the RAM tier holds it and the kernel does not hold it whole already). May block
  // briefly (one store per chunk).
  virtual void Offer(const cache::SourceIdentity& file) = 0;
  // The whole of `file`, verified and just read from the SSD tier, is in `bytes` (valid
  // during the call only) and not in the RAM tier: true when they went on into the
  // kernel's page cache now (charged to the RAM tier as a pushed file's pages are, where
  // a memory limit applies), so that the RAM tier need not copy them. False (the kernel
  // has no inode for the file yet, the RAM tier would not admit its charge, any
  // refusal): the caller keeps the bytes in the RAM tier and offers the file as usual.
  virtual bool TakeWhole(const cache::SourceIdentity& file, std::span<const char> bytes) = 0;
  // Whether the kernel's page cache holds the whole of file (dev, ino), as far as the
  // FUSE layer saw it fill (fs/inode_table.h, residency): readahead then has nothing to
  // bring. Cheap (no kernel call, no source stat). A wrong "yes" (pages the kernel
  // reclaimed unseen) costs the reader one demand READ, never a wrong byte.
  virtual bool HoldsWhole(uint64_t dev, uint64_t ino) const = 0;
};

}  // namespace epochfs::prefetch
