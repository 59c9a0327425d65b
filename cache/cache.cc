// The Cache: RAM tier -> SSD tier -> source, with coalesced misses and the
// "racily clean" admission rule. See cache.h for the contract.
#include "cache/cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "cache/cache_internal.h"
#include "cache/chunk_bytes.h"
#include "cache/eviction.h"
#include "cache/io_engine.h"
#include "cache/pack.h"
#include "cache/ram_tier.h"
#include "cache/ssd_tier.h"

namespace epochfs::cache {

SourceIdentity SourceIdentity::FromStat(const struct ::stat& st) {
  return SourceIdentity{
      .dev = static_cast<uint64_t>(st.st_dev),
      .ino = static_cast<uint64_t>(st.st_ino),
      .size = static_cast<uint64_t>(st.st_size),
      .mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
      .ctime_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec,
  };
}

Result<struct ::stat> StatForIdentity(int dir_fd, const char* name, int flags) {
  struct ::statx sx {};
  if (::statx(dir_fd, name, flags, STATX_BASIC_STATS & ~STATX_ATIME, &sx) < 0) {
    return Status::FromErrno(errno, fmt::format("stat '{}'", name));
  }
  struct ::stat st {};
  st.st_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  st.st_ino = sx.stx_ino;
  st.st_mode = sx.stx_mode;
  st.st_nlink = sx.stx_nlink;
  st.st_uid = sx.stx_uid;
  st.st_gid = sx.stx_gid;
  st.st_rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
  st.st_size = static_cast<off_t>(sx.stx_size);
  st.st_blksize = sx.stx_blksize;
  st.st_blocks = static_cast<blkcnt_t>(sx.stx_blocks);
  st.st_mtim = {sx.stx_mtime.tv_sec, sx.stx_mtime.tv_nsec};
  st.st_ctim = {sx.stx_ctime.tv_sec, sx.stx_ctime.tv_nsec};
  return st;
}

Result<struct ::stat> StatForIdentity(int fd) { return StatForIdentity(fd, "", AT_EMPTY_PATH); }

int64_t WallClockNs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

namespace {

// Nothing to read: no tier was used, so report the fastest.
ReadBuffer EmptyBuffer() {
  ReadBuffer out;
  out.tier = Tier::kRam;
  return out;
}

Tier Slower(Tier a, Tier b) { return static_cast<uint8_t>(a) >= static_cast<uint8_t>(b) ? a : b; }

// One chunk of a read, from wherever it came.
struct Piece {
  ChunkBytes bytes;
  Tier tier = Tier::kRam;
  // This reader read it from the source itself. A reader that waited on another's
  // read (Inflight) gets its bytes with tier kSource too, but its wait is no source
  // read: counted as one, a wait that began near the leader's end set the pacer's base
  // latency far below a real read's (docs/benchmarks.md, "A latency-bound network
  // source").
  bool read_here = false;
};

// A chunk being fetched from below the RAM tier by one reader (the leader); other
// readers of the same chunk and identity wait for it instead of reading it again.
// (The kernel splits one application read of a large file into several concurrent
// FUSE reads of the same chunk.)
struct Inflight {
  explicit Inflight(const SourceIdentity& identity) : id(identity), started_ns(WallClockNs()) {}
  const SourceIdentity id;
  // When the leader began: a reader joins only if the file had settled by then (see
  // FillFromBelow).
  const int64_t started_ns;
  Mutex mu;
  std::condition_variable cv;
  bool done GUARDED_BY(mu) = false;
  bool ok GUARDED_BY(mu) = false;
  Piece piece GUARDED_BY(mu);
};

std::unique_ptr<EvictionPolicy> MakePolicy(RamPolicy policy) {
  switch (policy) {
    case RamPolicy::kStatic:
      return NewStaticPolicy();
    case RamPolicy::kLru:
      break;
  }
  return NewLruPolicy();
}

Status Validate(const CacheOptions& o) {
  if (o.chunk_size == 0 || o.chunk_size > kMaxEntryPlainLen) {
    return Status::InvalidArgument(
        fmt::format("chunk_size must be in [1, {}], not {}", kMaxEntryPlainLen, o.chunk_size));
  }
  if (!(o.min_compression_saving >= 0.0 && o.min_compression_saving <= 1.0)) {
    return Status::InvalidArgument("min_compression_saving must be in [0, 1]");
  }
  if (o.disk_budget > 0) {
    if (o.cache_dir.empty()) return Status::InvalidArgument("cache_dir is required");
    const uint64_t entry = uint64_t{o.chunk_size} + kEntryHeaderSize + kPackHeaderSize;
    if (o.pack_size < entry) {
      return Status::InvalidArgument(
          fmt::format("pack_size {} cannot hold one chunk of {}", o.pack_size, o.chunk_size));
    }
    if (o.disk_budget < 8 * entry) {
      return Status::InvalidArgument(
          fmt::format("disk budget {} is too small for chunk size {} (at least {}; a budget of "
                      "0 runs without the SSD tier)",
                      o.disk_budget, o.chunk_size, 8 * entry));
    }
  }
  return Status::Ok();
}

class CacheImpl final : public Cache {
 public:
  CacheImpl(const CacheOptions& options, std::shared_ptr<IoEngine> io, std::unique_ptr<RamTier> ram,
            std::unique_ptr<SsdTier> ssd)
      : options_(options), io_(std::move(io)), ram_(std::move(ram)), ssd_(std::move(ssd)) {}

