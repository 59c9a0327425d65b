// Pack files: the SSD tier's append-only storage of chunk entries.
//
// A pack is `<cache_dir>/packs/pack-NNNNNN.epk` (the id in at least 6 decimal digits).
// It is written front to back by one writer and never modified in place; dead space
// is reclaimed by copying live entries to a newer pack and unlinking the old one.
// Every entry describes itself, so the index can be rebuilt by scanning packs and a
// torn write at a pack's tail (a crash mid-append) is recognised and ignored.
//
// All integers are little-endian; layouts are written field by field (byte_order.h),
// never by copying structs.
//
//   File header, 32 bytes, at offset 0:
//     0  char[8]  magic "EPOCHPK1"
//     8  u32      format version (1)
//    12  u32      reserved, 0
//    16  u64      pack id (must match the file name)
//    24  u32      low 32 bits of XXH3-64 of bytes 0..23
//    28  u32      reserved, 0
//
//   Entries follow back to back from offset 32. Entry header, 80 bytes:
//     0  u32      entry magic 0x45435045 ("EPCE" on disk)
//     4  u16      header version (1)
//     6  u8       codec: 0 raw, 1 lz4 (block format, LZ4_compress_default)
//     7  u8       reserved, 0
//     8  u32      stored_len: bytes following this header
//    12  u32      plain_len: bytes after decoding (<= kMaxEntryPlainLen)
//    16  u64      key.dev     } the chunk: source file (dev, ino),
//    24  u64      key.ino     } chunk index = offset / chunk_size
//    32  u32      key.chunk   }
//    36  u32      reserved, 0
//    40  u64      identity.size      } the source file's identity when the chunk
//    48  i64      identity.mtime_ns  } was read (dev, ino are in the key)
//    56  i64      identity.ctime_ns  }
//    64  u64      checksum: XXH3-64 of the PLAIN bytes
//    72  u32      header checksum: low 32 bits of XXH3-64 of bytes 0..71
//    76  u32      reserved, 0
//   then stored_len bytes (raw, or lz4 of plain_len bytes).
//
// Reading trusts nothing: an entry is served only if its magic, version, header
// checksum, key, lengths and the checksum of the decoded bytes all agree.
//
// Thread-safety: a PackWriter belongs to one thread. A PackReader is immutable after
// Open and may be shared (it reads at explicit offsets). A PackScanner belongs to one
// thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/buffer_pool.h"
#include "cache/cache.h"
#include "cache/chunk_bytes.h"
#include "cache/codec.h"
#include "cache/eviction.h"
#include "cache/io_engine.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace epochfs::cache {

constexpr char kPackMagic[8] = {'E', 'P', 'O', 'C', 'H', 'P', 'K', '1'};
constexpr uint32_t kPackFormatVersion = 1;
constexpr size_t kPackHeaderSize = 32;
// O_DIRECT reads are aligned to this (the largest logical block size of common disks).
constexpr size_t kDirectIoAlignment = 4096;

constexpr uint32_t kEntryMagic = 0x45435045;  // bytes "EPCE"
constexpr uint16_t kEntryHeaderVersion = 1;
constexpr size_t kEntryHeaderSize = 80;
// No entry is larger than this (it bounds chunk_size); a header claiming more is
// garbage, so a damaged length can never make a reader allocate gigabytes.
constexpr uint32_t kMaxEntryPlainLen = 64u << 20;

// What an entry header says.
struct EntryHeader {
  Codec codec = Codec::kRaw;
  uint32_t stored_len = 0;
  uint32_t plain_len = 0;
  ChunkKey key;
  uint64_t size = 0;  // identity of the source file; dev and ino are in `key`
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t checksum = 0;  // XXH3-64 of the plain bytes

  SourceIdentity identity() const {
    return SourceIdentity{key.dev, key.ino, size, mtime_ns, ctime_ns};
  }
  // Header plus stored bytes: the entry's footprint in the pack.
  uint64_t entry_len() const { return kEntryHeaderSize + stored_len; }
};

