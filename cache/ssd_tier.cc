#include "cache/ssd_tier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <malloc.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <system_error>

#include "base/owned_dirs.h"
#include "base/thread_name.h"
#include "cache/codec.h"

namespace epochfs::cache {
namespace {

using Clock = std::chrono::steady_clock;

// How often (in bytes written) the writer re-checks the cache filesystem's free space.
constexpr uint64_t kSpaceCheckEveryBytes = 16ull << 20;
// Corruption is logged per entry, up to this many lines; the counter keeps counting.
constexpr uint64_t kMaxCorruptionWarnings = 100;
// Index records are written in batches of this many during a rebuild.
constexpr size_t kRebuildBatch = 1024;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

uint64_t EntryLen(const IndexRecord& r) { return kEntryHeaderSize + r.stored_len; }

// pack_size capped to an eighth of the budget, so that reclaiming works in units
// much smaller than the budget and the compaction reserve stays small.
uint64_t EffectivePackSize(const SsdTierOptions& o) {
  uint64_t cap = std::max<uint64_t>(o.disk_budget / 8, kPackHeaderSize + kEntryHeaderSize);
  return std::min(o.pack_size, cap);
}

IndexRecord RecordFor(uint32_t pack_id, uint64_t offset, const EntryHeader& h) {
  return IndexRecord{.pack_id = pack_id,
                     .offset = offset,
                     .stored_len = h.stored_len,
                     .plain_len = h.plain_len,
                     .codec = h.codec,
                     .checksum = h.checksum,
                     .size = h.size,
                     .mtime_ns = h.mtime_ns,
                     .ctime_ns = h.ctime_ns};
}

}  // namespace

SsdTier::SsdTier(const SsdTierOptions& options, IoEngine& io, RamTier* ram)
    : options_(options),
      pack_size_(EffectivePackSize(options)),
      reserve_(EffectivePackSize(options) / 2 + 4096),
      packs_dir_(options.dir / "packs"),
      io_(io),
      ram_(ram),
      read_buffers_(options.read_buffer_bytes) {}

Result<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options, IoEngine& io,
                                               RamTier* ram) {
  if (options.disk_budget == 0) return Status::InvalidArgument("SSD tier with a zero budget");
  std::unique_ptr<SsdTier> tier(new SsdTier(options, io, ram));
  EPOCHFS_RETURN_IF_ERROR(tier->Recover());
  tier->writer_ = std::thread([t = tier.get()] { t->WriterLoop(); });
  return tier;
}

