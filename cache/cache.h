// The epochfs cache: a RAM tier over a persistent SSD tier of pack files.
//
// What it stores. A source file is cut into chunks of `chunk_size` bytes (1 MiB by
// default); a file no larger than one chunk is therefore stored whole, as chunk 0.
// A chunk is keyed by the source file's (dev, ino, chunk index) and carries the
// file's identity (dev, ino, size, mtime_ns, ctime_ns) at the time it was read. A
// lookup with a different identity finds nothing: a changed, replaced or deleted
// file is never served stale, and the dead entry is dropped.
//
// Where. The RAM tier is a byte-budgeted map of immutable buffers. The SSD tier is a
// directory of append-only pack files (`packs/pack-NNNNNN.epk`), each a sequence of
// self-describing entries (header + lz4 or raw bytes, XXH3-64 of the plain bytes), and
// a RocksDB index (`index/`) from key to location. Pack bytes are synced before the
// index records that point at them are written, so an index record never points at
// bytes that were not durable; a record whose bytes fail their checksum is dropped and
// counted, and the read falls through to the source. If the index is lost it is
// rebuilt by scanning the packs (cache/FORMAT.md has the formats).
//
// Misses. Read() on a miss reads the whole chunk from the source fd (the chunks of one
// read together through io_uring; a single chunk with pread), serves it, puts it in the
// RAM tier and queues it for the SSD tier. The SSD writer runs in the background: a
// slow or full cache disk never fails or blocks a read; it degrades to serving from the
// source and says so once in the log and in Stats().
//
// Thread-safety: every method may be called from any thread concurrently.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/counters.h"
#include "base/status.h"

namespace epochfs::cache {

class EvictionPolicy;  // cache/eviction.h

// What a source file is, for the purpose of deciding whether cached bytes of it are
// still its bytes. Taken with fstat() on the open source fd.
struct SourceIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;

  bool operator==(const SourceIdentity&) const = default;
  static SourceIdentity FromStat(const struct ::stat& st);
};

// statx(dir_fd, name, flags) for an identity check, as a struct stat with every basic
// field but the access time (st_atim is left zero); ("", AT_EMPTY_PATH) stats dir_fd
// itself. Why not fstat(): a read leaves a FUSE or NFS client's cached atime stale, so
// an fstat() after one costs a round trip to its server (GlusterFS: one per file read);
// without the atime the client answers from its attribute cache while that is valid,
// as it does for every field an identity holds. On a local filesystem the two are the
// same.
Result<struct ::stat> StatForIdentity(int dir_fd, const char* name, int flags);
// The same for the open (or O_PATH) fd itself.
Result<struct ::stat> StatForIdentity(int fd);

// The "racily clean" window (git's): a file whose ctime is this close to a moment may
// have changed again within the same timestamp tick, leaving its identity as it was.
// The cache admits no bytes read that close to a change; fs/ trusts no kernel page
// cache identity recorded that close to one.
inline constexpr int64_t kRacilyCleanNs = 50'000'000;
// Now, on the clock file timestamps come from.
int64_t WallClockNs();

// A source file: the fd the cache reads misses from, and its identity.
struct SourceFile {
  int fd = -1;  // borrowed, read-only; owned by the caller
  SourceIdentity id;
  // Set where `fd` is -1: opens the file only when a chunk must come from the source,
  // and returns an fd borrowed for the rest of the call. A hit (and a chunk another
  // read is bringing) then costs no open: on a network source, round trips of its own.
  std::function<Result<int>()> open;
};

enum class Tier : uint8_t { kRam, kSsd, kSource };

// Bytes served by Read(). `owner` keeps them alive; `data` points into it. Cheap to
// copy; the bytes are immutable.
struct ReadBuffer {
  std::shared_ptr<const void> owner;
  const char* data = nullptr;
  size_t size = 0;
  Tier tier = Tier::kSource;  // the slowest tier any part of the read came from
};

// Watches demand reads (Read(), not Prefetch()) that had to read the source: the
// prefetcher's pacer (prefetcher/source_pacer.h) slows readahead when they come late.
class DemandObserver {
 public:
  virtual ~DemandObserver() = default;
  // Filling a demand read from the source took `took`. Called on the reading thread,
  // from many at once: must be cheap and thread-safe.
  virtual void OnDemandSourceRead(std::chrono::steady_clock::duration took) = 0;
};