// "packs/pack-000012.epk" -> 12; nullopt for any other name.
std::optional<uint32_t> ParsePackFileName(const std::string& name);
std::string PackFileName(uint32_t pack_id);

void EncodeEntryHeader(const EntryHeader& header, char out[kEntryHeaderSize]);
// Checks magic, version, header checksum, codec and lengths. `bytes` must hold at
// least kEntryHeaderSize bytes. kCorruption otherwise (without location; callers add it).
Result<EntryHeader> DecodeEntryHeader(std::span<const char> bytes);

// Decodes and verifies the stored bytes of an entry whose header is `header`; the
// stored bytes are `buffer->substr(stored_pos, header.stored_len)`. A raw entry's
// result points into `buffer` when `share_buffer` (no copy); otherwise the bytes are
// copied or decompressed into a buffer of their own.
Result<ChunkBytes> DecodeEntryData(const EntryHeader& header,
                                   const std::shared_ptr<const std::string>& buffer,
                                   size_t stored_pos, bool share_buffer);
// The same for stored bytes in a buffer the caller keeps (a streamed read): the result
// is a buffer of its own, so the RAM tier's budget counts exactly its bytes; with
// `borrow`, a raw entry's result points into `stored` (ChunkBytes::Borrow) and is
// copied only if the caller keeps it (ChunkBytes::Owned).
Result<ChunkBytes> DecodeEntryData(const EntryHeader& header, std::span<const char> stored,
                                   bool borrow = false);

// An entry found in a span of pack bytes.
struct FoundEntry {
  uint64_t offset = 0;  // in the pack
  EntryHeader header;
};

// The complete entries with a valid header inside `bytes`, which are the pack's bytes
// from `bytes_offset`. The span may start mid-entry (a read-around window), so entry
// starts are found by their magic and confirmed by the header checksum. Data
// checksums are not checked here.
std::vector<FoundEntry> FindEntries(std::span<const char> bytes, uint64_t bytes_offset);

// Appends entries to a new pack. Not thread-safe (the SSD writer thread owns it).
class PackWriter {
 public:
  // Creates `dir`/pack-NNNNNN.epk (which must not exist), writes the file header and
  // syncs the directory so that the file survives a crash.
  static Result<std::unique_ptr<PackWriter>> Create(IoEngine& io, const std::filesystem::path& dir,
                                                    uint32_t pack_id);

  // Appends one entry (header, then stored bytes) at the tail in one write and
  // returns its offset. Not durable until Sync(). After a failed append the writer
  // refuses further appends (the tail is unknown): seal it and start a new pack.
  Result<uint64_t> Append(const EntryHeader& header, std::span<const char> stored);
  // Appends an entry exactly as read from another pack (header + stored bytes).
  Result<uint64_t> AppendRaw(std::span<const char> entry_bytes);

  // fdatasync: everything appended so far is durable once this returns Ok.
  Status Sync();

  uint32_t id() const { return id_; }
  uint64_t size() const { return tail_; }
  bool broken() const { return broken_; }

 private:
  PackWriter(IoEngine& io, UniqueFd fd, uint32_t id);
  Result<uint64_t> WriteAtTail(std::span<const char> bytes);

  IoEngine& io_;
  UniqueFd fd_;
  uint32_t id_;
  uint64_t tail_ = kPackHeaderSize;
  uint64_t dropped_upto_ = 0;  // page cache before this offset was dropped after a sync
  bool broken_ = false;
  std::string scratch_;  // header + stored bytes, written with one pwrite
};

// Reads entries of one pack at known offsets. Thread-safe.
class PackReader {
 public:
  // Opens the pack read-only and checks its file header. Reads go into buffers from
  // `buffers`, which must outlive the reader.
  static Result<std::shared_ptr<PackReader>> Open(IoEngine& io, const std::filesystem::path& path,
                                                  uint32_t pack_id, BufferPool& buffers);