SsdTier::~SsdTier() {
  {
    MutexLock lock(queue_mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  MutexLock lock(stream_mu_);
  for (const auto& [len, buffer] : run_buffers_) ::munmap(buffer, len);
}

// ---------------------------------------------------------------------------------
// Start-up

Status SsdTier::Recover() {
  // The packs hold the bytes of files whatever their permissions: the daemon's user alone
  // may read them (so does the cache dir above).
  EPOCHFS_RETURN_IF_ERROR(MakeOwnedDir(packs_dir_, 0700));
  std::error_code ec;
  std::map<uint32_t, uint64_t> pack_sizes;
  for (const auto& entry : std::filesystem::directory_iterator(packs_dir_, ec)) {
    std::optional<uint32_t> id = ParsePackFileName(entry.path().filename().string());
    if (!id) continue;
    std::error_code size_ec;
    uint64_t size = entry.file_size(size_ec);
    if (!size_ec) pack_sizes[*id] = size;
  }
  if (ec) return Status::FromErrno(ec.value(), "list " + packs_dir_.string());

  bool rebuild = false;
  Status loaded = LoadIndex(pack_sizes, &rebuild);
  if (loaded.code() == Code::kCorruption) {
    // RocksDB opened, but a table is damaged (a bad block found by the full scan). The
    // index is only a cache of what the packs say: set it aside and rebuild it.
    spdlog::warn("cache index {} is damaged ({}); rebuilding it from the packs",
                 (options_.dir / "index").string(), loaded.ToString());
    index_.reset();
    {
      MutexLock lock(meta_mu_);
      packs_.clear();
      pack_bytes_ = 0;
      live_entries_ = 0;
    }
    EPOCHFS_RETURN_IF_ERROR(Index::Discard(options_.dir / "index"));
    index_rebuilt_after_corruption_ = true;
    loaded = LoadIndex(pack_sizes, &rebuild);
  }
  EPOCHFS_RETURN_IF_ERROR(loaded);
  // The writer has not started yet, so nothing contends for meta_mu_; it is held for
  // the accounting below because that state is GUARDED_BY it.
  MutexLock lock(meta_mu_);
  if (rebuild) {
    // Every valid entry of every pack was just indexed: a pack without records
    // holds nothing that can ever be served.
    for (auto it = packs_.begin(); it != packs_.end();) {
      if (it->second.live_entries == 0 &&
          ::unlink((packs_dir_ / PackFileName(it->first)).c_str()) == 0) {
        spdlog::info("cache: removed pack {} (no live entries after rebuild)", it->first);
        pack_bytes_ -= it->second.file_bytes;
        it = packs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  next_pack_id_ = packs_.empty() ? 1 : packs_.rbegin()->first + 1;
  EPOCHFS_RETURN_IF_ERROR(EvictOldestPacksOverBudget());
  spdlog::info("cache SSD tier {}: {} packs, {} bytes, {} entries (budget {})",
               options_.dir.string(), packs_.size(), pack_bytes_, live_entries_,
               options_.disk_budget);
  return Status::Ok();
}

Status SsdTier::LoadIndex(const std::map<uint32_t, uint64_t>& pack_sizes, bool* rebuild) {
  Result<std::unique_ptr<Index>> index = Index::Open(options_.dir / "index");
  if (!index.ok()) return index.status();
  index_ = std::move(index).value();

  *rebuild = !index_->initialised() && !pack_sizes.empty();
  if (*rebuild) EPOCHFS_RETURN_IF_ERROR(RebuildIndex(pack_sizes));
  if (!index_->initialised()) EPOCHFS_RETURN_IF_ERROR(index_->MarkInitialised());

  MutexLock lock(meta_mu_);
  for (const auto& [id, size] : pack_sizes) {
    PackInfo& info = packs_[id];
    info.file_bytes = size;
    info.sealed = true;
    pack_bytes_ += size;
  }
  // Live bytes per pack come from the index. Records pointing at packs (or past the
  // end of packs) that are gone are dropped: their bytes can never be served.
  IndexBatch dangling;
  EPOCHFS_RETURN_IF_ERROR(index_->ForEach(
      [&](const ChunkKey& key, const IndexRecord& record) {
        meta_mu_.AssertHeld();  // ForEach calls back synchronously, under our lock
        auto it = packs_.find(record.pack_id);
        if (it == packs_.end() || record.offset + EntryLen(record) > it->second.file_bytes) {
          dangling.Delete(key);
        } else {
          AddLiveLocked(record, +1);
        }
        return true;
      },
      [&](const ChunkKey& key) { dangling.Delete(key); }));
  if (!dangling.empty()) {
    spdlog::warn("cache index: dropping {} records that point at missing pack bytes",
                 dangling.ops.size());
    dangling_records_ += dangling.ops.size();
    EPOCHFS_RETURN_IF_ERROR(index_->Write(dangling));
  }
  return Status::Ok();
}

Status SsdTier::RebuildIndex(const std::map<uint32_t, uint64_t>& pack_sizes) {
  spdlog::info("cache: rebuilding the index of {} from {} packs", options_.dir.string(),
               pack_sizes.size());
  uint64_t entries = 0, corrupt = 0;
  // Ascending pack ids and offsets: a later entry of the same key overwrites an
  // earlier one, so the latest write wins.
  for (const auto& [id, size] : pack_sizes) {
    Result<std::unique_ptr<PackScanner>> scanner =
        PackScanner::Open(io_, packs_dir_ / PackFileName(id), id);
    if (!scanner.ok()) {
      spdlog::warn("cache rebuild: skipping pack {}: {}", id, scanner.status().ToString());
      continue;
    }
    IndexBatch batch;
    for (;;) {
      Result<std::optional<PackScanner::Entry>> next = (*scanner)->Next();
      if (!next.ok()) {
        spdlog::warn("cache rebuild: pack {}: {}", id, next.status().ToString());
        break;
      }
      if (!*next) break;
      const PackScanner::Entry& e = **next;
      batch.Put(e.header.key, RecordFor(id, e.offset, e.header));
      ++entries;
      if (batch.ops.size() >= kRebuildBatch) {
        EPOCHFS_RETURN_IF_ERROR(index_->Write(batch));
        batch.ops.clear();
      }
    }
    if (!batch.empty()) EPOCHFS_RETURN_IF_ERROR(index_->Write(batch));
    corrupt += (*scanner)->corrupt_entries();
    if ((*scanner)->stop_reason() != "end of pack") {
      spdlog::info("cache rebuild: pack {}: {}", id, (*scanner)->stop_reason());
    }
  }
  corrupt_ += corrupt;
  spdlog::info("cache: rebuilt index with {} entries ({} corrupt entries skipped)", entries,
               corrupt);
  return Status::Ok();
}

// Called from Recover only.
Status SsdTier::EvictOldestPacksOverBudget() {
  const uint64_t limit = options_.disk_budget > reserve_ ? options_.disk_budget - reserve_ : 0;
  if (pack_bytes_ <= options_.disk_budget) return Status::Ok();
  std::set<uint32_t> evict;
  uint64_t bytes = pack_bytes_;
  for (const auto& [id, info] : packs_) {
    if (bytes <= limit) break;
    evict.insert(id);
    bytes -= info.file_bytes;
  }
  IndexBatch batch;
  EPOCHFS_RETURN_IF_ERROR(index_->ForEach([&](const ChunkKey& key, const IndexRecord& record) {
    if (evict.count(record.pack_id) != 0) batch.Delete(key);
    return true;
  }));
  EPOCHFS_RETURN_IF_ERROR(index_->Write(batch));
  EPOCHFS_RETURN_IF_ERROR(index_->SyncWal());
  for (uint32_t id : evict) {
    PackInfo& info = packs_[id];
    evictions_ += info.live_entries;
    live_entries_ -= info.live_entries;
    pack_bytes_ -= info.file_bytes;
    if (::unlink((packs_dir_ / PackFileName(id)).c_str()) != 0) {
      spdlog::warn("cache: cannot remove pack {}: {}", id, std::strerror(errno));
    }
    packs_.erase(id);
  }
  spdlog::info("cache: packs exceeded the disk budget; evicted the {} oldest", evict.size());
  return Status::Ok();
}

// ---------------------------------------------------------------------------------
// Read path

void SsdTier::AddLiveLocked(const IndexRecord& record, int64_t sign) {
  auto it = packs_.find(record.pack_id);
  if (it == packs_.end()) return;  // its pack is gone; it was accounted then
  it->second.live_bytes += static_cast<uint64_t>(sign) * EntryLen(record);
  it->second.live_entries += static_cast<uint64_t>(sign);
  live_entries_ += static_cast<uint64_t>(sign);
}

Result<std::shared_ptr<PackReader>> SsdTier::ReaderFor(uint32_t pack_id) {
  MutexLock lock(meta_mu_);
  auto it = packs_.find(pack_id);
  if (it == packs_.end()) return Status::NotFound(fmt::format("pack {} is gone", pack_id));
  if (it->second.reader) return it->second.reader;
  Result<std::shared_ptr<PackReader>> reader =
      PackReader::Open(io_, packs_dir_ / PackFileName(pack_id), pack_id, read_buffers_);
  if (reader.ok()) it->second.reader = *reader;
  return reader;
}

std::optional<uint64_t> SsdTier::Position(const ChunkKey& key) const {
  Result<std::optional<IndexRecord>> record = index_->Get(key);
  if (!record.ok() || !*record) return std::nullopt;
  return (uint64_t{(*record)->pack_id} << 40) + (*record)->offset;
}

std::optional<IndexRecord> SsdTier::CurrentRecord(const ChunkKey& key, const SourceIdentity& id) {
  Result<std::optional<IndexRecord>> record = index_->Get(key);
  if (!record.ok()) {
    if (record.status().code() == Code::kCorruption) {
      ++corrupt_;
      index_->Delete(key).IgnoreError();  // undecodable; a later fill rewrites it
    } else {
      ++read_errors_;
    }
    return std::nullopt;
  }
  if (!*record) return std::nullopt;
  if ((*record)->identity(key) != id) {
    DropRecord(key, **record, DropReason::kStale);
    return std::nullopt;
  }
  return **record;
}

void SsdTier::PackUnreadable(const ChunkKey& key, const IndexRecord& rec, const Status& why) {
  if (corrupt_logged_.fetch_add(1) < kMaxCorruptionWarnings) {
    spdlog::warn("cache: cannot read pack {} for ino {} chunk {}: {}", rec.pack_id, key.ino,
                 key.chunk, why.ToString());
  }
  switch (why.code()) {
    case Code::kNotFound:
      DropRecord(key, rec, DropReason::kMissingPack);
      break;
    case Code::kCorruption:
      DropRecord(key, rec, DropReason::kCorrupt);
      break;
    default:
      ++read_errors_;
      break;
  }
}

void SsdTier::EntryCorrupt(const ChunkKey& key, const IndexRecord& rec, const Status& why) {
  if (why.code() != Code::kCorruption) {
    ++read_errors_;  // a failed read is a miss; the record may be fine
    return;
  }
  if (corrupt_logged_.fetch_add(1) < kMaxCorruptionWarnings) {
    spdlog::warn("cache: dropping corrupt entry (ino {} chunk {}): {}", key.ino, key.chunk,
                 why.message());
  }
  DropRecord(key, rec, DropReason::kCorrupt);
}

std::optional<ChunkBytes> SsdTier::Lookup(const ChunkKey& key, const SourceIdentity& id) {
  {
    MutexLock lock(queue_mu_);
    auto it = pending_.find(key);
    if (it != pending_.end() && it->second.id == id) return it->second.bytes;
  }
  std::optional<IndexRecord> record = CurrentRecord(key, id);
  if (!record) return std::nullopt;
  const IndexRecord& rec = *record;
  Result<std::shared_ptr<PackReader>> reader = ReaderFor(rec.pack_id);
  if (!reader.ok()) {
    PackUnreadable(key, rec, reader.status());
    return std::nullopt;
  }
  // Read-around only pays while the RAM tier has room for the neighbours it brings.
  const bool read_around = ram_ != nullptr && options_.read_around_window > 0 &&
                           EntryLen(rec) <= options_.read_around_window / 2 &&
                           ram_->HasRoomFor(options_.read_around_window);
  Result<ChunkBytes> bytes = read_around ? ReadWithNeighbours(**reader, key, rec)
                                         : (*reader)->ReadEntry(rec.offset, rec.stored_len, key);
  if (!bytes.ok()) {
    EntryCorrupt(key, rec, bytes.status());
    return std::nullopt;
  }
  return std::move(bytes).value();
}

// A buffer for one run's O_DIRECT read, mapped straight from the kernel (page-aligned;
// multi-MiB buffers from malloc would raise its mmap threshold and leave the daemon's
// RSS holding freed memory in its arenas). A run takes the smallest buffer of the tier's
// pool that holds it; a new one is the run's size rounded up to a power of two (at least
// 256 KiB). Fresh pages cost the daemon more than the read itself (each is allocated,
// zeroed and pinned for the IO), so given back, a buffer stays in the pool, which lets
// go of its smallest buffers first once it holds more than stream_buffer_bytes.
class SsdTier::RunBuffer {
 public:
  RunBuffer(SsdTier& tier, size_t len) : tier_(tier) {
    const size_t need = std::max<size_t>(len, kMinLen);
    {
      MutexLock lock(tier_.stream_mu_);
      auto it = tier_.run_buffers_.lower_bound(need);
      if (it != tier_.run_buffers_.end()) {
        len_ = it->first;
        data_ = it->second;
        tier_.run_buffers_.erase(it);
        tier_.run_buffers_bytes_ -= len_;
        return;
      }
    }
    len_ = std::bit_ceil(need);
    void* p = ::mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~RunBuffer() {
    if (data_ == nullptr) return;
    std::vector<std::pair<size_t, char*>> unmap;
    {
      MutexLock lock(tier_.stream_mu_);
      tier_.run_buffers_.emplace(len_, data_);
      tier_.run_buffers_bytes_ += len_;
      while (tier_.run_buffers_bytes_ > tier_.options_.stream_buffer_bytes) {
        auto smallest = tier_.run_buffers_.begin();
        unmap.emplace_back(*smallest);
        tier_.run_buffers_bytes_ -= smallest->first;
        tier_.run_buffers_.erase(smallest);
      }
    }
    for (const auto& [len, buffer] : unmap) ::munmap(buffer, len);
  }
  RunBuffer(const RunBuffer&) = delete;
  RunBuffer& operator=(const RunBuffer&) = delete;
  char* get() const { return data_; }

 private:
  static constexpr size_t kMinLen = 256u << 10;
  SsdTier& tier_;
  size_t len_ = 0;
  char* data_ = nullptr;
};

// Holds `bytes` of the tier's stream buffer budget for a scope (waiting for them).
class SsdTier::StreamBuffers {
 public:
  StreamBuffers(SsdTier& tier, uint64_t bytes) : tier_(tier), bytes_(bytes) {
    MutexLock lock(tier_.stream_mu_);
    while (tier_.stream_buffers_ != 0 &&
           tier_.stream_buffers_ + bytes_ > tier_.options_.stream_buffer_bytes) {
      lock.Wait(tier_.stream_cv_);
    }
    tier_.stream_buffers_ += bytes_;
  }
  ~StreamBuffers() {
    {
      MutexLock lock(tier_.stream_mu_);
      tier_.stream_buffers_ -= bytes_;
    }
    tier_.stream_cv_.notify_all();
  }
  StreamBuffers(const StreamBuffers&) = delete;
  StreamBuffers& operator=(const StreamBuffers&) = delete;

 private:
  SsdTier& tier_;
  const uint64_t bytes_;
};

std::vector<bool> SsdTier::Stream(std::span<const StreamItem> items, const Taker& take) {
  std::vector<bool> brought(items.size(), false);
  if (ram_ == nullptr) return brought;
  struct Want {
    size_t item;
    IndexRecord rec;
  };
  std::vector<Want> wants;
  wants.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const StreamItem& item = items[i];
    std::optional<ChunkBytes> pending;
    {
      MutexLock lock(queue_mu_);
      auto it = pending_.find(item.key);
      if (it != pending_.end() && it->second.id == item.id) pending = it->second.bytes;
    }
    if (pending) {
      brought[i] = ram_->Insert(item.key, item.id, std::move(*pending));
      continue;
    }
    if (std::optional<IndexRecord> rec = CurrentRecord(item.key, item.id)) {
      wants.push_back(Want{i, *rec});
    }
  }
  std::sort(wants.begin(), wants.end(), [](const Want& a, const Want& b) {
    return std::tie(a.rec.pack_id, a.rec.offset) < std::tie(b.rec.pack_id, b.rec.offset);
  });

  // Runs of entries of one pack, each read in one aligned IO.
  struct Run {
    uint32_t pack_id;
    uint64_t start, end;  // aligned
    size_t first, last;   // wants[first, last)
    std::shared_ptr<PackReader> reader;
    std::unique_ptr<RunBuffer> buffer;
  };
  std::vector<Run> runs;
  for (size_t w = 0; w < wants.size(); ++w) {
    const IndexRecord& rec = wants[w].rec;
    const uint64_t entry_end = rec.offset + EntryLen(rec);
    const uint64_t aligned_end =
        (entry_end + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
    if (!runs.empty()) {
      Run& run = runs.back();
      if (run.pack_id == rec.pack_id && rec.offset <= run.end + options_.stream_gap &&
          aligned_end - run.start <= options_.stream_io_bytes) {
        run.end = std::max(run.end, aligned_end);
        run.last = w + 1;
        continue;
      }
    }
    runs.push_back(Run{rec.pack_id, rec.offset / kDirectIoAlignment * kDirectIoAlignment,
                       aligned_end, w, w + 1, nullptr, nullptr});
  }

  for (size_t group = 0, group_end = 0; group < runs.size(); group = group_end) {
    // Up to stream_depth runs in flight, within this caller's share of the buffers.
    const uint64_t share = std::max<uint64_t>(options_.stream_buffer_bytes / 2, options_.stream_io_bytes);
    uint64_t group_bytes = 0;
    for (group_end = group; group_end < runs.size() && group_end - group < options_.stream_depth;
         ++group_end) {
      const uint64_t len = runs[group_end].end - runs[group_end].start;
      if (group_end > group && group_bytes + len > share) break;
      group_bytes += len;
    }
    StreamBuffers buffers(*this, group_bytes);
    std::vector<ReadOp> ops;
    std::vector<Run*> op_runs;
    for (size_t r = group; r < group_end; ++r) {
      Run& run = runs[r];
      Result<std::shared_ptr<PackReader>> reader = ReaderFor(run.pack_id);
      if (!reader.ok()) {
        for (size_t w = run.first; w < run.last; ++w) {
          PackUnreadable(items[wants[w].item].key, wants[w].rec, reader.status());
        }
        continue;
      }
      run.reader = *reader;
      run.buffer = std::make_unique<RunBuffer>(*this, run.end - run.start);
      if (run.buffer->get() == nullptr) continue;  // out of memory: leave these to demand reads
      const int fd = run.reader->direct_fd() >= 0 ? run.reader->direct_fd() : run.reader->fd();
      ReadOp op;
      op.fd = fd;
      op.buf = run.buffer->get();
      op.len = run.end - run.start;
      op.offset = run.start;
      ops.push_back(op);
      op_runs.push_back(&run);
    }
    io_.ReadBatch(ops).IgnoreError();  // each op carries its own status
    for (size_t k = 0; k < ops.size(); ++k) {
      Run& run = *op_runs[k];
      const ReadOp& op = ops[k];
      if (run.reader->direct_fd() < 0) run.reader->DropCachedRange(run.start, op.len);
      if (!op.status.ok()) {
        for (size_t w = run.first; w < run.last; ++w) ++read_errors_;
        continue;
      }
      ++stream_ios_;
      stream_bytes_ += op.bytes_read;
      const std::span<const char> bytes(run.buffer->get(), op.bytes_read);
      for (size_t w = run.first; w < run.last; ++w) {
        const StreamItem& item = items[wants[w].item];
        const IndexRecord& rec = wants[w].rec;
        Result<ChunkBytes> plain =
            DecodeStreamed(bytes, run.start, item.key, rec, /*borrow=*/true);
        if (!plain.ok()) {
          EntryCorrupt(item.key, rec, plain.status());
          continue;
        }
        if ((take && take(item, plain->span())) ||
            ram_->Insert(item.key, item.id, std::move(plain).value().Owned())) {
          brought[wants[w].item] = true;
          ++streamed_;
        }
      }
      run.buffer.reset();  // release each run's memory as soon as it is decoded
    }
  }
  return brought;
}

Result<ChunkBytes> SsdTier::DecodeStreamed(std::span<const char> bytes, uint64_t bytes_offset,
                                           const ChunkKey& key, const IndexRecord& rec,
                                           bool borrow) const {
  const uint64_t at = rec.offset - bytes_offset;
  if (bytes.size() < at + EntryLen(rec)) {
    return Status::Corruption(
        fmt::format("pack {} offset {}: short read", rec.pack_id, rec.offset));
  }
  Result<EntryHeader> header = DecodeEntryHeader(bytes.subspan(at));
  if (!header.ok() || header->key != key || header->stored_len != rec.stored_len) {
    return Status::Corruption(
        fmt::format("pack {} offset {}: {}", rec.pack_id, rec.offset,
                    header.ok() ? "entry is not the indexed one" : header.status().message()));
  }
  Result<ChunkBytes> plain =
      DecodeEntryData(*header, bytes.subspan(at + kEntryHeaderSize, rec.stored_len), borrow);
  if (!plain.ok()) {
    return Status::Corruption(
        fmt::format("pack {} offset {}: {}", rec.pack_id, rec.offset, plain.status().message()));
  }
  return plain;
}

Result<ChunkBytes> SsdTier::ReadWithNeighbours(const PackReader& reader, const ChunkKey& key,
                                               const IndexRecord& rec) {
  const uint64_t window = options_.read_around_window;
  const uint64_t start = rec.offset / window * window;
  const uint64_t end = (rec.offset + EntryLen(rec) + window - 1) / window * window;
  Result<ChunkBytes> buf = reader.ReadRange(start, end - start);
  if (!buf.ok()) return buf.status();
  const std::span<const char> bytes = buf->span();
  // Copied out (not shared): the target must not pin the whole window in RAM.
  Result<ChunkBytes> target = DecodeStreamed(bytes, start, key, rec);
  if (!target.ok()) return target.status();
  for (const FoundEntry& e : FindEntries(bytes, start)) {
    if (e.offset == rec.offset || e.header.key == key) continue;
    if (!ram_->HasRoomFor(e.header.plain_len)) break;
    if (ram_->Contains(e.header.key)) continue;
    // Only what the index still points at: not superseded, invalidated or moved bytes.
    Result<std::optional<IndexRecord>> current = index_->Get(e.header.key);
    if (!current.ok() || !*current || (*current)->pack_id != rec.pack_id ||
        (*current)->offset != e.offset) {
      continue;
    }
    // Copied out too, for the same reason.
    Result<ChunkBytes> plain =
        DecodeEntryData(e.header, bytes.subspan(e.offset - start + kEntryHeaderSize));
    if (!plain.ok()) continue;  // its own read will find and count the damage
    if (ram_->InsertIfRoom(e.header.key, e.header.identity(), std::move(plain).value())) {
      ++read_around_;
    }
  }
  return target;
}

void SsdTier::DropRecord(const ChunkKey& key, const IndexRecord& record, DropReason reason) {
  bool dropped = false;
  {
    MutexLock lock(meta_mu_);
    // Only the record we looked at: a writer may have replaced it meanwhile.
    Result<std::optional<IndexRecord>> current = index_->Get(key);
    if (current.ok() && *current && (*current)->SameLocation(record) && index_->Delete(key).ok()) {
      AddLiveLocked(record, -1);
      full_ = false;  // dead bytes may now be worth compacting
      dropped = true;
    }
  }
  if (!dropped) return;  // someone else dropped (and counted) it
  switch (reason) {
    case DropReason::kStale:
      ++stale_;
      break;
    case DropReason::kCorrupt:
      ++corrupt_;
      break;
    case DropReason::kMissingPack:
      ++read_errors_;
      break;
  }
}

void SsdTier::Invalidate(uint64_t dev, uint64_t ino) {
  {
    MutexLock lock(queue_mu_);
    std::erase_if(pending_, [&](const auto& entry) {
      queue_mu_.AssertHeld();  // erase_if calls back synchronously, under our lock
      if (entry.first.dev != dev || entry.first.ino != ino) return false;
      pending_bytes_ -= QueuedBytes(entry.second.bytes);
      return true;
    });
  }
  space_cv_.notify_all();
  MutexLock lock(meta_mu_);
  Result<std::vector<std::pair<ChunkKey, IndexRecord>>> deleted = index_->DeleteFile(dev, ino);
  if (!deleted.ok()) {
    spdlog::warn("cache: invalidating ino {}: {}", ino, deleted.status().ToString());
    return;
  }
  for (const auto& [key, record] : *deleted) AddLiveLocked(record, -1);
  if (!deleted->empty()) full_ = false;
}

// ---------------------------------------------------------------------------------
// Write path: callers

bool SsdTier::Enqueue(const ChunkKey& key, const SourceIdentity& id, ChunkBytes bytes) {
  if (DegradedNow() || full_) {
    ++writes_dropped_;
    return false;
  }
  {
    MutexLock lock(queue_mu_);
    const uint64_t footprint = QueuedBytes(bytes);
    // A full queue means the source is outrunning the cache disk: wait for the writer
    // (the fill then goes at the disk's pace) rather than drop what was just read and
    // read it from the source again next epoch. Only a writer stuck that long drops.
    const auto deadline = std::chrono::steady_clock::now() + options_.max_enqueue_wait;
    bool room = true;
    while (!stop_ && !DegradedNow() && pending_bytes_ + footprint > options_.max_pending_bytes) {
      if (lock.WaitUntil(space_cv_, deadline) == std::cv_status::timeout) {
        room = stop_ || DegradedNow() || pending_bytes_ + footprint <= options_.max_pending_bytes;
        break;
      }
    }
    if (stop_ || DegradedNow() || !room) {
      ++writes_dropped_;
      return false;
    }
    const uint64_t seq = next_seq_++;
    auto [it, inserted] = pending_.try_emplace(key);
    if (!inserted) pending_bytes_ -= QueuedBytes(it->second.bytes);
    it->second = Pending{id, bytes, seq};
    pending_bytes_ += footprint;
    queue_.push_back(Item{key, id, std::move(bytes), seq});
  }
  work_cv_.notify_one();
  return true;
}

Status SsdTier::Flush() {
  {
    MutexLock lock(queue_mu_);
    const uint64_t generation = ++flush_requested_;
    work_cv_.notify_one();
    while (flush_done_ < generation) lock.Wait(flushed_cv_);
  }
  if (degraded_) {
    MutexLock lock(reason_mu_);
    return degraded_status_;
  }
  return Status::Ok();
}

SsdStats SsdTier::GetStats() const {
  SsdStats s;
  {
    MutexLock lock(meta_mu_);
    s.bytes = pack_bytes_;
    s.entries = live_entries_;
    s.packs = packs_.size();
  }
  s.evictions = evictions_;
  s.writes = writes_;
  s.write_bytes = write_bytes_;
  s.writes_dropped = writes_dropped_;
  s.packs_reclaimed = packs_reclaimed_;
  s.stale_entries = stale_;
  s.corrupt_entries = corrupt_;
  s.read_errors = read_errors_;
  s.compressed_entries = compressed_;
  s.read_around_entries = read_around_;
  s.streamed_entries = streamed_;
  s.stream_ios = stream_ios_;
  s.stream_bytes = stream_bytes_;
  s.read_buffers = read_buffers_.taken();
  s.read_buffers_reused = read_buffers_.reused();
  s.dangling_records = dangling_records_;
  s.index_rebuilt = index_rebuilt_after_corruption_;
  s.degraded = degraded_;
  if (s.degraded) {
    MutexLock lock(reason_mu_);
    s.degraded_reason = degraded_status_.ToString();
  }
  return s;
}

// ---------------------------------------------------------------------------------
// Write path: the writer thread

void SsdTier::WriterLoop() {
  NameThisThread("ssd-writer");
  MutexLock lock(queue_mu_);
  for (;;) {
    if (!queue_.empty()) {
      Item item = std::move(queue_.front());
      queue_.pop_front();
      lock.Unlock();
      WriteItem(std::move(item));
      if (SyncDue()) SyncAndIndex();
      lock.Lock();
      continue;
    }
    const uint64_t flush_target = flush_requested_;
    const bool stopping = stop_;
    if (flush_target > flush_done_ || stopping || SyncDue()) {
      lock.Unlock();
      SyncAndIndex();
      if (stopping) SealActive();
      lock.Lock();
      flush_done_ = std::max(flush_done_, flush_target);
      flushed_cv_.notify_all();
      if (stopping && queue_.empty()) break;
      continue;
    }
    if (unsynced_.empty()) {
      // Idle with everything indexed: the buffers of the burst just written are free
      // but sit in malloc's arenas, counted in the daemon's RSS. Hand them back.
      lock.Unlock();
      ::malloc_trim(0);
      lock.Lock();
      if (!queue_.empty() || stop_ || flush_requested_ > flush_done_) continue;
      lock.Wait(work_cv_);
    } else {
      lock.WaitUntil(work_cv_,
                     first_unsynced_at_ + std::chrono::milliseconds(options_.sync_interval_ms));
    }
  }
  // Release Flush() callers that arrived after the last round.
  flush_done_ = flush_requested_;
  flushed_cv_.notify_all();
}

bool SsdTier::DegradedNow() const { return degraded_ && NowNs() < retry_at_ns_; }

void SsdTier::EnterDegraded(const Status& why) {
  retry_at_ns_ =
      NowNs() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.degraded_retry).count();
  {
    MutexLock lock(reason_mu_);
    degraded_status_ = why.code() == Code::kNoSpace ? Status::NoSpace(why.message())
                                                    : Status::IoError(why.message(), why.err());
  }
  degraded_ = true;
  space_cv_.notify_all();  // writers waiting for room: there will be none
  // One warning per episode: a retry that fails again stays quiet.
  if (!degraded_logged_.exchange(true)) {
    spdlog::warn("cache SSD tier degraded, no more writes (reads unaffected; retry in {} s): {}",
                 options_.degraded_retry.count() / 1000, why.ToString());
  }
}

bool SsdTier::FreeSpaceOk(std::string* reason) const {
  struct statvfs vfs;
  if (::statvfs(packs_dir_.c_str(), &vfs) != 0) {
    *reason = fmt::format("statvfs {}: {}", packs_dir_.string(), std::strerror(errno));
    return false;
  }
  const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  if (free_bytes < options_.min_free_bytes) {
    *reason = fmt::format("cache filesystem has {} bytes free, below min_free_bytes {}", free_bytes,
                          options_.min_free_bytes);
    return false;
  }
  return true;
}

void SsdTier::DropItem(const Item& item) {
  ++writes_dropped_;
  MutexLock lock(queue_mu_);
  auto it = pending_.find(item.key);
  if (it != pending_.end() && it->second.seq == item.seq) {
    pending_bytes_ -= QueuedBytes(it->second.bytes);
    pending_.erase(it);
  }
  space_cv_.notify_all();
}

void SsdTier::WriteItem(Item item) {
  if (degraded_) {
    if (DegradedNow()) {
      DropItem(item);
      return;
    }
    std::string reason;
    if (!FreeSpaceOk(&reason)) {
      EnterDegraded(Status::NoSpace(reason));
      DropItem(item);
      return;
    }
    degraded_ = false;  // try again; "writing again" is logged once a sync succeeds
  }
  if (bytes_since_space_check_ >= kSpaceCheckEveryBytes) {
    bytes_since_space_check_ = 0;
    std::string reason;
    if (!FreeSpaceOk(&reason)) {
      EnterDegraded(Status::NoSpace(reason));
      DropItem(item);
      return;
    }
  }
  Encoded encoded = Encode(item.bytes.span(), options_.min_compression_saving);
  std::span<const char> stored =
      encoded.codec == Codec::kLz4 ? std::span<const char>(encoded.lz4_bytes) : item.bytes.span();
  const uint64_t entry_len = kEntryHeaderSize + stored.size();
  if (!MakeRoom(entry_len)) {
    DropItem(item);
    return;
  }
  EntryHeader header{.codec = encoded.codec,
                     .stored_len = static_cast<uint32_t>(stored.size()),
                     .plain_len = static_cast<uint32_t>(item.bytes.size),
                     .key = item.key,
                     .size = item.id.size,
                     .mtime_ns = item.id.mtime_ns,
                     .ctime_ns = item.id.ctime_ns,
                     .checksum = Checksum(item.bytes.span())};
  Result<uint64_t> offset = AppendToActive(&header, stored);
  if (!offset.ok()) {
    DropItem(item);
    return;
  }
  if (unsynced_.empty()) first_unsynced_at_ = Clock::now();
  unsynced_.push_back(Unsynced{item.key, RecordFor(active_->id(), *offset, header), item.seq});
  unsynced_bytes_ += entry_len;
  unsynced_footprint_ += QueuedBytes(item.bytes);
  bytes_since_space_check_ += entry_len;
  ++writes_;
  write_bytes_ += entry_len;
  if (encoded.codec == Codec::kLz4) ++compressed_;
}

Result<uint64_t> SsdTier::AppendToActive(const EntryHeader* header, std::span<const char> bytes) {
  const uint64_t entry_len = header != nullptr ? kEntryHeaderSize + bytes.size() : bytes.size();
  if (!EnsureActivePack(entry_len)) return Status::NoSpace("no pack to write to");
  Result<uint64_t> offset =
      header != nullptr ? active_->Append(*header, bytes) : active_->AppendRaw(bytes);
  if (!offset.ok()) {
    EnterDegraded(offset.status());
    SealActive();  // keeps (syncs and indexes) what was written before the failure
    return offset.status();
  }
  MutexLock lock(meta_mu_);
  PackInfo& info = packs_[active_->id()];
  pack_bytes_ += active_->size() - info.file_bytes;
  info.file_bytes = active_->size();
  return offset;
}

bool SsdTier::EnsureActivePack(uint64_t entry_len) {
  if (active_ && !active_->broken() &&
      (active_->size() + entry_len <= pack_size_ || active_->size() == kPackHeaderSize)) {
    return true;
  }
  if (active_) SealActive();
  if (DegradedNow()) return false;
  std::string reason;
  if (!FreeSpaceOk(&reason)) {
    EnterDegraded(Status::NoSpace(reason));
    return false;
  }
  const uint32_t id = next_pack_id_++;
  Result<std::unique_ptr<PackWriter>> writer = PackWriter::Create(io_, packs_dir_, id);
  if (!writer.ok()) {
    EnterDegraded(writer.status());
    return false;
  }
  active_ = std::move(writer).value();
  MutexLock lock(meta_mu_);
  PackInfo& info = packs_[id];
  info.file_bytes = active_->size();
  info.sealed = false;
  pack_bytes_ += active_->size();
  return true;
}

void SsdTier::SealActive() {
  if (!active_) return;
  SyncAndIndex();
  if (!active_->broken()) {
    Status st = active_->Sync();  // compaction copies are not in unsynced_
    if (!st.ok()) EnterDegraded(st);
  }
  {
    MutexLock lock(meta_mu_);
    auto it = packs_.find(active_->id());
    if (it != packs_.end()) it->second.sealed = true;
  }
  active_.reset();
}

bool SsdTier::SyncDue() const {
  if (unsynced_.empty()) return false;
  // Half the queue waiting only for a sync: sync now, before readers block on a full
  // queue for the rest of the interval (compressible data fills the queue long before
  // its pack bytes reach sync_every_bytes, and first reads then waited out the
  // interval: docs/benchmarks.md, "Figures behind design choices").
  return unsynced_bytes_ >= options_.sync_every_bytes ||
         unsynced_footprint_ >= options_.max_pending_bytes / 2 ||
         Clock::now() - first_unsynced_at_ >= std::chrono::milliseconds(options_.sync_interval_ms);
}

void SsdTier::SyncAndIndex() {
  if (unsynced_.empty()) return;
  std::vector<Unsynced> batch_entries;
  batch_entries.swap(unsynced_);
  unsynced_bytes_ = 0;
  unsynced_footprint_ = 0;

  Status synced = active_ ? active_->Sync() : Status::IoError("no active pack");
  if (!synced.ok()) EnterDegraded(synced);

  // Index only entries still wanted: an entry invalidated (or superseded by a newer
  // fill of the same key) while it was on its way is left as dead pack bytes.
  std::vector<bool> wanted(batch_entries.size(), false);
  {
    MutexLock lock(queue_mu_);
    for (size_t i = 0; i < batch_entries.size(); ++i) {
      auto it = pending_.find(batch_entries[i].key);
      wanted[i] = synced.ok() && it != pending_.end() && it->second.seq == batch_entries[i].seq;
    }
  }
  if (synced.ok()) {
    MutexLock lock(meta_mu_);
    IndexBatch batch;
    std::vector<std::pair<IndexRecord, int64_t>> live_deltas;
    for (size_t i = 0; i < batch_entries.size(); ++i) {
      if (!wanted[i]) continue;
      const Unsynced& u = batch_entries[i];
      Result<std::optional<IndexRecord>> old = index_->Get(u.key);
      if (old.ok() && *old) live_deltas.emplace_back(**old, -1);
      batch.Put(u.key, u.record);
      live_deltas.emplace_back(u.record, +1);
    }
    Status st = index_->Write(batch);
    if (st.ok()) {
      for (const auto& [record, sign] : live_deltas) AddLiveLocked(record, sign);
      if (!degraded_ && degraded_logged_.exchange(false)) {
        spdlog::info("cache SSD tier: writing again");
      }
    } else {
      EnterDegraded(st);  // the pack bytes stay; a rebuild would find them
    }
  }
  {
    MutexLock lock(queue_mu_);
    for (size_t i = 0; i < batch_entries.size(); ++i) {
      auto it = pending_.find(batch_entries[i].key);
      if (it != pending_.end() && it->second.seq == batch_entries[i].seq) {
        pending_bytes_ -= QueuedBytes(it->second.bytes);
        pending_.erase(it);
      }
    }
  }
  space_cv_.notify_all();
}

bool SsdTier::MakeRoom(uint64_t need) {
  need += kPackHeaderSize;  // the entry may have to start a new pack
  const uint64_t limit = options_.disk_budget > reserve_ ? options_.disk_budget - reserve_ : 0;
  if (need > limit) return false;
  for (;;) {
    uint32_t victim = 0;
    double victim_live_fraction = 1.0;
    bool have_victim = false;
    {
      MutexLock lock(meta_mu_);
      if (pack_bytes_ + need <= limit) return true;
      if (full_) return false;
      for (const auto& [id, info] : packs_) {
        if (!info.sealed) continue;
        double fraction = info.file_bytes == 0 ? 0.0
                                               : static_cast<double>(info.live_bytes) /
                                                     static_cast<double>(info.file_bytes);
        if (!have_victim || fraction < victim_live_fraction) {
          victim = id;
          victim_live_fraction = fraction;
          have_victim = true;
        }
      }
    }
    if (!have_victim || victim_live_fraction >= 0.5) {
      full_ = true;
      if (!full_logged_.exchange(true)) {
        spdlog::info(
            "cache SSD tier is full of live data; admitting nothing new until "
            "entries die (budget {} bytes)",
            options_.disk_budget);
      }
      return false;
    }
    Status st = CompactPack(victim);
    if (!st.ok()) {
      if (degraded_) return false;
      spdlog::warn("cache: compacting pack {} failed ({}); evicting it whole", victim,
                   st.ToString());
      EvictPackWhole(victim);
    }
  }
}

Status SsdTier::CompactPack(uint32_t pack_id) {
  SyncAndIndex();  // so that liveness below sees every entry written so far
  const std::filesystem::path path = packs_dir_ / PackFileName(pack_id);
  Result<std::unique_ptr<PackScanner>> scanner = PackScanner::Open(io_, path, pack_id);
  if (!scanner.ok()) return scanner.status();
  struct Move {
    ChunkKey key;
    IndexRecord from, to;
  };
  std::vector<Move> moves;
  for (;;) {
    Result<std::optional<PackScanner::Entry>> next = (*scanner)->Next();
    if (!next.ok()) return next.status();
    if (!*next) break;
    const PackScanner::Entry& e = **next;
    Result<std::optional<IndexRecord>> current = index_->Get(e.header.key);
    if (!current.ok() || !*current || (*current)->pack_id != pack_id ||
        (*current)->offset != e.offset) {
      continue;  // dead: superseded, invalidated or dropped
    }
    Result<uint64_t> offset = AppendToActive(nullptr, *e.bytes);
    if (!offset.ok()) return offset.status();
    IndexRecord to = **current;
    to.pack_id = active_->id();
    to.offset = *offset;
    moves.push_back(Move{e.header.key, **current, to});
  }
  if (active_ && !moves.empty()) {
    Status st = active_->Sync();
    if (!st.ok()) {
      EnterDegraded(st);
      return st;
    }
  }
  {
    MutexLock lock(meta_mu_);
    IndexBatch batch;
    std::vector<std::pair<IndexRecord, int64_t>> live_deltas;
    for (const Move& m : moves) {
      Result<std::optional<IndexRecord>> current = index_->Get(m.key);
      if (!current.ok() || !*current || !(*current)->SameLocation(m.from)) continue;
      batch.Put(m.key, m.to);
      live_deltas.emplace_back(m.from, -1);
      live_deltas.emplace_back(m.to, +1);
    }
    EPOCHFS_RETURN_IF_ERROR(index_->Write(batch));
    for (const auto& [record, sign] : live_deltas) AddLiveLocked(record, sign);
  }
  // The moved records must be durable before their old bytes disappear.
  EPOCHFS_RETURN_IF_ERROR(index_->SyncWal());
  if (::unlink(path.c_str()) != 0) {
    return Status::FromErrno(errno, "unlink " + path.string());
  }
  MutexLock lock(meta_mu_);
  auto it = packs_.find(pack_id);
  if (it != packs_.end()) {
    live_entries_ -= it->second.live_entries;  // records the scan could not move
    pack_bytes_ -= it->second.file_bytes;
    packs_.erase(it);
  }
  ++packs_reclaimed_;
  return Status::Ok();
}

void SsdTier::EvictPackWhole(uint32_t pack_id) {
  // Its records are dropped lazily: a lookup finds the pack gone and drops the record.
  if (::unlink((packs_dir_ / PackFileName(pack_id)).c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("cache: cannot remove pack {}: {}", pack_id, std::strerror(errno));
    full_ = true;  // do not try again for every entry
    return;
  }
  MutexLock lock(meta_mu_);
  auto it = packs_.find(pack_id);
  if (it == packs_.end()) return;
  evictions_ += it->second.live_entries;
  live_entries_ -= it->second.live_entries;
  pack_bytes_ -= it->second.file_bytes;
  packs_.erase(it);
}

}  // namespace epochfs::cache