enum class RamPolicy : uint8_t {
  kLru,     // least recently used goes first
  kStatic,  // once full, admit nothing new (CoorDL's MinIO: hit ratio c under reshuffling)
};

struct CacheOptions {
  std::filesystem::path cache_dir;   // holds packs/ and index/; created if missing
  uint64_t ram_budget = 1ull << 30;  // bytes of chunk data in the RAM tier
  uint64_t disk_budget = 16ull << 30;  // bytes of pack files in the SSD tier; 0 = no SSD tier
  uint32_t chunk_size = 1u << 20;    // also the largest file that is stored whole
  uint64_t pack_size = 256ull << 20;  // a pack is sealed once it reaches this size
  // An entry is stored lz4-compressed only when that saves at least this fraction.
  double min_compression_saving = 1.0 / 8.0;
  bool use_io_uring = true;          // false forces the pread fallback
  // Keep this much of the cache filesystem free whatever the budget says; writing
  // stops (degraded, reads unaffected) below it.
  uint64_t min_free_bytes = 256ull << 20;
  RamPolicy ram_policy = RamPolicy::kLru;
  // When set, the RAM tier uses this policy instead of `ram_policy` (the prefetcher's
  // epoch-aware policy). The tier calls it under its own lock (cache/eviction.h); the
  // caller may keep a reference to feed it, so it must be thread-safe on its own.
  std::shared_ptr<EvictionPolicy> ram_policy_override;
  // Packs are fdatasync'ed, and their index records written, at least this often.
  uint32_t sync_interval_ms = 1000;
  // Chunks read but not yet written to the SSD tier wait in memory, up to this many
  // bytes (a reader that would exceed it waits for the writer).
  uint64_t ssd_write_queue_bytes = 64ull << 20;
  // StreamFromSsd()'s read buffers, all callers together (they wait for each other).
  uint64_t stream_buffer_bytes = 16ull << 20;
  // Freed buffers of single-entry SSD reads kept for the next ones (buffer_pool.h).
  uint64_t read_buffer_bytes = 8ull << 20;
  // Told about every demand read that had to read the source (readahead pacing
  // watches them); must outlive the cache. Optional.
  DemandObserver* demand_observer = nullptr;
  // A small entry read from the SSD tier brings its pack neighbours (read in the same
  // aligned window) into RAM too: cheap readahead for files written together.
  bool read_around = true;
  // Drops the kernel's cached pages of file (dev, ino): called when the RAM tier lets
  // go of bytes it had moved into the kernel's page cache (MoveToKernel), from the
  // thread that made it let go (never under a cache lock; it may be a FUSE worker in a
  // request, so it must only queue the drop). Unset: MoveToKernel is refused.
  std::function<void(uint64_t dev, uint64_t ino)> drop_kernel_pages;
};

// What Cache::Prefetch did.
struct PrefetchResult {
  uint32_t chunks_in_ram = 0;   // of the file's chunks, after the call
  uint32_t source_reads = 0;    // chunks read from the source by this call
  uint64_t source_bytes = 0;    // bytes of those
};

// The SSD tier's counters since Open() (cache/ssd_tier.h counts them); gauges (bytes,
// entries, packs) are current values. All zero when there is no SSD tier.
struct SsdStats {
  uint64_t bytes = 0;    // pack files on disk
  uint64_t entries = 0;  // indexed entries
  uint64_t evictions = 0;
  uint64_t writes = 0, write_bytes = 0, writes_dropped = 0;
  uint64_t packs = 0, packs_reclaimed = 0;
  uint64_t stale_entries = 0;    // dropped because the source identity changed
  uint64_t corrupt_entries = 0;  // dropped because their bytes failed the checksum
  uint64_t read_errors = 0;      // pack reads that failed (served as misses)
  uint64_t compressed_entries = 0;
  uint64_t read_around_entries = 0;  // neighbours handed to the RAM tier by read-around
  // Stream() (Cache::StreamFromSsd): entries brought (into RAM, or taken by its taker),
  // the IOs and bytes read.
  uint64_t streamed_entries = 0, stream_ios = 0, stream_bytes = 0;
  // Single reads (an entry, a read-around window): how many, and how many of them went
  // into a buffer used before (BufferPool).
  uint64_t read_buffers = 0, read_buffers_reused = 0;
  // At start-up: index records that pointed at missing pack bytes (dropped), and
  // whether the index was found damaged and rebuilt from the packs.
  uint64_t dangling_records = 0;
  bool index_rebuilt = false;
  bool degraded = false;  // the tier stopped writing (full or failing disk)
  std::string degraded_reason;

