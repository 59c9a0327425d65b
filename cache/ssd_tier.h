// SsdTier: the persistent tier. Pack files (pack.h) hold the bytes, a RocksDB index
// (index.h) says where each chunk is, and one background writer thread fills them.
//
// Write path. Enqueue() puts the chunk on a bounded queue, waiting for room while the
// writer drains it (up to max_enqueue_wait; dropped and counted after that, or at
// once when the tier is full or degraded), and into a small "pending" map, so the chunk can be read
// back before it reaches the index. The writer compresses each entry (codec.h),
// appends it to the current pack (sealed at pack_size, then a new one is started),
// fdatasyncs at most every sync_interval_ms or every sync_every_bytes, and only THEN
// writes the index records of the synced entries in one batch and drops them from
// "pending". A crash therefore loses at most unsynced entries, and no index record
// ever points at bytes that were not durable.
//
// Read path. pending map -> index Get -> identity check (mismatch: the record is
// dropped, counted stale, miss) -> one read of the entry -> verify header, key,
// lengths and the XXH3 of the decoded bytes (mismatch: record dropped, counted
// corrupt, logged, miss) -> decompress. Read-around: an entry no larger than half the
// read-around window is read together with the aligned window around it, and the
// other complete, valid, still-indexed entries in that window go to the RAM tier if
// it has room. Within an epoch every file is read, so after a restart with a cold
// page cache this turns one IO per small file into one IO per window.
//
// Space. Pack bytes never exceed disk_budget. New entries are admitted while the
// packs stay under disk_budget minus a compaction reserve (half a pack). When an
// entry does not fit, the sealed pack with the lowest live fraction is compacted if
// that fraction is below 1/2 (its live entries are copied to the tail, their records
// moved, the pack unlinked); otherwise the tier is full of live data and admits
// nothing new (a static set, which is what a reshuffled epoch rewards) until entries
// die (stale, corrupt, invalidated). A pack write failing with ENOSPC/EDQUOT/EIO, or
// the cache filesystem's free space dropping below min_free_bytes, makes the tier
// "degraded": one warning, no writes, reads unaffected, a retry every
// degraded_retry.
//
// Streaming. Stream() takes the chunks the prefetcher predicts next, with identities it
// just took from the source, looks them up, sorts them by pack position and reads them
// in runs of adjacent entries (up to stream_io_bytes each, stream_depth runs in flight
// on one io_uring submission, O_DIRECT so the pack bytes do not also sit in the page
// cache). Each entry is verified as a demand read verifies it (header, key, lengths,
// XXH3); a bad one is dropped and counted, never inserted. Good ones are offered to the
// caller's taker, if any, straight from the run buffer (readahead pushes whole files
// on into the kernel's page cache from there); the others are copied out of the run
// buffer (the RAM tier's budget counts exactly their bytes) and inserted into the RAM
// tier, whose policy may refuse them.
//
// Start-up. A missing, never-completed or corrupt index is rebuilt by scanning every pack
// (latest entry of a key wins; data checksums verified). Records pointing at missing
// packs are dropped. Live bytes per pack are recounted from the index. Packs are
// never appended to after a restart: the first write starts a new pack. If the packs
// exceed the budget (it was lowered), the oldest packs are evicted whole.
//
// Thread-safety: Lookup, Enqueue, Invalidate, Flush and GetStats may be called from
// any thread. Lock order: queue_mu_ and meta_mu_ are never held together; the
// writer thread's state (active pack, unsynced list) is touched only by the writer
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "cache/cache.h"
#include "cache/chunk_bytes.h"
#include "cache/eviction.h"
#include "cache/index.h"
#include "cache/io_engine.h"
#include "cache/pack.h"
#include "cache/ram_tier.h"