  // ssd_ (declared last) goes first: it flushes and joins its writer while the RAM
  // tier it hands read-around entries to still exists.
  ~CacheImpl() override = default;

  Result<ReadBuffer> Read(const SourceFile& file, uint64_t offset, size_t length) override;
  Result<PrefetchResult> Prefetch(const SourceFile& file) override {
    return PrefetchTaken(file, nullptr);
  }
  Result<PrefetchResult> PrefetchTaken(const SourceFile& file, const WholeFileTaker& take) override;

  std::vector<bool> StreamFromSsd(std::span<const SourceIdentity> files,
                                  const WholeFileTaker& take) override;

  uint32_t DemandFillsInFlight() const override {
    return demand_fills_.load(std::memory_order_relaxed);
  }

  std::optional<uint64_t> SsdPosition(uint64_t dev, uint64_t ino) const override {
    return ssd_ ? ssd_->Position(ChunkKey{dev, ino, 0}) : std::nullopt;
  }

  bool MoveToKernel(const SourceIdentity& file, const KernelStore& store) override {
    if (!options_.drop_kernel_pages) return false;
    const uint64_t chunks = ChunksOf(file);
    for (uint64_t c = 0; c < chunks; ++c) {
      const ChunkKey key{file.dev, file.ino, static_cast<uint32_t>(c)};
      std::optional<ChunkBytes> bytes = ram_->TakeForKernel(key, file);
      if (!bytes) return false;
      if (!store(c * options_.chunk_size, bytes->span())) {
        ram_->ReturnFromKernel(key, file, std::move(*bytes));
        return false;
      }
    }
    return chunks > 0;
  }

  bool MoveToKernel(const SourceIdentity& file, std::span<const char> bytes,
                    const KernelStore& store) override {
    if (!options_.drop_kernel_pages || file.size != bytes.size() || ChunksOf(file) != 1) return false;
    const ChunkKey key{file.dev, file.ino, 0};
    if (!ram_->InsertKernelEntry(key, file, bytes.size())) return false;
    if (!store(0, bytes)) {
      ram_->ForgetKernelEntry(key, file);
      return false;
    }
    return true;
  }

  bool CopyToKernel(const SourceIdentity& file, const KernelStore& store) override {
    const uint64_t chunks = ChunksOf(file);
    bool copied = false;
    for (uint64_t c = 0; c < chunks; ++c) {
      const ChunkKey key{file.dev, file.ino, static_cast<uint32_t>(c)};
      std::optional<ChunkBytes> bytes = ram_->TakeCopyForKernel(key, file);
      if (!bytes) continue;  // absent, moved, or copied already
      if (!store(c * options_.chunk_size, bytes->span())) {
        ram_->CopyNotTaken(key, file);  // a retry (the inode known by then) copies it
        return copied;
      }
      copied = true;
    }
    return copied;
  }

  bool CopyPending(const SourceIdentity& file) const override {
    for (uint64_t c = 0; c < ChunksOf(file); ++c) {
      if (ram_->CopyPending(ChunkKey{file.dev, file.ino, static_cast<uint32_t>(c)}, file)) {
        return true;
      }
    }
    return false;
  }

  bool HoldsInRam(const SourceIdentity& file) const override {
    return EveryChunk(file, [&](const ChunkKey& key) { return ram_->HoldsBytes(key, file); });
  }

  void Invalidate(uint64_t dev, uint64_t ino) override {
    ram_->EraseFile(dev, ino);
    if (ssd_) ssd_->Invalidate(dev, ino);
  }

  Status Flush() override { return ssd_ ? ssd_->Flush() : Status::Ok(); }

  CacheStats Stats() const override;
  void SetRamBudget(uint64_t bytes) override { ram_->SetBudget(bytes); }
  RamUse RamUsage() const override {
    const RamTier::Stats ram = ram_->GetStats();
    // A kernel entry's charge is its pages, which the kernel holds, and its bookkeeping,
    // which the daemon does.
    const uint64_t pages = ram.kernel_bytes - ram.kernel_entries * RamTier::kEntryOverheadBytes;
    return RamUse{.budget = ram.budget, .bytes = ram.bytes, .resident = ram.bytes - pages};
  }
  bool HoldsInKernel(const SourceIdentity& file) const override {
    return EveryChunk(file, [&](const ChunkKey& key) { return ram_->HoldsKernelEntry(key, file); });
  }

 private:
  uint64_t ChunksOf(const SourceIdentity& file) const {
    return file.size == 0 ? 0 : (file.size - 1) / options_.chunk_size + 1;
  }
  // Whether `holds` is true of every chunk of `file` (false for an empty file).
  template <typename Holds>
  bool EveryChunk(const SourceIdentity& file, Holds holds) const {
    const uint64_t chunks = ChunksOf(file);
    for (uint64_t c = 0; c < chunks; ++c) {
      if (!holds(ChunkKey{file.dev, file.ino, static_cast<uint32_t>(c)})) return false;
    }
    return chunks > 0;
  }
  ChunkKey KeyOf(const SourceFile& file, uint64_t chunk) const {
    return ChunkKey{file.id.dev, file.id.ino, static_cast<uint32_t>(chunk)};
  }
  uint64_t ChunkLen(const SourceFile& file, uint64_t chunk) const {
    const uint64_t start = chunk * options_.chunk_size;
    return std::min<uint64_t>(options_.chunk_size, file.id.size - start);
  }