  // Reads the entry at `offset`, which the index says is `key` with `stored_len`
  // stored bytes, in one IO, and verifies it. Errors: kIoError (the read failed),
  // kCorruption ("pack 12 offset 4096: checksum mismatch", also for a short read).
  Result<ChunkBytes> ReadEntry(uint64_t offset, uint32_t stored_len, const ChunkKey& key) const;

  // Reads pack bytes [offset, offset + len) (fewer at end of file). The pages read are
  // dropped from the page cache afterwards: the bytes go on to the RAM tier, and a second
  // copy in the page cache would only double what the daemon's memory limit pays for.
  // Into a buffer from the reader's pool, which the bytes (and anything shared from
  // them) keep.
  Result<ChunkBytes> ReadRange(uint64_t offset, size_t len) const;

  // For large streamed reads: an O_DIRECT descriptor of the pack (reads bypass the page
  // cache; offsets, lengths and buffers aligned to kDirectIoAlignment), or -1 where the
  // cache filesystem refuses O_DIRECT (then use fd() and DropCachedRange()).
  int direct_fd() const { return direct_fd_.get(); }
  int fd() const { return fd_.get(); }
  // Tells the kernel it may drop the page cache of [offset, offset + len).
  void DropCachedRange(uint64_t offset, uint64_t len) const;

  uint32_t id() const { return id_; }

 private:
  PackReader(IoEngine& io, UniqueFd fd, UniqueFd direct_fd, uint32_t id, BufferPool& buffers)
      : io_(io), fd_(std::move(fd)), direct_fd_(std::move(direct_fd)), id_(id),
        buffers_(buffers) {}
  // `len` bytes at `offset` of `fd` (fewer at end of file), read into a buffer of the pool.
  Result<ChunkBytes> ReadIntoBuffer(int fd, uint64_t offset, size_t len) const;
  IoEngine& io_;
  UniqueFd fd_;
  UniqueFd direct_fd_;  // invalid where O_DIRECT is refused
  uint32_t id_;
  BufferPool& buffers_;
};

// Walks a pack from the start, entry by entry, for index rebuilds and compaction.
// Stops cleanly at the first sign of a torn tail: a partial header or data, a bad
// header. An entry with a valid header but bad data is skipped (its length is known)
// and reported through corrupt_entries().
class PackScanner {
 public:
  static Result<std::unique_ptr<PackScanner>> Open(IoEngine& io, const std::filesystem::path& path,
                                                   uint32_t pack_id);

  struct Entry {
    uint64_t offset = 0;
    EntryHeader header;
    // Header + stored bytes, verbatim (for PackWriter::AppendRaw).
    std::shared_ptr<const std::string> bytes;
    ChunkBytes plain;  // decoded and checksum-verified (shares `bytes` when raw)
  };
  // The next good entry, or nullopt at the end (see stop_reason()). kIoError when
  // the pack cannot be read.
  Result<std::optional<Entry>> Next();

  // Offset just past the last good entry: where a clean pack would end.
  uint64_t valid_end() const { return pos_; }
  // Why the scan stopped: "end of pack", "torn tail: partial header at 1234", ...
  const std::string& stop_reason() const { return stop_reason_; }
  uint64_t corrupt_entries() const { return corrupt_entries_; }

 private:
  PackScanner(IoEngine& io, UniqueFd fd, uint32_t id, uint64_t file_size)
      : io_(io), fd_(std::move(fd)), id_(id), file_size_(file_size) {}
  IoEngine& io_;
  UniqueFd fd_;
  uint32_t id_;
  uint64_t file_size_;
  uint64_t pos_ = kPackHeaderSize;
  bool done_ = false;
  std::string stop_reason_;
  uint64_t corrupt_entries_ = 0;
};

}  // namespace epochfs::cache
