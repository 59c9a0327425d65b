#include "cache/pack.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "cache/byte_order.h"

namespace epochfs::cache {

using namespace byte_order;

namespace {

uint32_t HeaderChecksum(const char* bytes, size_t len) {
  return static_cast<uint32_t>(XXH3_64bits(bytes, len));
}

void EncodeFileHeader(uint32_t pack_id, char out[kPackHeaderSize]) {
  std::memset(out, 0, kPackHeaderSize);
  std::memcpy(out, kPackMagic, sizeof(kPackMagic));
  PutLe32(out + 8, kPackFormatVersion);
  PutLe64(out + 16, pack_id);
  PutLe32(out + 24, HeaderChecksum(out, 24));
}

Status CheckFileHeader(std::span<const char> bytes, uint32_t pack_id) {
  if (bytes.size() < kPackHeaderSize) {
    return Status::Corruption(fmt::format("pack {}: file header truncated", pack_id));
  }
  const char* h = bytes.data();
  if (std::memcmp(h, kPackMagic, sizeof(kPackMagic)) != 0) {
    return Status::Corruption(fmt::format("pack {}: not a pack file (bad magic)", pack_id));
  }
  if (GetLe32(h + 24) != HeaderChecksum(h, 24)) {
    return Status::Corruption(fmt::format("pack {}: file header checksum mismatch", pack_id));
  }
  if (GetLe32(h + 8) != kPackFormatVersion) {
    return Status::Corruption(
        fmt::format("pack {}: unsupported format version {}", pack_id, GetLe32(h + 8)));
  }
  if (GetLe64(h + 16) != pack_id) {
    return Status::Corruption(
        fmt::format("pack {}: file header says pack {}", pack_id, GetLe64(h + 16)));
  }
  return Status::Ok();
}

Status WithLocation(const Status& st, uint32_t pack_id, uint64_t offset) {
  return Status::Corruption(fmt::format("pack {} offset {}: {}", pack_id, offset, st.message()));
}

Result<uint64_t> FileSize(int fd, const std::filesystem::path& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat " + path.string());
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

std::optional<uint32_t> ParsePackFileName(const std::string& name) {
  constexpr std::string_view kPrefix = "pack-";
  constexpr std::string_view kSuffix = ".epk";
  if (name.size() < kPrefix.size() + 6 + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size() - kSuffix.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  uint32_t id = 0;
  auto [ptr, ec] = std::from_chars(first, last, id);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return id;
}

std::string PackFileName(uint32_t pack_id) { return fmt::format("pack-{:06d}.epk", pack_id); }

void EncodeEntryHeader(const EntryHeader& h, char out[kEntryHeaderSize]) {
  std::memset(out, 0, kEntryHeaderSize);
  PutLe32(out + 0, kEntryMagic);
  PutLe16(out + 4, kEntryHeaderVersion);
  out[6] = static_cast<char>(h.codec);
  PutLe32(out + 8, h.stored_len);
  PutLe32(out + 12, h.plain_len);
  PutLe64(out + 16, h.key.dev);
  PutLe64(out + 24, h.key.ino);
  PutLe32(out + 32, h.key.chunk);
  PutLe64(out + 40, h.size);
  PutLe64(out + 48, static_cast<uint64_t>(h.mtime_ns));
  PutLe64(out + 56, static_cast<uint64_t>(h.ctime_ns));
  PutLe64(out + 64, h.checksum);
  PutLe32(out + 72, HeaderChecksum(out, 72));
}

Result<EntryHeader> DecodeEntryHeader(std::span<const char> bytes) {
  if (bytes.size() < kEntryHeaderSize) return Status::Corruption("partial entry header");
  const char* in = bytes.data();
  if (GetLe32(in) != kEntryMagic) return Status::Corruption("bad entry magic");
  if (GetLe32(in + 72) != HeaderChecksum(in, 72)) {
    return Status::Corruption("entry header checksum mismatch");
  }
  if (GetLe16(in + 4) != kEntryHeaderVersion) {
    return Status::Corruption(fmt::format("unsupported entry header version {}", GetLe16(in + 4)));
  }
  EntryHeader h;
  uint8_t codec = static_cast<uint8_t>(in[6]);
  if (codec > static_cast<uint8_t>(Codec::kLz4)) {
    return Status::Corruption(fmt::format("unknown codec {}", codec));
  }
  h.codec = static_cast<Codec>(codec);
  h.stored_len = GetLe32(in + 8);
  h.plain_len = GetLe32(in + 12);
  h.key = ChunkKey{GetLe64(in + 16), GetLe64(in + 24), GetLe32(in + 32)};
  h.size = GetLe64(in + 40);
  h.mtime_ns = static_cast<int64_t>(GetLe64(in + 48));
  h.ctime_ns = static_cast<int64_t>(GetLe64(in + 56));
  h.checksum = GetLe64(in + 64);
  bool lengths_ok = h.plain_len <= kMaxEntryPlainLen &&
                    (h.codec == Codec::kRaw ? h.stored_len == h.plain_len
                                            : h.stored_len <= MaxStoredLen(h.plain_len));
  if (!lengths_ok) {
    return Status::Corruption(
        fmt::format("implausible entry lengths: stored {} plain {}", h.stored_len, h.plain_len));
  }
  return h;
}

Result<ChunkBytes> DecodeEntryData(const EntryHeader& header,
                                   const std::shared_ptr<const std::string>& buffer,
                                   size_t stored_pos, bool share_buffer) {
  if (stored_pos > buffer->size() || buffer->size() - stored_pos < header.stored_len) {
    return Status::Corruption("partial entry data");
  }
  std::span<const char> stored(buffer->data() + stored_pos, header.stored_len);
  if (header.codec == Codec::kRaw && share_buffer) {
    EPOCHFS_RETURN_IF_ERROR(CheckRaw(stored, header.plain_len, header.checksum));
    return ChunkBytes::Share(buffer, stored.data(), stored.size(), buffer->capacity());
  }
  Result<std::string> plain = Decode(header.codec, stored, header.plain_len, header.checksum);
  if (!plain.ok()) return plain.status();
  return ChunkBytes::Own(std::move(plain).value());
}

Result<ChunkBytes> DecodeEntryData(const EntryHeader& header, std::span<const char> stored,
                                   bool borrow) {
  if (stored.size() < header.stored_len) return Status::Corruption("partial entry data");
  if (header.codec == Codec::kRaw) {
    stored = stored.first(header.stored_len);
    EPOCHFS_RETURN_IF_ERROR(CheckRaw(stored, header.plain_len, header.checksum));
    return borrow ? ChunkBytes::Borrow(stored) : ChunkBytes::Copy(stored);
  }
  Result<std::string> plain =
      Decode(header.codec, stored.first(header.stored_len), header.plain_len, header.checksum);
  if (!plain.ok()) return plain.status();
  return ChunkBytes::Own(std::move(plain).value());
}

std::vector<FoundEntry> FindEntries(std::span<const char> bytes, uint64_t bytes_offset) {
  std::vector<FoundEntry> found;
  char magic[4];
  PutLe32(magic, kEntryMagic);
  size_t pos = 0;
  while (pos + kEntryHeaderSize <= bytes.size()) {
    const void* hit = ::memmem(bytes.data() + pos, bytes.size() - pos, magic, sizeof(magic));
    if (hit == nullptr) break;
    size_t at = static_cast<size_t>(static_cast<const char*>(hit) - bytes.data());
    if (at + kEntryHeaderSize > bytes.size()) break;
    Result<EntryHeader> header = DecodeEntryHeader(bytes.subspan(at));
    if (!header.ok() || bytes_offset + at < kPackHeaderSize) {
      pos = at + 1;  // the magic bytes happened to occur inside other data
      continue;
    }
    if (at + header->entry_len() > bytes.size()) break;  // runs past the span
    found.push_back(FoundEntry{bytes_offset + at, *header});
    pos = at + header->entry_len();
  }
  return found;
}

// --------------------------------------------------------------------------------
// PackWriter

PackWriter::PackWriter(IoEngine& io, UniqueFd fd, uint32_t id)
    : io_(io), fd_(std::move(fd)), id_(id) {}

Result<std::unique_ptr<PackWriter>> PackWriter::Create(IoEngine& io,
                                                       const std::filesystem::path& dir,
                                                       uint32_t pack_id) {
  std::filesystem::path path = dir / PackFileName(pack_id);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return Status::FromErrno(errno, "create " + path.string());
  char header[kPackHeaderSize];
  EncodeFileHeader(pack_id, header);
  Status st = io.WriteAt(fd.get(), header, sizeof(header), 0);
  if (!st.ok()) {
    fd.reset();
    std::error_code ignored;  // best effort: an empty pack would only be skipped later
    std::filesystem::remove(path, ignored);
    return st;
  }
  // The file's directory entry must be durable before any index record points into it.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd || ::fsync(dir_fd.get()) != 0) {
    return Status::FromErrno(errno, "fsync directory " + dir.string());
  }
  return std::unique_ptr<PackWriter>(new PackWriter(io, std::move(fd), pack_id));
}

Result<uint64_t> PackWriter::WriteAtTail(std::span<const char> bytes) {
  if (broken_) return Status::IoError(fmt::format("pack {}: earlier write failed", id_));
  Status st = io_.WriteAt(fd_.get(), bytes.data(), bytes.size(), tail_);
  if (!st.ok()) {
    broken_ = true;
    // Best effort: cut off whatever part of the entry reached the file. Scanners
    // would stop at the torn entry anyway.
    if (::ftruncate(fd_.get(), static_cast<off_t>(tail_)) != 0) {
      // Nothing more to do: the pack is sealed with a torn tail.
    }
    return st;
  }
  uint64_t offset = tail_;
  tail_ += bytes.size();
  return offset;
}

Result<uint64_t> PackWriter::Append(const EntryHeader& header, std::span<const char> stored) {
  scratch_.resize(kEntryHeaderSize + stored.size());
  EncodeEntryHeader(header, scratch_.data());
  std::memcpy(scratch_.data() + kEntryHeaderSize, stored.data(), stored.size());
  Result<uint64_t> offset = WriteAtTail(scratch_);
  // Do not keep a 1 MiB scratch buffer alive between appends of small entries.
  if (scratch_.capacity() > (4u << 20)) std::string().swap(scratch_);
  return offset;
}

Result<uint64_t> PackWriter::AppendRaw(std::span<const char> entry_bytes) {
  return WriteAtTail(entry_bytes);
}

Status PackWriter::Sync() {
  Status st = io_.DataSync(fd_.get());
  if (!st.ok()) {
    broken_ = true;  // after a failed fsync the page cache state is unknown
    return st;
  }
  // The synced pages are clean now, and their bytes are in the RAM tier or were just
  // served: a page-cache copy would only double what the daemon's memory limit pays for.
  (void)::posix_fadvise(fd_.get(), static_cast<off_t>(dropped_upto_),
                        static_cast<off_t>(tail_ - dropped_upto_), POSIX_FADV_DONTNEED);
  dropped_upto_ = tail_ / kDirectIoAlignment * kDirectIoAlignment;  // keep the partial tail page
  return st;
}

// --------------------------------------------------------------------------------
// PackReader

Result<std::shared_ptr<PackReader>> PackReader::Open(IoEngine& io,
                                                     const std::filesystem::path& path,
                                                     uint32_t pack_id, BufferPool& buffers) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno(errno, "open " + path.string());
  char header[kPackHeaderSize];
  Result<size_t> n = io.ReadAt(fd.get(), header, sizeof(header), 0);
  if (!n.ok()) return n.status();
  EPOCHFS_RETURN_IF_ERROR(CheckFileHeader(std::span<const char>(header, *n), pack_id));
  // tmpfs before Linux 6.6 and some FUSE cache disks refuse O_DIRECT: then streamed reads
  // go through the page cache and drop it behind them.
  UniqueFd direct(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  auto reader =
      std::shared_ptr<PackReader>(new PackReader(io, std::move(fd), std::move(direct), pack_id, buffers));
  reader->DropCachedRange(0, 128u << 10);  // the header, and what readahead brought with it
  return reader;
}

void PackReader::DropCachedRange(uint64_t offset, uint64_t len) const {
  // Advice: a failure only costs memory, never correctness.
  (void)::posix_fadvise(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(len),
                        POSIX_FADV_DONTNEED);
}

Result<ChunkBytes> PackReader::ReadIntoBuffer(int fd, uint64_t offset, size_t len) const {
  BufferPool::Buffer buffer = buffers_.Take(len);
  if (buffer.memory == nullptr) return Status::FromErrno(ENOMEM, "buffer for a pack read");
  Result<size_t> n = io_.ReadAt(fd, buffer.memory.get(), len, offset);
  if (!n.ok()) return n.status();
  const char* data = buffer.memory.get();
  return ChunkBytes::Share(std::shared_ptr<const char>(std::move(buffer.memory)), data, *n,
                           buffer.len);
}

Result<ChunkBytes> PackReader::ReadRange(uint64_t offset, size_t len) const {
  Result<ChunkBytes> bytes = ReadIntoBuffer(fd_.get(), offset, len);
  if (bytes.ok()) DropCachedRange(offset, len);
  return bytes;
}

Result<ChunkBytes> PackReader::ReadEntry(uint64_t offset, uint32_t stored_len,
                                         const ChunkKey& key) const {
  const size_t len = kEntryHeaderSize + size_t{stored_len};
  // With O_DIRECT: the aligned range around the entry, straight into an aligned buffer.
  // Without: a buffered read of exactly the entry. Either way into a buffer of the pool
  // (one used before, where it has one) that a raw entry's bytes then stay in: no copy,
  // and with O_DIRECT no page cache to fill and drop again.
  ChunkBytes read;
  std::span<const char> bytes;
  if (direct_fd_) {
    const uint64_t start = offset / kDirectIoAlignment * kDirectIoAlignment;
    const uint64_t end =
        (offset + len + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
    Result<ChunkBytes> aligned = ReadIntoBuffer(direct_fd_.get(), start, end - start);
    if (!aligned.ok()) return aligned.status();
    read = std::move(aligned).value();
    bytes = read.span().subspan(std::min<size_t>(offset - start, read.size));
  } else {
    Result<ChunkBytes> range = ReadRange(offset, len);
    if (!range.ok()) return range.status();
    read = std::move(range).value();
    bytes = read.span();
  }
  if (bytes.size() < len) {
    return Status::Corruption(fmt::format("pack {} offset {}: short read ({} of {} bytes)", id_,
                                          offset, bytes.size(), len));
  }
  Result<EntryHeader> header = DecodeEntryHeader(bytes);
  if (!header.ok()) return WithLocation(header.status(), id_, offset);
  if (header->key != key || header->stored_len != stored_len) {
    return Status::Corruption(
        fmt::format("pack {} offset {}: entry is not the indexed one", id_, offset));
  }
  const std::span<const char> stored = bytes.subspan(kEntryHeaderSize, stored_len);
  if (header->codec == Codec::kRaw) {
    Status checked = CheckRaw(stored, header->plain_len, header->checksum);
    if (!checked.ok()) return WithLocation(checked, id_, offset);
    return ChunkBytes::Share(std::move(read.owner), stored.data(), stored.size(), read.owned);
  }
  Result<ChunkBytes> plain = DecodeEntryData(*header, stored);
  if (!plain.ok()) return WithLocation(plain.status(), id_, offset);
  return plain;
}

// --------------------------------------------------------------------------------
// PackScanner

Result<std::unique_ptr<PackScanner>> PackScanner::Open(IoEngine& io,
                                                       const std::filesystem::path& path,
                                                       uint32_t pack_id) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno(errno, "open " + path.string());
  Result<uint64_t> size = FileSize(fd.get(), path);
  if (!size.ok()) return size.status();
  char header[kPackHeaderSize];
  Result<size_t> n = io.ReadAt(fd.get(), header, sizeof(header), 0);
  if (!n.ok()) return n.status();
  EPOCHFS_RETURN_IF_ERROR(CheckFileHeader(std::span<const char>(header, *n), pack_id));
  return std::unique_ptr<PackScanner>(new PackScanner(io, std::move(fd), pack_id, *size));
}

Result<std::optional<PackScanner::Entry>> PackScanner::Next() {
  while (!done_) {
    if (pos_ >= file_size_) {
      stop_reason_ = "end of pack";
      done_ = true;
      break;
    }
    if (file_size_ - pos_ < kEntryHeaderSize) {
      stop_reason_ = fmt::format("torn tail: partial header at {}", pos_);
      done_ = true;
      break;
    }
    char raw_header[kEntryHeaderSize];
    Result<size_t> n = io_.ReadAt(fd_.get(), raw_header, sizeof(raw_header), pos_);
    if (!n.ok()) return n.status();
    Result<EntryHeader> header = DecodeEntryHeader(std::span<const char>(raw_header, *n));
    if (!header.ok()) {
      stop_reason_ = fmt::format("torn tail at {}: {}", pos_, header.status().message());
      done_ = true;
      break;
    }
    if (file_size_ - pos_ < header->entry_len()) {
      stop_reason_ = fmt::format("torn tail: partial data at {}", pos_);
      done_ = true;
      break;
    }
    std::string bytes(header->entry_len(), '\0');
    std::memcpy(bytes.data(), raw_header, kEntryHeaderSize);
    n = io_.ReadAt(fd_.get(), bytes.data() + kEntryHeaderSize, header->stored_len,
                   pos_ + kEntryHeaderSize);
    if (!n.ok()) return n.status();
    if (*n < header->stored_len) {  // the file shrank under us
      stop_reason_ = fmt::format("torn tail: partial data at {}", pos_);
      done_ = true;
      break;
    }
    auto shared = std::make_shared<const std::string>(std::move(bytes));
    Result<ChunkBytes> plain = DecodeEntryData(*header, shared, kEntryHeaderSize, true);
    uint64_t offset = pos_;
    pos_ += header->entry_len();
    if (!plain.ok()) {
      ++corrupt_entries_;  // bad data behind a good header: skip just this entry
      continue;
    }
    return std::optional<Entry>(Entry{offset, *header, std::move(shared), *plain});
  }
  return std::optional<Entry>();
}

}  // namespace epochfs::cache
