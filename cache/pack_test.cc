#include "cache/pack.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "cache/testing/test_files.h"

namespace epochfs::cache {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using testing::TextBytes;

struct Written {
  uint64_t offset;
  EntryHeader header;
  std::string plain;
};

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override { io_ = NewPreadIoEngine(); }

  std::filesystem::path PackPath(uint32_t id) const { return dir_.path() / PackFileName(id); }

  // Writes entries of alternating compressible and random content into pack `id`.
  std::vector<Written> WritePack(uint32_t id, int entries) {
    Result<std::unique_ptr<PackWriter>> writer = PackWriter::Create(*io_, dir_.path(), id);
    EXPECT_TRUE(writer.ok()) << writer.status().ToString();
    std::vector<Written> out;
    for (int i = 0; i < entries; ++i) {
      std::string plain = i % 2 == 0 ? TextBytes(5000 + i * 100, i) : RandomBytes(3000 + i, i);
      Encoded enc = Encode(plain, 0.125);
      std::string_view stored =
          enc.codec == Codec::kLz4 ? std::string_view(enc.lz4_bytes) : std::string_view(plain);
      EntryHeader h{.codec = enc.codec,
                    .stored_len = static_cast<uint32_t>(stored.size()),
                    .plain_len = static_cast<uint32_t>(plain.size()),
                    .key = ChunkKey{7, 1000u + i, static_cast<uint32_t>(i % 3)},
                    .size = plain.size(),
                    .mtime_ns = 111 + i,
                    .ctime_ns = 222 + i,
                    .checksum = Checksum(plain)};
      Result<uint64_t> off = (*writer)->Append(h, stored);
      EXPECT_TRUE(off.ok());
      out.push_back(Written{*off, h, plain});
    }
    EXPECT_TRUE((*writer)->Sync().ok());
    return out;
  }

  std::vector<PackScanner::Entry> ScanAll(uint32_t id, std::string* stop_reason = nullptr) {
    Result<std::unique_ptr<PackScanner>> scanner = PackScanner::Open(*io_, PackPath(id), id);
    EXPECT_TRUE(scanner.ok()) << scanner.status().ToString();
    std::vector<PackScanner::Entry> out;
    for (;;) {
      Result<std::optional<PackScanner::Entry>> next = (*scanner)->Next();
      EXPECT_TRUE(next.ok());
      if (!next.ok() || !*next) break;
      out.push_back(std::move(**next));
    }
    if (stop_reason) *stop_reason = (*scanner)->stop_reason();
    return out;
  }

  TempDir dir_;
  std::unique_ptr<IoEngine> io_;
  BufferPool buffers_{1 << 20};
};

TEST_F(PackTest, FileNames) {
  EXPECT_EQ(PackFileName(12), "pack-000012.epk");
  EXPECT_EQ(PackFileName(12345678), "pack-12345678.epk");
  EXPECT_EQ(ParsePackFileName("pack-000012.epk"), 12u);
  EXPECT_EQ(ParsePackFileName("pack-12345678.epk"), 12345678u);
  EXPECT_FALSE(ParsePackFileName("pack-12.epk"));
  EXPECT_FALSE(ParsePackFileName("pack-00001x.epk"));
  EXPECT_FALSE(ParsePackFileName("pack-000012.epk.tmp"));
}

TEST_F(PackTest, EntryHeaderRoundTripAndDamageDetection) {
  EntryHeader h{.codec = Codec::kLz4,
                .stored_len = 10,
                .plain_len = 20,
                .key = ChunkKey{1, 2, 3},
                .size = 4,
                .mtime_ns = -5,
                .ctime_ns = 6,
                .checksum = 0xdeadbeefcafef00dull};
  char buf[kEntryHeaderSize];
  EncodeEntryHeader(h, buf);
  // Little-endian, field by field: the magic's first byte and the key's dev.
  EXPECT_EQ(std::string(buf, 4), "EPCE");
  EXPECT_EQ(buf[16], 1);
  Result<EntryHeader> back = DecodeEntryHeader(std::span<const char>(buf, sizeof(buf)));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->key, h.key);
  EXPECT_EQ(back->mtime_ns, -5);
  EXPECT_EQ(back->checksum, h.checksum);
  for (size_t i : {0, 5, 9, 20, 50, 70, 73}) {
    char damaged[kEntryHeaderSize];
    std::memcpy(damaged, buf, sizeof(buf));
    damaged[i] ^= 0x40;
    EXPECT_FALSE(DecodeEntryHeader(std::span<const char>(damaged, sizeof(damaged))).ok()) << i;
  }
  // A header with a valid checksum but absurd lengths is refused too.
  h.codec = Codec::kRaw;
  EncodeEntryHeader(h, buf);  // raw with stored != plain
  EXPECT_FALSE(DecodeEntryHeader(std::span<const char>(buf, sizeof(buf))).ok());
  h.stored_len = h.plain_len = kMaxEntryPlainLen + 1;
  EncodeEntryHeader(h, buf);
  EXPECT_FALSE(DecodeEntryHeader(std::span<const char>(buf, sizeof(buf))).ok());
}