  // `take` (may be empty): PrefetchTaken's.
  Status FillFromBelow(const SourceFile& file, uint64_t first, const std::vector<size_t>& missing,
                       std::vector<Piece>& pieces, const WholeFileTaker& take = {});
  Status ReadFromSource(const SourceFile& file, uint64_t first, const std::vector<size_t>& which,
                        std::vector<Piece>& pieces, const WholeFileTaker& take = {});
  void Publish(const ChunkKey& key, const std::shared_ptr<Inflight>& inflight, bool ok,
               const Piece& piece);
  ReadBuffer Assemble(uint64_t offset, uint64_t end, uint64_t first, const SourceFile& file,
                      const std::vector<Piece>& pieces);

  const CacheOptions options_;
  const std::shared_ptr<IoEngine> io_;
  const std::unique_ptr<RamTier> ram_;

  Mutex inflight_mu_;
  std::unordered_map<ChunkKey, std::shared_ptr<Inflight>, ChunkKeyHash>
      inflight_ GUARDED_BY(inflight_mu_);

  std::atomic<uint32_t> demand_fills_{0};
  std::atomic<uint64_t> ram_hits_{0}, ram_hit_bytes_{0};
  std::atomic<uint64_t> ssd_hits_{0}, ssd_hit_bytes_{0};
  std::atomic<uint64_t> misses_{0}, miss_bytes_{0};
  std::atomic<uint64_t> source_reads_{0}, source_bytes_{0};
  std::atomic<uint64_t> not_admitted_{0};
  std::atomic<uint64_t> prefetch_from_ssd_{0}, prefetch_from_source_{0};
  std::atomic<uint64_t> prefetch_already_cached_{0}, prefetch_bytes_{0};