  // Names each counter (base/counters.h), under the stats keys it always had
  // ("ssd_bytes", "packs", ...). Two stay out: stale_entries, which CacheStats counts
  // for both tiers together, and read_errors, which is for tests and the log.
  void VisitCounters(const CounterVisitor& visit) const;
};

// Counters since Open(). Gauges (bytes, entries) are current values.
struct CacheStats {
  uint64_t ram_hits = 0, ram_hit_bytes = 0;
  uint64_t ssd_hits = 0, ssd_hit_bytes = 0;
  uint64_t misses = 0, miss_bytes = 0;
  uint64_t source_reads = 0, source_bytes = 0;
  uint64_t ram_bytes = 0, ram_entries = 0, ram_evictions = 0;
  uint64_t ram_budget = 0;  // the RAM tier's budget now (Cache::SetRamBudget)
  // Of ram_bytes: what the bytes moved into the kernel's page cache are charged
  // (MoveToKernel), how many chunks they are, and how many had their pages dropped
  // when they left the tier.
  uint64_t kernel_bytes = 0, kernel_entries = 0, kernel_drops = 0;
  // Of both tiers: entries dropped because the source identity changed.
  uint64_t stale_entries = 0;
  uint64_t not_admitted = 0;  // fills skipped: file changed too recently to trust
  // Prefetch() and StreamFromSsd(): chunks brought from the SSD tier (into RAM, or taken
  // by StreamFromSsd's taker) / read from the source, and chunks found already in RAM.
  // Not counted as hits or misses.
  uint64_t prefetch_from_ssd = 0, prefetch_from_source = 0, prefetch_already_cached = 0;
  uint64_t prefetch_bytes = 0;  // bytes of the above read from SSD or source
  bool io_uring = false;        // whether the io_uring path is in use
  SsdStats ssd;                 // the SSD tier's own counters

  // Names each counter for the stats snapshot and Prometheus (base/counters.h), the
  // SSD tier's through SsdStats::VisitCounters.
  void VisitCounters(const CounterVisitor& visit) const;
};

// What the RAM tier holds against its budget, read together (Cache::RamUsage).
struct RamUse {
  uint64_t budget = 0;
  uint64_t bytes = 0;     // charged, kernel entries included
  uint64_t resident = 0;  // of bytes: what lives in the daemon's memory (all but pushed pages)
};

class Cache {
 public:
  // Opens (or creates) the cache in options.cache_dir, recovering the index from the
  // packs if it is missing or damaged. Errors: kInvalidArgument (bad options),
  // kIoError/kPermission (cache dir unusable).
  static Result<std::unique_ptr<Cache>> Open(const CacheOptions& options);

  virtual ~Cache() = default;

  // Reads up to `length` bytes at `offset` of `file` (fewer at end of file). Serves
  // from RAM, then SSD, then the source, filling the faster tiers on the way. Cache
  // failures never fail a read; only the source can (kIoError, ...).
  virtual Result<ReadBuffer> Read(const SourceFile& file, uint64_t offset, size_t length) = 0;

  // Fills the tiers with every chunk of `file` as Read() would (RAM from SSD, both from
  // the source), without counting demand hits or misses. Whether a chunk stays in RAM
  // is the RAM policy's decision. Returns how many of the file's chunks are in RAM
  // afterwards (0 when the policy refused them all) and what was read from the source
  // (for a readahead budget), or the source's error.
  virtual Result<PrefetchResult> Prefetch(const SourceFile& file) = 0;