TEST_F(PackTest, WriteThenReadEveryEntry) {
  std::vector<Written> written = WritePack(12, 20);
  Result<std::shared_ptr<PackReader>> reader = PackReader::Open(*io_, PackPath(12), 12, buffers_);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  int lz4 = 0;
  for (const Written& w : written) {
    Result<ChunkBytes> bytes = (*reader)->ReadEntry(w.offset, w.header.stored_len, w.header.key);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(std::string(bytes->data, bytes->size), w.plain);
    lz4 += w.header.codec == Codec::kLz4;
  }
  EXPECT_EQ(lz4, 10);  // the text entries
  // The wrong key at a right offset is not served.
  const Written& w = written[3];
  Result<ChunkBytes> wrong = (*reader)->ReadEntry(w.offset, w.header.stored_len, ChunkKey{7, 1, 0});
  EXPECT_EQ(wrong.status().code(), Code::kCorruption);
  // A pack opened under another id is refused.
  EXPECT_FALSE(PackReader::Open(*io_, PackPath(12), 13, buffers_).ok());
}

// With O_DIRECT, a raw entry is served from the aligned buffer it was read into (no
// second copy), and the bytes it keeps alive are counted whole: header, alignment and all.
TEST_F(PackTest, DirectReadOfRawEntrySharesItsBufferAndCountsIt) {
  std::vector<Written> written = WritePack(12, 6);
  Result<std::shared_ptr<PackReader>> reader = PackReader::Open(*io_, PackPath(12), 12, buffers_);
  ASSERT_TRUE(reader.ok());
  if ((*reader)->direct_fd() < 0) GTEST_SKIP() << "the test dir's filesystem refuses O_DIRECT";
  for (const Written& w : written) {
    Result<ChunkBytes> bytes = (*reader)->ReadEntry(w.offset, w.header.stored_len, w.header.key);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(std::string(bytes->data, bytes->size), w.plain);
    if (w.header.codec == Codec::kRaw) {
      EXPECT_GE(bytes->footprint(), kEntryHeaderSize + w.plain.size());  // the read buffer
      EXPECT_LE(bytes->footprint(),
                kEntryHeaderSize + w.plain.size() + 2 * kDirectIoAlignment + BufferPool::kSlack);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes->data - kEntryHeaderSize) % kDirectIoAlignment,
                (w.offset % kDirectIoAlignment));
    } else {
      EXPECT_LT(bytes->footprint(), w.plain.size() + kEntryHeaderSize);  // decoded: its own copy
    }
  }
}

TEST_F(PackTest, FlippedDataByteIsCorruptionWithLocation) {
  std::vector<Written> written = WritePack(12, 4);
  const Written& victim = written[1];  // random bytes: stored raw
  ASSERT_EQ(victim.header.codec, Codec::kRaw);
  {
    std::fstream f(PackPath(12), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(victim.offset + kEntryHeaderSize + 100));
    char c = static_cast<char>(victim.plain[100] ^ 0x01);
    f.write(&c, 1);
  }
  Result<std::shared_ptr<PackReader>> reader = PackReader::Open(*io_, PackPath(12), 12, buffers_);
  ASSERT_TRUE(reader.ok());
  Result<ChunkBytes> bytes =
      (*reader)->ReadEntry(victim.offset, victim.header.stored_len, victim.header.key);
  ASSERT_EQ(bytes.status().code(), Code::kCorruption);
  EXPECT_EQ(bytes.status().message(),
            "pack 12 offset " + std::to_string(victim.offset) + ": checksum mismatch");
  // The scanner skips just that entry and counts it.
  Result<std::unique_ptr<PackScanner>> scanner = PackScanner::Open(*io_, PackPath(12), 12);
  ASSERT_TRUE(scanner.ok());
  int found = 0;
  while (true) {
    auto next = (*scanner)->Next();
    ASSERT_TRUE(next.ok());
    if (!*next) break;
    EXPECT_NE((*next)->offset, victim.offset);
    ++found;
  }
  EXPECT_EQ(found, 3);
  EXPECT_EQ((*scanner)->corrupt_entries(), 1u);
}