  const std::unique_ptr<SsdTier> ssd_;  // null when disk_budget == 0
};

Result<ReadBuffer> CacheImpl::Read(const SourceFile& file, uint64_t offset, size_t length) {
  const uint64_t size = file.id.size;
  if (length == 0 || offset >= size) return EmptyBuffer();
  const uint64_t end = size - offset < length ? size : offset + length;
  const uint64_t first = offset / options_.chunk_size;
  const uint64_t last = (end - 1) / options_.chunk_size;

  std::vector<Piece> pieces(last - first + 1);
  std::vector<size_t> missing;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::optional<ChunkBytes> bytes = ram_->Lookup(KeyOf(file, first + i), file.id);
    if (bytes) {
      pieces[i] = Piece{std::move(*bytes), Tier::kRam};
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    demand_fills_.fetch_add(1, std::memory_order_relaxed);
    const auto started = std::chrono::steady_clock::now();
    Status filled = FillFromBelow(file, first, missing, pieces);
    demand_fills_.fetch_sub(1, std::memory_order_relaxed);
    EPOCHFS_RETURN_IF_ERROR(filled);
    if (options_.demand_observer != nullptr &&
        std::any_of(missing.begin(), missing.end(), [&](size_t i) { return pieces[i].read_here; })) {
      options_.demand_observer->OnDemandSourceRead(std::chrono::steady_clock::now() - started);
    }
  }
  return Assemble(offset, end, first, file, pieces);
}

Result<PrefetchResult> CacheImpl::PrefetchTaken(const SourceFile& file,
                                                const WholeFileTaker& take) {
  PrefetchResult result;
  const uint64_t size = file.id.size;
  if (size == 0) return result;
  const uint64_t chunks = (size - 1) / options_.chunk_size + 1;
  std::vector<Piece> pieces(chunks);
  std::vector<size_t> missing;
  for (size_t i = 0; i < chunks; ++i) {
    if (ram_->Contains(KeyOf(file, i))) {
      ++prefetch_already_cached_;
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    // The same path as a demand miss (coalesced with concurrent readers of the chunk),
    // but Assemble() is skipped, so nothing counts as a hit or a miss.
    EPOCHFS_RETURN_IF_ERROR(FillFromBelow(file, 0, missing, pieces, take));
    for (size_t i : missing) {
      prefetch_bytes_ += pieces[i].bytes.size;
      if (pieces[i].tier == Tier::kSsd) ++prefetch_from_ssd_;
      if (pieces[i].read_here) {
        ++prefetch_from_source_;
        ++result.source_reads;
        result.source_bytes += pieces[i].bytes.size;
      }
    }
  }
  for (size_t i = 0; i < chunks; ++i) result.chunks_in_ram += ram_->Contains(KeyOf(file, i)) ? 1 : 0;
  return result;
}

std::vector<bool> CacheImpl::StreamFromSsd(std::span<const SourceIdentity> files,
                                           const WholeFileTaker& take) {
  std::vector<bool> in_ram(files.size(), false);
  if (!ssd_) return in_ram;
  std::vector<StreamItem> items;
  std::vector<size_t> file_of;  // items[k] is a chunk of files[file_of[k]]
  std::vector<uint32_t> missing(files.size(), 0);
  for (size_t f = 0; f < files.size(); ++f) {
    const SourceIdentity& id = files[f];
    const uint64_t chunks = id.size == 0 ? 0 : (id.size - 1) / options_.chunk_size + 1;
    for (uint64_t c = 0; c < chunks; ++c) {
      const ChunkKey key{id.dev, id.ino, static_cast<uint32_t>(c)};
      if (ram_->Contains(key)) {
        ++prefetch_already_cached_;
        continue;
      }
      items.push_back(StreamItem{key, id});
      file_of.push_back(f);
      ++missing[f];
    }
  }
  SsdTier::Taker take_whole;
  if (take) {
    take_whole = [&](const StreamItem& item, std::span<const char> bytes) {
      return item.key.chunk == 0 && item.id.size == bytes.size() && take(item.id, bytes);
    };
  }
  const std::vector<bool> streamed = ssd_->Stream(items, take_whole);
  for (size_t k = 0; k < items.size(); ++k) {
    if (!streamed[k]) continue;
    --missing[file_of[k]];
    ++prefetch_from_ssd_;
    const uint64_t start = uint64_t{items[k].key.chunk} * options_.chunk_size;
    prefetch_bytes_ += std::min<uint64_t>(options_.chunk_size, items[k].id.size - start);
  }
  for (size_t f = 0; f < files.size(); ++f) in_ram[f] = missing[f] == 0;
  return in_ram;
}

Status CacheImpl::FillFromBelow(const SourceFile& file, uint64_t first,
                                const std::vector<size_t>& missing, std::vector<Piece>& pieces,
                                const WholeFileTaker& take) {
  struct Claim {
    size_t i;
    std::shared_ptr<Inflight> inflight;  // null: not coalesced (see below)
    bool leader;
  };
  std::vector<Claim> claims;
  {
    MutexLock lock(inflight_mu_);
    for (size_t i : missing) {
      const ChunkKey key = KeyOf(file, first + i);
      auto it = inflight_.find(key);
      if (it == inflight_.end()) {
        auto inflight = std::make_shared<Inflight>(file.id);
        inflight_.emplace(key, inflight);
        claims.push_back(Claim{i, std::move(inflight), true});
      } else if (it->second->id == file.id &&
                 file.id.ctime_ns + kRacilyCleanNs < it->second->started_ns) {
        // Only a file that had settled before the leader began: a change since then
        // would have a later ctime, so the same identity means the same bytes. A file
        // that changed just before may have changed again within the same timestamp
        // tick (same identity, other bytes) after the leader read it, and this reader,
        // which came later, must see that change: it reads for itself.
        claims.push_back(Claim{i, it->second, false});
      } else {
        claims.push_back(Claim{i, nullptr, true});
      }
    }
  }

  // Leaders first (SSD, then one batch from the source), and publish every claimed
  // chunk before waiting on anyone: two readers that lead and follow each other's
  // chunks then cannot deadlock.
  std::vector<size_t> from_source;
  std::vector<const Claim*> source_claims;
  for (const Claim& claim : claims) {
    if (!claim.leader) continue;
    const ChunkKey key = KeyOf(file, first + claim.i);
    // A leader that finished just before we registered left the chunk in RAM.
    if (std::optional<ChunkBytes> bytes = ram_->Lookup(key, file.id)) {
      pieces[claim.i] = Piece{*bytes, Tier::kRam};
      Publish(key, claim.inflight, true, pieces[claim.i]);
      continue;
    }
    std::optional<ChunkBytes> bytes = ssd_ ? ssd_->Lookup(key, file.id) : std::nullopt;
    if (bytes) {
      pieces[claim.i] = Piece{*bytes, Tier::kSsd};
      ram_->Insert(key, file.id, std::move(*bytes));
      Publish(key, claim.inflight, true, pieces[claim.i]);
    } else {
      from_source.push_back(claim.i);
      source_claims.push_back(&claim);
    }
  }
  Status status;
  if (!from_source.empty()) status = ReadFromSource(file, first, from_source, pieces, take);
  for (const Claim* claim : source_claims) {
    Publish(KeyOf(file, first + claim->i), claim->inflight, status.ok(), pieces[claim->i]);
  }
  if (!status.ok()) return status;

  std::vector<size_t> retry;  // the leader failed; its error may be its own (its fd)
  for (const Claim& claim : claims) {
    if (claim.leader) continue;
    MutexLock lock(claim.inflight->mu);
    while (!claim.inflight->done) lock.Wait(claim.inflight->cv);
    if (claim.inflight->ok) {
      pieces[claim.i] = claim.inflight->piece;
      pieces[claim.i].read_here = false;
    } else {
      retry.push_back(claim.i);
    }
  }
  if (!retry.empty()) return ReadFromSource(file, first, retry, pieces, take);
  return Status::Ok();
}

Status CacheImpl::ReadFromSource(const SourceFile& file, uint64_t first,
                                 const std::vector<size_t>& which, std::vector<Piece>& pieces,
                                 const WholeFileTaker& take) {
  int fd = file.fd;
  if (fd < 0) {
    if (!file.open) return Status::InvalidArgument("source read without an fd or a way to open one");
    Result<int> opened = file.open();
    if (!opened.ok()) return opened.status();
    fd = *opened;
  }
  const int64_t started_ns = WallClockNs();
  // Not zero-filled first: the read overwrites what it returns, and a sample's memset
  // was a measurable share of the daemon's CPU in a cold epoch (docs/benchmarks.md,
  // "The daemon's work per file read from a network source").
  std::vector<ChunkBytes::Fresh> buffers;
  buffers.reserve(which.size());
  std::vector<ReadOp> ops(which.size());
  for (size_t k = 0; k < which.size(); ++k) {
    const uint64_t chunk = first + which[k];
    ops[k].len = ChunkLen(file, chunk);
    buffers.push_back(ChunkBytes::Fresh::Allocate(ops[k].len));
    ops[k].fd = fd;
    ops[k].buf = buffers[k].data();
    ops[k].offset = chunk * options_.chunk_size;
  }
  Status status = io_->ReadBatch(ops);
  source_reads_ += ops.size();
  for (const ReadOp& op : ops) source_bytes_ += op.bytes_read;
  if (!status.ok()) return status;

  // Admit only bytes that are certainly the file's bytes for this identity: the file
  // did not change during the read, and it had not changed just before it started.
  Result<struct ::stat> after = StatForIdentity(fd);
  const bool unchanged = after.ok() && SourceIdentity::FromStat(*after) == file.id;
  const bool settled = unchanged && started_ns - file.id.ctime_ns > kRacilyCleanNs;
  for (size_t k = 0; k < which.size(); ++k) {
    const bool complete = ops[k].bytes_read == ops[k].len;  // else the file shrank
    ChunkBytes bytes = std::move(buffers[k]).Bytes(ops[k].bytes_read);
    pieces[which[k]] = Piece{bytes, Tier::kSource, /*read_here=*/true};
    if (settled && complete) {
      const ChunkKey key = KeyOf(file, first + which[k]);
      // Taken only where the SSD tier keeps a copy: the kernel may reclaim its pages.
      const bool whole = first + which[k] == 0 && bytes.size == file.id.size;
      if (!(ssd_ && take && whole && take(file.id, bytes.span()))) {
        ram_->Insert(key, file.id, bytes);
      }
      if (ssd_) ssd_->Enqueue(key, file.id, std::move(bytes));
    } else {
      ++not_admitted_;
    }
  }
  return Status::Ok();
}

void CacheImpl::Publish(const ChunkKey& key, const std::shared_ptr<Inflight>& inflight, bool ok,
                        const Piece& piece) {
  if (!inflight) return;
  {
    MutexLock lock(inflight->mu);
    inflight->done = true;
    inflight->ok = ok;
    if (ok) inflight->piece = piece;
  }
  inflight->cv.notify_all();
  MutexLock lock(inflight_mu_);
  auto it = inflight_.find(key);
  if (it != inflight_.end() && it->second == inflight) inflight_.erase(it);
}

ReadBuffer CacheImpl::Assemble(uint64_t offset, uint64_t end, uint64_t first,
                               const SourceFile& file, const std::vector<Piece>& pieces) {
  const uint64_t chunk_size = options_.chunk_size;
  // A chunk shorter than the identity's size says means the file shrank: the read
  // ends there.
  for (size_t i = 0; i < pieces.size(); ++i) {
    const uint64_t start = (first + i) * chunk_size;
    if (pieces[i].bytes.size < ChunkLen(file, first + i)) {
      end = std::min(end, start + pieces[i].bytes.size);
    }
  }
  ReadBuffer out = EmptyBuffer();
  if (end <= offset) return out;

  const uint64_t last = (end - 1) / chunk_size;
  for (uint64_t chunk = first; chunk <= last; ++chunk) {
    const Piece& piece = pieces[chunk - first];
    const uint64_t start = chunk * chunk_size;
    const uint64_t used = std::min(end, start + piece.bytes.size) - std::max(offset, start);
    out.tier = Slower(out.tier, piece.tier);
    switch (piece.tier) {
      case Tier::kRam:
        ++ram_hits_, ram_hit_bytes_ += used;
        break;
      case Tier::kSsd:
        ++ssd_hits_, ssd_hit_bytes_ += used;
        break;
      case Tier::kSource:
        ++misses_, miss_bytes_ += used;
        break;
    }
  }
  out.size = end - offset;
  if (first == last) {
    const Piece& piece = pieces[0];
    out.owner = piece.bytes.owner;
    out.data = piece.bytes.data + (offset - first * chunk_size);
    return out;
  }
  auto joined = std::make_shared<std::string>(out.size, '\0');
  for (uint64_t chunk = first; chunk <= last; ++chunk) {
    const Piece& piece = pieces[chunk - first];
    const uint64_t start = chunk * chunk_size;
    const uint64_t from = std::max(offset, start);
    const uint64_t to = std::min(end, start + piece.bytes.size);
    std::memcpy(joined->data() + (from - offset), piece.bytes.data + (from - start), to - from);
  }
  out.data = joined->data();
  out.owner = std::move(joined);
  return out;
}

CacheStats CacheImpl::Stats() const {
  CacheStats s;
  s.ram_hits = ram_hits_;
  s.ram_hit_bytes = ram_hit_bytes_;
  s.ssd_hits = ssd_hits_;
  s.ssd_hit_bytes = ssd_hit_bytes_;
  s.misses = misses_;
  s.miss_bytes = miss_bytes_;
  s.source_reads = source_reads_;
  s.source_bytes = source_bytes_;
  s.not_admitted = not_admitted_;
  s.prefetch_from_ssd = prefetch_from_ssd_;
  s.prefetch_from_source = prefetch_from_source_;
  s.prefetch_already_cached = prefetch_already_cached_;
  s.prefetch_bytes = prefetch_bytes_;
  const RamTier::Stats ram = ram_->GetStats();
  s.ram_bytes = ram.bytes;
  s.ram_entries = ram.entries;
  s.ram_evictions = ram.evictions;
  s.ram_budget = ram.budget;
  s.kernel_bytes = ram.kernel_bytes;
  s.kernel_entries = ram.kernel_entries;
  s.kernel_drops = ram.kernel_drops;
  s.stale_entries = ram.stale;
  s.io_uring = io_->is_io_uring();
  if (ssd_) {
    s.ssd = ssd_->GetStats();
    s.stale_entries += s.ssd.stale_entries;
  }
  return s;
}

}  // namespace

Result<std::unique_ptr<Cache>> OpenCacheWithIoEngine(const CacheOptions& options,
                                                     std::shared_ptr<IoEngine> io,
                                                     void (*tweak)(SsdTierOptions*)) {
  EPOCHFS_RETURN_IF_ERROR(Validate(options));
  std::unique_ptr<EvictionPolicy> policy = MakePolicy(options.ram_policy);
  if (options.ram_policy_override) policy = NewSharedPolicy(options.ram_policy_override);
  auto ram = std::make_unique<RamTier>(options.ram_budget, std::move(policy),
                                       options.drop_kernel_pages);
  std::unique_ptr<SsdTier> ssd;
  if (options.disk_budget > 0) {
    SsdTierOptions ssd_options{
        .dir = options.cache_dir,
        .disk_budget = options.disk_budget,
        .pack_size = options.pack_size,
        .min_compression_saving = options.min_compression_saving,
        .min_free_bytes = options.min_free_bytes,
        .sync_interval_ms = options.sync_interval_ms,
        // Entries leave the queue only once synced and indexed: sync before it fills.
        .sync_every_bytes = std::min<uint64_t>(16ull << 20, options.ssd_write_queue_bytes / 2),
        .max_pending_bytes = options.ssd_write_queue_bytes,
    };
    ssd_options.stream_buffer_bytes = options.stream_buffer_bytes;
    ssd_options.read_buffer_bytes = options.read_buffer_bytes;
    // A run never needs more than the whole budget for itself.
    ssd_options.stream_io_bytes = std::min<uint64_t>(ssd_options.stream_io_bytes,
                                                     std::max<uint64_t>(options.stream_buffer_bytes, 256u << 10));
    if (!options.read_around) ssd_options.read_around_window = 0;
    if (tweak != nullptr) tweak(&ssd_options);
    Result<std::unique_ptr<SsdTier>> opened = SsdTier::Open(ssd_options, *io, ram.get());
    if (!opened.ok()) return opened.status();
    ssd = std::move(opened).value();
  }
  spdlog::info("cache: RAM budget {} bytes, SSD budget {} bytes, chunk {} bytes, {}",
               options.ram_budget, options.disk_budget, options.chunk_size,
               io->is_io_uring() ? "io_uring" : "pread (no io_uring)");
  return std::unique_ptr<Cache>(
      new CacheImpl(options, std::move(io), std::move(ram), std::move(ssd)));
}

Result<std::unique_ptr<Cache>> Cache::Open(const CacheOptions& options) {
  return OpenCacheWithIoEngine(options, NewIoEngine(options.use_io_uring));
}

namespace {
// A family's samples share one help text (daemon/metrics.h): the RAM tier's and the
// SSD tier's samples of these name them from here.
constexpr const char* kTierBytesHelp = "Bytes held by a cache tier.";
constexpr const char* kTierEntriesHelp = "Entries held by a cache tier.";
constexpr const char* kEvictionsHelp = "Entries evicted from a cache tier.";
constexpr const char* kHitsHelp = "Chunk reads served from a cache tier.";
constexpr const char* kHitBytesHelp = "Bytes served from a cache tier.";
}  // namespace

void SsdStats::VisitCounters(const CounterVisitor& visit) const {
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kGauge = CounterKind::kGauge;
  constexpr auto kFlag = CounterKind::kFlag;
  constexpr auto kBytes = Unit::kBytes;
  const std::string tier = "tier=\"ssd\"";
  visit(
      CounterInfo{"ssd_bytes", kTierBytesHelp, kGauge, "epochfs_tier_bytes", tier}.Show(
          {.row = "SSD tier", .label = "", .unit = kBytes, .of = "ssd_budget_bytes", .top = true}),
      bytes);
  visit(CounterInfo{"ssd_entries", kTierEntriesHelp, kGauge, "epochfs_tier_entries", tier}.Show(
            {.row = "SSD tier", .label = "entries", .top = true}),
        entries);
  visit(CounterInfo{"packs", "Pack files in the SSD tier.", kGauge, "epochfs_packs"}.Show(
            {.row = "SSD tier", .label = "packs", .top = true}),
        packs);
  visit(
      CounterInfo{"ssd_evictions", kEvictionsHelp, kCounter, "epochfs_evictions_total", tier}.Show(
          {.row = "SSD tier", .label = "evicted"}),
      evictions);
  visit(CounterInfo{"packs_reclaimed", "Pack files reclaimed.", kCounter,
                    "epochfs_packs_reclaimed_total"}
            .Show({.row = "SSD tier", .label = "packs reclaimed"}),
        packs_reclaimed);
  visit(CounterInfo{"compressed_entries", "SSD entries stored lz4-compressed.", kGauge,
                    "epochfs_compressed_entries"}
            .Show({.row = "SSD tier", .label = "compressed"}),
        compressed_entries);
  visit(CounterInfo{"ssd_degraded",
                    "1 when the SSD tier is off (cache disk full or failing) and reads go to "
                    "the source.",
                    kFlag, "epochfs_ssd_degraded"}
            .Show({.row = "SSD tier", .label = "DEGRADED", .quiet = true, .top = true}),
        degraded);
  visit(CounterInfo{"ssd_degraded_reason", "Why the SSD tier is off; empty while it works.",
                    CounterKind::kText}
            .Show({.row = "SSD tier", .label = "", .quiet = true, .top = true}),
        degraded_reason);
  visit(CounterInfo{"ssd_writes", "Entries written to the SSD tier.", kCounter,
                    "epochfs_ssd_writes_total"}
            .Show({.row = "SSD writes", .label = ""}),
        writes);
  visit(CounterInfo{"ssd_write_bytes", "Bytes written to the SSD tier.", kCounter,
                    "epochfs_ssd_write_bytes_total"}
            .Show({.row = "SSD writes", .label = "", .unit = kBytes}),
        write_bytes);
  visit(CounterInfo{"ssd_writes_dropped",
                    "SSD tier writes dropped (queue full, disk full or failing).", kCounter,
                    "epochfs_ssd_writes_dropped_total"}
            .Show({.row = "SSD writes", .label = "dropped"}),
        writes_dropped);
  visit(CounterInfo{"ssd_read_around", "SSD entries moved to RAM next to one that was read.",
                    kCounter}
            .Show({.row = "SSD to RAM", .label = "read around"}),
        read_around_entries);
  visit(CounterInfo{"ssd_streamed", "SSD entries streamed into RAM ahead of the reader.", kCounter}
            .Show({.row = "SSD to RAM", .label = "streamed"}),
        streamed_entries);
  visit(
      CounterInfo{"ssd_stream_ios", "Reads issued to stream SSD entries into RAM.", kCounter}.Show(
          {.row = "SSD to RAM", .label = "in IOs"}),
      stream_ios);
  visit(
      CounterInfo{"ssd_stream_bytes", "Bytes read to stream SSD entries into RAM.", kCounter}.Show(
          {.row = "SSD to RAM", .label = "of", .unit = kBytes}),
      stream_bytes);
  visit(CounterInfo{"ssd_read_buffers", "Single SSD reads (an entry, a read-around window).",
                    kCounter}
            .Show({.row = "SSD to RAM", .label = "single reads", .quiet = true}),
        read_buffers);
  visit(CounterInfo{"ssd_read_buffers_reused",
                    "Single SSD reads into a buffer the daemon had used before (no page faults).",
                    kCounter}
            .Show({.row = "SSD to RAM", .label = "into reused buffers", .quiet = true}),
        read_buffers_reused);
  visit(CounterInfo{"corrupt_entries",
                    "Cached entries that failed their checksum (the source was served instead).",
                    kCounter, "epochfs_corrupt_entries_total"}
            .Show({.row = "entries", .label = "corrupt", .top = true}),
        corrupt_entries);
  visit(CounterInfo{"index_dangling_records",
                    "Index records without pack bytes, dropped at start-up.", kGauge}
            .Show({.row = "SSD index", .label = "dangling records dropped"}),
        dangling_records);
  visit(
      CounterInfo{"index_rebuilt", "Whether the index was damaged and rebuilt at start-up.", kFlag}
          .Show({.row = "SSD index", .label = "rebuilt"}),
      index_rebuilt);
}

void CacheStats::VisitCounters(const CounterVisitor& visit) const {
  constexpr auto kCounter = CounterKind::kCounter;
  constexpr auto kGauge = CounterKind::kGauge;
  constexpr auto kBytes = Unit::kBytes;
  const std::string ram = "tier=\"ram\"", ssd_tier = "tier=\"ssd\"";
  // Chunk reads: each is a RAM hit, an SSD hit or a miss, so the three are parts.
  visit(CounterInfo{"ram_hits", kHitsHelp, kCounter, "epochfs_cache_hits_total", ram}.Show(
            {.row = "chunk reads", .label = "RAM hits", .part = true, .top = true}),
        ram_hits);
  visit(CounterInfo{"ssd_hits", kHitsHelp, kCounter, "epochfs_cache_hits_total", ssd_tier}.Show(
            {.row = "chunk reads", .label = "SSD hits", .part = true, .top = true}),
        ssd_hits);
  visit(CounterInfo{"misses", "Chunk reads no tier could serve.", kCounter, "epochfs_misses_total"}
            .Show({.row = "chunk reads", .label = "misses", .part = true, .top = true}),
        misses);
  visit(CounterInfo{"ram_hit_bytes", kHitBytesHelp, kCounter, "epochfs_cache_hit_bytes_total", ram}
            .Show({.row = "chunk bytes",
                   .label = "RAM hits",
                   .unit = kBytes,
                   .part = true,
                   .top = true}),
        ram_hit_bytes);
  visit(CounterInfo{"ssd_hit_bytes", kHitBytesHelp, kCounter, "epochfs_cache_hit_bytes_total",
                    ssd_tier}
            .Show({.row = "chunk bytes",
                   .label = "SSD hits",
                   .unit = kBytes,
                   .part = true,
                   .top = true}),
        ssd_hit_bytes);
  visit(
      CounterInfo{"miss_bytes", "Bytes of chunk reads no tier could serve.", kCounter,
                  "epochfs_miss_bytes_total"}
          .Show(
              {.row = "chunk bytes", .label = "misses", .unit = kBytes, .part = true, .top = true}),
      miss_bytes);
  visit(CounterInfo{"source_reads", "Reads issued to the source filesystem.", kCounter,
                    "epochfs_source_reads_total"}
            .Show({.row = "source reads", .label = "", .top = true}),
        source_reads);
  visit(CounterInfo{"source_bytes", "Bytes read from the source filesystem.", kCounter,
                    "epochfs_source_bytes_total"}
            .Show({.row = "source reads", .label = "", .unit = kBytes, .top = true}),
        source_bytes);
  visit(
      CounterInfo{"ram_bytes", kTierBytesHelp, kGauge, "epochfs_tier_bytes", ram}.Show(
          {.row = "RAM tier", .label = "", .unit = kBytes, .of = "ram_budget_bytes", .top = true}),
      ram_bytes);
  visit(CounterInfo{"ram_entries", kTierEntriesHelp, kGauge, "epochfs_tier_entries", ram}.Show(
            {.row = "RAM tier", .label = "entries", .top = true}),
        ram_entries);
  visit(CounterInfo{"ram_evictions", kEvictionsHelp, kCounter, "epochfs_evictions_total", ram}.Show(
            {.row = "RAM tier", .label = "evicted"}),
        ram_evictions);
  visit(CounterInfo{"kernel_page_bytes",
                    "Of the RAM tier's bytes: those pushed into the kernel's page cache "
                    "(charged as whole pages).",
                    kGauge}
            .Show({.row = "page cache pushes", .label = "", .unit = kBytes,
                   .of = "ram_budget_bytes", .top = true}),
        kernel_bytes);
  visit(CounterInfo{"kernel_page_entries", "Chunks held in the kernel's page cache for the RAM tier.",
                    kGauge}
            .Show({.row = "page cache pushes", .label = "chunks"}),
        kernel_entries);
  visit(CounterInfo{"kernel_page_drops",
                    "Pushed chunks the RAM tier let go of (their pages dropped under a memory limit, "
                    "else left to the kernel's LRU).",
                    kCounter}
            .Show({.row = "page cache pushes", .label = "dropped"}),
        kernel_drops);
  ssd.VisitCounters(visit);
  visit(CounterInfo{"stale_entries", "Cached entries dropped because the source file changed.",
                    kCounter, "epochfs_stale_entries_total"}
            .Show({.row = "entries", .label = "stale", .top = true}),
        stale_entries);
  visit(CounterInfo{"not_admitted", "Reads not admitted to the cache.", kCounter,
                    "epochfs_not_admitted_total"}
            .Show({.row = "entries", .label = "not admitted"}),
        not_admitted);
  visit(CounterInfo{"prefetch_from_ssd", "Chunks readahead brought into RAM from the SSD tier.",
                    kCounter}
            .Show({.row = "readahead chunks", .label = "from SSD"}),
        prefetch_from_ssd);
  visit(
      CounterInfo{"prefetch_from_source", "Chunks readahead brought into RAM from the source.", kCounter}.Show(
          {.row = "readahead chunks", .label = "from source"}),
      prefetch_from_source);
  visit(CounterInfo{"prefetch_already_cached", "Chunks readahead found already in RAM.", kCounter}
            .Show({.row = "readahead chunks", .label = "already in RAM"}),
        prefetch_already_cached);
  visit(CounterInfo{"prefetch_bytes", "Bytes readahead read from the SSD tier or the source.",
                    kCounter}
            .Show({.row = "readahead chunks", .label = "read", .unit = kBytes}),
        prefetch_bytes);
  visit(CounterInfo{"io_uring", "1 when reads use io_uring, 0 for the pread fallback.",
                    CounterKind::kFlag, "epochfs_io_uring"}
            .Show({.row = "daemon", .label = "io_uring"}),
        io_uring);
}

}  // namespace epochfs::cache