  // Brings the files into RAM from the SSD tier as Prefetch() would, but all at once:
  // their entries are read in pack order, in large sequential reads (ssd_tier.h,
  // Streaming), verified, and offered to the RAM policy. `files` carry the identities
  // the caller just took from the source; a chunk cached under another identity is not
  // streamed. Returns, per file, whether every chunk of it is in RAM afterwards (or was
  // taken, below). Reads
  // nothing from the source: files it could not bring (not cached, stale, corrupt,
  // refused by the policy) are the caller's to read another way.
  // `take`, if set, is offered each file stored whole (one chunk) first, with its
  // verified bytes straight from the read buffer, valid during the call only: a file
  // it takes is not copied into the RAM tier, and counts as brought. (Readahead pushes
  // such files on into the kernel's page cache, where a RAM copy would only add fresh
  // memory and a copy per file: docs/architecture.md, "Pushed pages".)
  using WholeFileTaker = std::function<bool(const SourceIdentity& file, std::span<const char> bytes)>;
  virtual std::vector<bool> StreamFromSsd(std::span<const SourceIdentity> files,
                                          const WholeFileTaker& take = {}) = 0;
  // Prefetch() of a file whose bytes the caller can hand on whole (the passthrough filler:
  // the kernel read the file from the source itself and holds none of it): a whole file
  // (one chunk) read from the source is first offered to `take`, and when it takes them
  // (into the kernel's page cache) the RAM tier keeps no copy, for the reason
  // StreamFromSsd's taker has. Only with an SSD tier, which gets them either way.
  virtual Result<PrefetchResult> PrefetchTaken(const SourceFile& file,
                                               const WholeFileTaker& take) = 0;

  // Moves the bytes of `file` from the RAM tier into the kernel's page cache:
  // `store(offset, bytes)` is called for each chunk in order and says whether the kernel
  // took them. The tier then holds a kernel entry in the chunk's place, charged as its
  // pages, until the policy lets it go (CacheOptions::drop_kernel_pages drops them). A
  // chunk the tier does not hold with this identity, or one `store` refuses, ends the
  // move: false, and that chunk stays in RAM. Already-moved chunks stay moved.
  using KernelStore = std::function<bool(uint64_t offset, std::span<const char> bytes)>;
  virtual bool MoveToKernel(const SourceIdentity& file, const KernelStore& store) = 0;
  // The same for a whole file (one chunk) the tier does not hold, whose bytes the caller
  // has (StreamFromSsd's taker): a kernel entry is made for it, charged as its pages,
  // then `store(0, bytes)` is called. False when the tier does not admit it or `store`
  // refuses; no entry is left then.
  virtual bool MoveToKernel(const SourceIdentity& file, std::span<const char> bytes,
                            const KernelStore& store) = 0;
  // The same, but the tier keeps its bytes (and their charge): the kernel's copy is then
  // its own, like the pages of any read, and a file is copied again only once a read
  // reaching the daemon showed the kernel lost it. False when nothing was copied.
  virtual bool CopyToKernel(const SourceIdentity& file, const KernelStore& store) = 0;
  // Whether CopyToKernel would copy any chunk of `file` now (cheap: no I/O).
  virtual bool CopyPending(const SourceIdentity& file) const = 0;
  // Whether every chunk of `file` is in the RAM tier with its bytes (not moved).
  virtual bool HoldsInRam(const SourceIdentity& file) const = 0;

  // Demand reads (Read(), not Prefetch()) now filling chunks from the SSD tier or the
  // source: readahead holds back while this is non-zero (demand first).
  virtual uint32_t DemandFillsInFlight() const = 0;

  // Where the SSD tier holds the first chunk of file (dev, ino), as a number that
  // orders entries as they lie on disk (pack, then offset), or nullopt if it holds
  // none. Identity is not checked: this is for ordering reads, not for serving them.
  virtual std::optional<uint64_t> SsdPosition(uint64_t dev, uint64_t ino) const = 0;

  // Drops every cached chunk of the file (dev, ino), e.g. after a write through the
  // mount. Identity checks make this an optimisation, not a correctness requirement.
  virtual void Invalidate(uint64_t dev, uint64_t ino) = 0;

  // Makes every queued SSD write durable (packs synced, index written).
  virtual Status Flush() = 0;

  virtual CacheStats Stats() const = 0;
  // The RAM tier's budget is now `bytes` (CacheOptions::ram_budget at first). Lowered
  // below what it holds, the tier evicts at once, dropping the kernel's pages of what
  // it pushed (RamTier::SetBudget).
  virtual void SetRamBudget(uint64_t bytes) = 0;
  virtual RamUse RamUsage() const = 0;
  // Whether every chunk of `file` is a kernel entry of the RAM tier now (moved by
  // MoveToKernel and not let go of since). A push checks it after its store: an entry
  // evicted while the store was on its way may have had its pages dropped before they
  // arrived, and then nothing would drop or charge them.
  virtual bool HoldsInKernel(const SourceIdentity& file) const = 0;
};

}  // namespace epochfs::cache
