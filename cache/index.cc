#include "cache/index.h"

#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <system_error>

#include "cache/byte_order.h"

namespace epochfs::cache {

using namespace byte_order;

namespace {

constexpr char kChunkPrefix = 'c';
// Written once the index holds everything the packs hold (after creation or a
// rebuild). A database without it is new, or a rebuild was interrupted.
constexpr std::string_view kInitialisedKey = "minitialised";
constexpr size_t kKeySize = 1 + 8 + 8 + 4;
constexpr uint8_t kValueVersion = 1;
constexpr size_t kValueSize = 1 + 4 + 8 + 4 + 4 + 1 + 8 + 8 + 8 + 8;

constexpr size_t kBlockCacheBytes = 8u << 20;
constexpr size_t kMemtableBytes = 4u << 20;

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsCorruption()) return Status::Corruption(what + ": " + s.ToString());
  if (s.IsNoSpace()) return Status::NoSpace(what + ": " + s.ToString());
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(what + ": " + s.ToString());
  return Status::IoError(what + ": " + s.ToString());
}

std::string FilePrefix(uint64_t dev, uint64_t ino) {
  std::string prefix(1 + 8 + 8, '\0');
  prefix[0] = kChunkPrefix;
  PutBe(prefix.data() + 1, dev, 8);
  PutBe(prefix.data() + 9, ino, 8);
  return prefix;
}

rocksdb::Options MakeOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  // Keep RocksDB's own memory small: it counts against the daemon's RSS.
  options.write_buffer_size = kMemtableBytes;
  options.max_write_buffer_number = 2;
  options.max_total_wal_size = 4 * kMemtableBytes;
  options.max_open_files = 256;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 2;
  options.max_log_file_size = 1u << 20;
  options.info_log_level = rocksdb::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

// Moves a damaged database out of the way, keeping only the newest damaged copy for
// post-mortems (older ones would eat cache disk outside the budget).
Status MoveAside(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::path parent = dir.parent_path();
  std::string stem = dir.filename().string() + ".corrupt-";
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    if (entry.path().filename().string().starts_with(stem)) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  std::filesystem::path aside = parent / fmt::format("{}{}", stem, now);
  std::filesystem::rename(dir, aside, ec);
  if (ec) return Status::IoError(fmt::format("move {} aside: {}", dir.string(), ec.message()));
  spdlog::warn("index {} is corrupt; moved it to {} and starting a fresh one", dir.string(),
               aside.string());
  return Status::Ok();
}

}  // namespace

std::string EncodeIndexKey(const ChunkKey& key) {
  std::string out(kKeySize, '\0');
  out[0] = kChunkPrefix;
  PutBe(out.data() + 1, key.dev, 8);
  PutBe(out.data() + 9, key.ino, 8);
  PutBe(out.data() + 17, key.chunk, 4);
  return out;
}

std::optional<ChunkKey> DecodeIndexKey(std::string_view key) {
  if (key.size() != kKeySize || key[0] != kChunkPrefix) return std::nullopt;
  return ChunkKey{GetBe(key.data() + 1, 8), GetBe(key.data() + 9, 8),
                  static_cast<uint32_t>(GetBe(key.data() + 17, 4))};
}

std::string EncodeIndexValue(const IndexRecord& r) {
  std::string out(kValueSize, '\0');
  char* p = out.data();
  p[0] = static_cast<char>(kValueVersion);
  PutLe32(p + 1, r.pack_id);
  PutLe64(p + 5, r.offset);
  PutLe32(p + 13, r.stored_len);
  PutLe32(p + 17, r.plain_len);
  p[21] = static_cast<char>(r.codec);
  PutLe64(p + 22, r.checksum);
  PutLe64(p + 30, r.size);
  PutLe64(p + 38, static_cast<uint64_t>(r.mtime_ns));
  PutLe64(p + 46, static_cast<uint64_t>(r.ctime_ns));
  return out;
}

std::optional<IndexRecord> DecodeIndexValue(std::string_view value) {
  if (value.size() != kValueSize || static_cast<uint8_t>(value[0]) != kValueVersion) {
    return std::nullopt;
  }
  const char* p = value.data();
  IndexRecord r;
  r.pack_id = GetLe32(p + 1);
  r.offset = GetLe64(p + 5);
  r.stored_len = GetLe32(p + 13);
  r.plain_len = GetLe32(p + 17);
  uint8_t codec = static_cast<uint8_t>(p[21]);
  if (codec > static_cast<uint8_t>(Codec::kLz4)) return std::nullopt;
  r.codec = static_cast<Codec>(codec);
  r.checksum = GetLe64(p + 22);
  r.size = GetLe64(p + 30);
  r.mtime_ns = static_cast<int64_t>(GetLe64(p + 38));
  r.ctime_ns = static_cast<int64_t>(GetLe64(p + 46));
  return r;
}

struct Index::Db {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions write_options;  // no WAL sync: see the header
};

Index::Index(std::unique_ptr<Db> db, bool recreated) : db_(std::move(db)), recreated_(recreated) {}

Index::~Index() {
  if (db_ && db_->db) {
    // Close explicitly to learn about (and log) a failed final flush.
    rocksdb::Status s = db_->db->Close();
    if (!s.ok()) spdlog::warn("closing the cache index: {}", s.ToString());
  }
}