namespace epochfs::cache {

// Entries up to half this size are read together with the aligned window around them.
constexpr size_t kReadAroundWindow = 256u << 10;

struct SsdTierOptions {
  std::filesystem::path dir;  // the cache dir: packs/ and index/ live inside
  uint64_t disk_budget = 16ull << 30;
  uint64_t pack_size = 256ull << 20;
  double min_compression_saving = 1.0 / 8.0;
  uint64_t min_free_bytes = 256ull << 20;
  uint32_t sync_interval_ms = 1000;
  // Internal knobs (tests shrink them).
  // Entries written but not yet indexed stay in memory (the pending map); these bound
  // that memory, which counts against the daemon's RSS on top of the RAM budget.
  uint64_t sync_every_bytes = 16ull << 20;
  uint64_t max_pending_bytes = 64ull << 20;
  // How long Enqueue() waits for room in the queue before it drops the entry.
  std::chrono::milliseconds max_enqueue_wait{2'000};
  std::chrono::milliseconds degraded_retry{30'000};
  size_t read_around_window = kReadAroundWindow;  // 0 disables read-around
  // Streamed reads: the largest run read in one IO, the most runs in flight, and the
  // largest gap of unwanted bytes a run reads through rather than starting a new IO.
  size_t stream_io_bytes = 4u << 20;
  size_t stream_depth = 4;
  size_t stream_gap = 128u << 10;
  // Memory for the run buffers of all Stream() calls together: a caller waits for its
  // share, so streaming never holds more than this on top of the RAM tier.
  uint64_t stream_buffer_bytes = 16ull << 20;
  // Freed buffers of single reads (an entry, a read-around window) kept for the next
  // ones (buffer_pool.h).
  uint64_t read_buffer_bytes = 8ull << 20;
};

// A chunk to stream into RAM, with the identity its source file has now.
struct StreamItem {
  ChunkKey key;
  SourceIdentity id;
};

class SsdTier {
 public:
  // Opens (creating, recovering) the tier in options.dir and starts the writer.
  // `ram` receives read-around neighbours; may be null. `io` must outlive the tier.
  static Result<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options, IoEngine& io,
                                               RamTier* ram);
  // Flushes what is queued, then stops the writer thread.
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // The chunk's bytes if the tier holds it with identity `id`. Never fails: every
  // problem is a miss (and counted).
  std::optional<ChunkBytes> Lookup(const ChunkKey& key, const SourceIdentity& id);

  // (pack id << 40) + offset of the chunk's entry, or nullopt if it is not indexed (or
  // the index cannot say). Identity is not checked: for ordering reads only.
  std::optional<uint64_t> Position(const ChunkKey& key) const;

  // Brings the items the tier holds with their identity into the RAM tier (see
  // Streaming above). Each verified item is offered to `take` first, if set, with its
  // bytes in the run buffer (valid during the call only): an item it takes is not
  // copied into the RAM tier. Returns, per item, whether its bytes were brought (into
  // RAM, or taken). Never fails: every problem leaves that item out (and is counted).
  using Taker = std::function<bool(const StreamItem& item, std::span<const char> bytes)>;
  std::vector<bool> Stream(std::span<const StreamItem> items, const Taker& take = {});

  // Queues the chunk for persistence. Never blocks; returns false if it was dropped
  // (queue full, tier full or degraded).
  bool Enqueue(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes);

  // Drops every chunk of file (dev, ino) from the pending map and the index.
  void Invalidate(uint64_t dev, uint64_t ino);

  // Returns once everything enqueued before the call is written, synced and indexed
  // (or dropped). Not ok when the tier is degraded.
  Status Flush();

  SsdStats GetStats() const;  // cache/cache.h: CacheStats carries it whole

 private:
  struct Item {  // a chunk on its way to a pack
    ChunkKey key;
    SourceIdentity id;
    ChunkBytes bytes;
    uint64_t seq = 0;
  };
  struct Pending {
    SourceIdentity id;
    ChunkBytes bytes;
    uint64_t seq = 0;
  };
  struct Unsynced {  // written to the active pack, not yet synced and indexed
    ChunkKey key;
    IndexRecord record;
    uint64_t seq = 0;
  };
  struct PackInfo {
    uint64_t file_bytes = 0;
    uint64_t live_bytes = 0;  // header + stored bytes of the indexed entries
    uint64_t live_entries = 0;
    bool sealed = true;
    std::shared_ptr<PackReader> reader;  // opened on first read
  };
  enum class DropReason { kStale, kCorrupt, kMissingPack };

  SsdTier(const SsdTierOptions& options, IoEngine& io, RamTier* ram);
  Status Recover();
  Status RebuildIndex(const std::map<uint32_t, uint64_t>& pack_sizes);
  // Opens the index (rebuilding it from the packs if it is new) and accounts every
  // record against `pack_sizes`; sets `rebuild` when it was rebuilt. kCorruption when
  // a table of the index is damaged.
  Status LoadIndex(const std::map<uint32_t, uint64_t>& pack_sizes, bool* rebuild);
  Status EvictOldestPacksOverBudget() REQUIRES(meta_mu_);

  // Read path.
  Result<std::shared_ptr<PackReader>> ReaderFor(uint32_t pack_id);
  Result<ChunkBytes> ReadWithNeighbours(const PackReader& reader, const ChunkKey& key,
                                        const IndexRecord& record);
  void DropRecord(const ChunkKey& key, const IndexRecord& record, DropReason reason);
  // The index record of `key` if it holds the chunk with identity `id` (else nullopt;
  // a stale or undecodable record is dropped and counted).
  std::optional<IndexRecord> CurrentRecord(const ChunkKey& key, const SourceIdentity& id);
  // Logs and counts a pack that cannot be opened, dropping `record` where the pack is
  // gone or damaged.
  void PackUnreadable(const ChunkKey& key, const IndexRecord& record, const Status& why);
  void EntryCorrupt(const ChunkKey& key, const IndexRecord& record, const Status& why);
  class StreamBuffers;  // a scoped share of stream_buffer_bytes
  class RunBuffer;      // one run's O_DIRECT buffer, back to run_buffers_ when done
  // Verifies and decodes (copies out, or with `borrow` points into `bytes` where raw)
  // the entry `rec` of `key` found in `bytes` (pack bytes from `bytes_offset`: a
  // streamed run or a read-around window); kCorruption with its location when anything
  // disagrees.
  Result<ChunkBytes> DecodeStreamed(std::span<const char> bytes, uint64_t bytes_offset,
                                    const ChunkKey& key, const IndexRecord& rec,
                                    bool borrow = false) const;
  void AddLiveLocked(const IndexRecord& record, int64_t sign) REQUIRES(meta_mu_);

  // Writer thread.
  void WriterLoop();
  void WriteItem(Item item);
  void DropItem(const Item& item);
  bool MakeRoom(uint64_t need);
  bool EnsureActivePack(uint64_t entry_len);
  void SealActive();
  bool SyncDue() const;
  void SyncAndIndex();
  Status CompactPack(uint32_t pack_id);
  // Appends to the active pack (starting one if needed): an encoded entry when
  // `header` is given, else `bytes` verbatim (a compaction copy). Returns the offset.
  Result<uint64_t> AppendToActive(const EntryHeader* header, std::span<const char> bytes);
  void EvictPackWhole(uint32_t pack_id);
  bool FreeSpaceOk(std::string* reason) const;
  void EnterDegraded(const Status& why);
  bool DegradedNow() const;

  const SsdTierOptions options_;
  const uint64_t pack_size_;  // options_.pack_size, capped to a fraction of the budget
  const uint64_t reserve_;    // kept free for compaction copies
  const std::filesystem::path packs_dir_;
  IoEngine& io_;
  RamTier* const ram_;
  std::unique_ptr<Index> index_;

  mutable Mutex meta_mu_;
  // Before the packs: their readers take buffers from it.
  BufferPool read_buffers_;
  std::map<uint32_t, PackInfo> packs_ GUARDED_BY(meta_mu_);
  uint64_t pack_bytes_ GUARDED_BY(meta_mu_) = 0;
  uint64_t live_entries_ GUARDED_BY(meta_mu_) = 0;
  std::atomic<bool> full_{false};       // no room and nothing worth compacting

  mutable Mutex queue_mu_;
  std::condition_variable work_cv_;                              // the writer waits here
  std::condition_variable flushed_cv_;                           // Flush() waits here
  std::condition_variable space_cv_;  // Enqueue() waits here for pending_bytes_ to fall
  std::deque<Item> queue_ GUARDED_BY(queue_mu_);
  std::unordered_map<ChunkKey, Pending, ChunkKeyHash> pending_ GUARDED_BY(queue_mu_);
  uint64_t pending_bytes_ GUARDED_BY(queue_mu_) = 0;
  uint64_t next_seq_ GUARDED_BY(queue_mu_) = 1;
  uint64_t flush_requested_ GUARDED_BY(queue_mu_) = 0;
  uint64_t flush_done_ GUARDED_BY(queue_mu_) = 0;
  bool stop_ GUARDED_BY(queue_mu_) = false;

  // What a queued chunk holds in memory: its bytes, its pending_ node and queue_ item.
  // The queue's budget counts this, so that a queue of small files stays within it.
  static uint64_t QueuedBytes(const ChunkBytes& bytes) { return bytes.footprint() + 192; }

  // Writer thread only.
  std::unique_ptr<PackWriter> active_;
  uint32_t next_pack_id_ = 1;
  std::vector<Unsynced> unsynced_;
  uint64_t unsynced_bytes_ = 0;  // pack bytes written since the last sync (compressed)
  // Queue memory those entries still hold (pending_bytes_ counts it, uncompressed, until
  // their sync indexes them): compressible chunks fill the queue long before their
  // pack bytes reach sync_every_bytes.
  uint64_t unsynced_footprint_ = 0;
  std::chrono::steady_clock::time_point first_unsynced_at_;
  uint64_t bytes_since_space_check_ = 0;

  // Degraded state: set by the writer, read anywhere.
  std::atomic<bool> degraded_{false};
  std::atomic<bool> degraded_logged_{false};  // the warning of this episode is out
  std::atomic<int64_t> retry_at_ns_{0};       // steady_clock
  mutable Mutex reason_mu_;
  Status degraded_status_ GUARDED_BY(reason_mu_);  // why the tier is degraded

  // Counters.
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> writes_{0}, write_bytes_{0}, writes_dropped_{0};
  std::atomic<uint64_t> packs_reclaimed_{0}, stale_{0}, corrupt_{0}, read_errors_{0};
  std::atomic<uint64_t> compressed_{0}, read_around_{0};
  std::atomic<uint64_t> streamed_{0}, stream_ios_{0}, stream_bytes_{0};
  Mutex stream_mu_;
  std::condition_variable stream_cv_;
  uint64_t stream_buffers_ GUARDED_BY(stream_mu_) = 0;  // bytes of run buffers held
  // Run buffers kept mapped for the next Stream(), by size class (RunBuffer), at most
  // stream_buffer_bytes of them. Mapping a fresh buffer per run and unmapping it after
  // faults in and zeroes every page for the O_DIRECT read, then shoots down the TLB at
  // munmap, a large share of the daemon's CPU in a streaming epoch (docs/benchmarks.md,
  // "Figures behind design choices").
  std::multimap<size_t, char*> run_buffers_ GUARDED_BY(stream_mu_);
  uint64_t run_buffers_bytes_ GUARDED_BY(stream_mu_) = 0;
  std::atomic<uint64_t> corrupt_logged_{0};
  uint64_t dangling_records_ = 0;              // set during Recover() only
  bool index_rebuilt_after_corruption_ = false;  // set during Recover() only
  std::atomic<bool> full_logged_{false};

  std::thread writer_;  // last: started after everything above is initialised
};

}  // namespace epochfs::cache
