// Private entry points of the cache module, for tests.
//
// Thread-safety: as Cache.
#pragma once

#include <memory>

#include "cache/cache.h"
#include "cache/io_engine.h"
#include "cache/ssd_tier.h"

namespace epochfs::cache {

// Cache::Open with a given IoEngine (tests pass a fault-injecting one). `tweak`, when
// given, adjusts the SSD tier's internal knobs (sync sizes, retry delay, read-around).
Result<std::unique_ptr<Cache>> OpenCacheWithIoEngine(const CacheOptions& options,
                                                     std::shared_ptr<IoEngine> io,
                                                     void (*tweak)(SsdTierOptions*) = nullptr);

}  // namespace epochfs::cache