TEST_F(PackTest, ScannerReturnsEveryEntryInOrder) {
  std::vector<Written> written = WritePack(3, 15);
  std::string reason;
  std::vector<PackScanner::Entry> scanned = ScanAll(3, &reason);
  ASSERT_EQ(scanned.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(scanned[i].offset, written[i].offset);
    EXPECT_EQ(scanned[i].header.key, written[i].header.key);
    EXPECT_EQ(std::string(scanned[i].plain.data, scanned[i].plain.size), written[i].plain);
    EXPECT_EQ(scanned[i].bytes->size(), written[i].header.entry_len());
  }
  EXPECT_EQ(reason, "end of pack");
}

TEST_F(PackTest, ScannerStopsAtTornTailMidData) {
  std::vector<Written> written = WritePack(3, 6);
  const Written& last = written.back();
  std::filesystem::resize_file(PackPath(3), last.offset + kEntryHeaderSize + 10);
  std::string reason;
  std::vector<PackScanner::Entry> scanned = ScanAll(3, &reason);
  EXPECT_EQ(scanned.size(), 5u);
  EXPECT_NE(reason.find("torn tail: partial data"), std::string::npos) << reason;
}

TEST_F(PackTest, ScannerStopsAtTornTailMidHeader) {
  std::vector<Written> written = WritePack(3, 6);
  std::filesystem::resize_file(PackPath(3), written.back().offset + 30);
  std::string reason;
  EXPECT_EQ(ScanAll(3, &reason).size(), 5u);
  EXPECT_NE(reason.find("partial header"), std::string::npos) << reason;
}

TEST_F(PackTest, ScannerStopsAtGarbageTail) {
  WritePack(3, 6);
  {
    std::ofstream f(PackPath(3), std::ios::binary | std::ios::app);
    std::string garbage = RandomBytes(5000, 99);
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  std::string reason;
  EXPECT_EQ(ScanAll(3, &reason).size(), 6u);
  EXPECT_NE(reason.find("torn tail"), std::string::npos) << reason;
}

TEST_F(PackTest, ScannerStopsAtBadHeader) {
  std::vector<Written> written = WritePack(3, 6);
  {
    std::fstream f(PackPath(3), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(written[4].offset + 12));  // plain_len
    f.put('\x7f');
  }
  std::string reason;
  EXPECT_EQ(ScanAll(3, &reason).size(), 4u);
  EXPECT_NE(reason.find("entry header checksum mismatch"), std::string::npos) << reason;
}

TEST_F(PackTest, FindEntriesInAWindowThatStartsMidEntry) {
  std::vector<Written> written = WritePack(5, 10);
  std::string all = testing::ReadFile(PackPath(5));
  // A window from the middle of entry 2 to the middle of entry 8.
  const uint64_t from = written[2].offset + 40;
  const uint64_t to = written[8].offset + 100;
  std::vector<FoundEntry> found =
      FindEntries(std::span<const char>(all).subspan(from, to - from), from);
  ASSERT_EQ(found.size(), 5u);  // entries 3..7 are complete
  for (size_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(found[i].offset, written[3 + i].offset);
    EXPECT_EQ(found[i].header.key, written[3 + i].header.key);
  }
}

TEST_F(PackTest, WriterRefusesToReuseAnExistingPack) {
  WritePack(9, 1);
  Result<std::unique_ptr<PackWriter>> again = PackWriter::Create(*io_, dir_.path(), 9);
  EXPECT_FALSE(again.ok());
}

}  // namespace
}  // namespace epochfs::cache
