// Index: where each cached chunk lives in the packs. A RocksDB database at
// `<cache_dir>/index`, one per cache directory (RocksDB's LOCK file keeps a second
// daemon out).
//
//   Key, 21 bytes:   'c' | dev (u64 BE) | ino (u64 BE) | chunk (u32 BE)
//     Big-endian so that RocksDB's bytewise order is (dev, ino, chunk) order: all
//     chunks of one file are one key range (DeleteFile). The prefix byte leaves
//     room for other record kinds: 'm' marks metadata ("minitialised", below).
//   Value, 54 bytes, little-endian:
//     u8 version (1) | u32 pack id | u64 offset | u32 stored_len | u32 plain_len |
//     u8 codec | u64 checksum | u64 size | i64 mtime_ns | i64 ctime_ns
//
// Durability: writes do not sync RocksDB's WAL. The SSD tier syncs pack bytes before
// it writes the records that point at them, so a record lost in a crash only orphans
// pack bytes (reclaimed later), and a record never points at bytes that were not
// durable. The index is a cache of what the packs say: if it is lost or corrupt it
// is moved aside and rebuilt by scanning the packs (SsdTier does the scan).
//
// Memory: an 8 MiB block cache (index and filter blocks included) and two 4 MiB
// memtables; it all counts against the daemon's RSS.
//
// Thread-safety: all methods are thread-safe (RocksDB is). Read-modify-write
// sequences need the caller's own lock (SsdTier's meta_mu_).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache.h"
#include "cache/codec.h"
#include "cache/eviction.h"
#include "base/status.h"

namespace epochfs::cache {

struct IndexRecord {
  uint32_t pack_id = 0;
  uint64_t offset = 0;  // of the entry header in the pack
  uint32_t stored_len = 0;
  uint32_t plain_len = 0;
  Codec codec = Codec::kRaw;
  uint64_t checksum = 0;  // XXH3-64 of the plain bytes
  uint64_t size = 0;      // source identity; dev and ino are in the key
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;

  SourceIdentity identity(const ChunkKey& key) const {
    return SourceIdentity{key.dev, key.ino, size, mtime_ns, ctime_ns};
  }
  bool SameLocation(const IndexRecord& other) const {
    return pack_id == other.pack_id && offset == other.offset;
  }
  bool operator==(const IndexRecord&) const = default;
};

// Puts (a record) and deletes (nullopt), applied atomically by Index::Write.
struct IndexBatch {
  std::vector<std::pair<ChunkKey, std::optional<IndexRecord>>> ops;
  void Put(const ChunkKey& key, const IndexRecord& record) { ops.emplace_back(key, record); }
  void Delete(const ChunkKey& key) { ops.emplace_back(key, std::nullopt); }
  bool empty() const { return ops.empty(); }
};

class Index {
 public:
  // Opens or creates the index in `dir`. A database that fails to open (corrupt,
  // files missing) is moved aside to `<dir>.corrupt-<unix time>` (replacing an older one) and a
  // fresh one is created; recreated() then says so. Errors: kBusy (another process
  // holds it), kIoError.
  static Result<std::unique_ptr<Index>> Open(const std::filesystem::path& dir);
  // Moves the (closed) database in `dir` aside as damaged, keeping the newest such copy.
  static Status Discard(const std::filesystem::path& dir);
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  // Whether Open had to replace a corrupt database with an empty one.
  bool recreated() const { return recreated_; }

  // The record for `key`, nullopt if none. kCorruption for an undecodable value.
  Result<std::optional<IndexRecord>> Get(const ChunkKey& key) const;

  Status Write(const IndexBatch& batch);
  Status Put(const ChunkKey& key, const IndexRecord& record);
  Status Delete(const ChunkKey& key);

  // Deletes every record of file (dev, ino) and returns what it deleted (so the
  // caller can account the freed pack bytes).
  Result<std::vector<std::pair<ChunkKey, IndexRecord>>> DeleteFile(uint64_t dev, uint64_t ino);

  // Calls `fn` for every record in key order until it returns false. Undecodable
  // values are passed to `on_bad` (if given) instead.
  Status ForEach(const std::function<bool(const ChunkKey&, const IndexRecord&)>& fn,
                 const std::function<void(const ChunkKey&)>& on_bad = nullptr) const;

  // Whether the index holds no chunk records.
  bool Empty() const;

  // Whether MarkInitialised() was ever called on this database. A database that is
  // not initialised is new (first start, or deleted, or moved aside) or its rebuild
  // was interrupted: the SSD tier then rebuilds it from the packs. An initialised
  // index may legitimately be empty (everything invalidated).
  bool initialised() const;
  // Records (synchronously) that the index now reflects the packs.
  Status MarkInitialised();

  // Makes every write so far durable (syncs the WAL). Used before deleting a pack
  // whose records were just moved, so a crash cannot leave records to a missing pack.
  Status SyncWal();

 private:
  struct Db;
  explicit Index(std::unique_ptr<Db> db, bool recreated);
  std::unique_ptr<Db> db_;
  bool recreated_ = false;
};

// Exposed for tests of the key layout.
std::string EncodeIndexKey(const ChunkKey& key);
std::optional<ChunkKey> DecodeIndexKey(std::string_view key);
std::string EncodeIndexValue(const IndexRecord& record);
std::optional<IndexRecord> DecodeIndexValue(std::string_view value);

}  // namespace epochfs::cache