Result<std::unique_ptr<Index>> Index::Open(const std::filesystem::path& dir) {
  rocksdb::Options options = MakeOptions();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir.string(), &raw);
  bool recreated = false;
  if (!s.ok()) {
    // Held by another process (its LOCK file) or a failing disk: not ours to fix.
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::Busy(fmt::format("index {} is in use: {}", dir.string(), s.ToString()));
    }
    // Anything else means the database is damaged (corrupt or missing files). The
    // index is only a cache of what the packs say, so start a fresh one; if the disk
    // itself is failing, creating that one fails too and the error is returned.
    spdlog::warn("cannot open index {}: {}", dir.string(), s.ToString());
    EPOCHFS_RETURN_IF_ERROR(MoveAside(dir));
    s = rocksdb::DB::Open(options, dir.string(), &raw);
    if (!s.ok()) return FromRocks(s, "create fresh index " + dir.string());
    recreated = true;
  }
  auto db = std::make_unique<Db>();
  db->db.reset(raw);
  db->write_options.sync = false;
  return std::unique_ptr<Index>(new Index(std::move(db), recreated));
}

Status Index::Discard(const std::filesystem::path& dir) { return MoveAside(dir); }

Result<std::optional<IndexRecord>> Index::Get(const ChunkKey& key) const {
  std::string value;
  rocksdb::Status s = db_->db->Get(rocksdb::ReadOptions(), EncodeIndexKey(key), &value);
  if (s.IsNotFound()) return std::optional<IndexRecord>();
  if (!s.ok()) return FromRocks(s, "index get");
  std::optional<IndexRecord> record = DecodeIndexValue(value);
  if (!record) {
    return Status::Corruption(
        fmt::format("index record of ino {} chunk {} is undecodable", key.ino, key.chunk));
  }
  return record;
}

Status Index::Write(const IndexBatch& batch) {
  rocksdb::WriteBatch wb;
  for (const auto& [key, record] : batch.ops) {
    rocksdb::Status s = record ? wb.Put(EncodeIndexKey(key), EncodeIndexValue(*record))
                               : wb.Delete(EncodeIndexKey(key));
    if (!s.ok()) return FromRocks(s, "index batch");
  }
  return FromRocks(db_->db->Write(db_->write_options, &wb), "index write");
}

Status Index::Put(const ChunkKey& key, const IndexRecord& record) {
  return FromRocks(db_->db->Put(db_->write_options, EncodeIndexKey(key), EncodeIndexValue(record)),
                   "index put");
}

Status Index::Delete(const ChunkKey& key) {
  return FromRocks(db_->db->Delete(db_->write_options, EncodeIndexKey(key)), "index delete");
}

Result<std::vector<std::pair<ChunkKey, IndexRecord>>> Index::DeleteFile(uint64_t dev,
                                                                        uint64_t ino) {
  std::vector<std::pair<ChunkKey, IndexRecord>> deleted;
  std::string prefix = FilePrefix(dev, ino);
  rocksdb::WriteBatch wb;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      std::optional<ChunkKey> key = DecodeIndexKey(it->key().ToStringView());
      std::optional<IndexRecord> record = DecodeIndexValue(it->value().ToStringView());
      if (key && record) deleted.emplace_back(*key, *record);
      rocksdb::Status s = wb.Delete(it->key());
      if (!s.ok()) return FromRocks(s, "index batch");
    }
    if (!it->status().ok()) return FromRocks(it->status(), "index scan");
  }
  if (wb.Count() == 0) return deleted;
  EPOCHFS_RETURN_IF_ERROR(FromRocks(db_->db->Write(db_->write_options, &wb), "index write"));
  return deleted;
}

Status Index::ForEach(const std::function<bool(const ChunkKey&, const IndexRecord&)>& fn,
                      const std::function<void(const ChunkKey&)>& on_bad) const {
  rocksdb::ReadOptions read_options;
  read_options.fill_cache = false;  // a full scan would flush the hot blocks
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(read_options));
  std::string prefix(1, kChunkPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    std::optional<ChunkKey> key = DecodeIndexKey(it->key().ToStringView());
    std::optional<IndexRecord> record = DecodeIndexValue(it->value().ToStringView());
    if (!key || !record) {
      if (key && on_bad) on_bad(*key);
      continue;
    }
    if (!fn(*key, *record)) break;
  }
  return FromRocks(it->status(), "index scan");
}

bool Index::initialised() const {
  std::string value;
  return db_->db
      ->Get(rocksdb::ReadOptions(), rocksdb::Slice(kInitialisedKey.data(), kInitialisedKey.size()),
            &value)
      .ok();
}

Status Index::MarkInitialised() {
  rocksdb::WriteOptions sync_options;
  sync_options.sync = true;
  return FromRocks(
      db_->db->Put(sync_options, rocksdb::Slice(kInitialisedKey.data(), kInitialisedKey.size()),
                   "1"),
      "index mark initialised");
}

bool Index::Empty() const {
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kChunkPrefix);
  it->Seek(prefix);
  return !(it->Valid() && it->key().starts_with(prefix));
}

Status Index::SyncWal() { return FromRocks(db_->db->FlushWAL(true), "index WAL sync"); }

}  // namespace epochfs::cache
