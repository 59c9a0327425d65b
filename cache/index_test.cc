#include "cache/index.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cache/testing/test_files.h"

namespace epochfs::cache {
namespace {

using testing::TempDir;

IndexRecord Record(uint32_t pack, uint64_t offset) {
  return IndexRecord{.pack_id = pack,
                     .offset = offset,
                     .stored_len = 100,
                     .plain_len = 200,
                     .codec = Codec::kLz4,
                     .checksum = 0x1234,
                     .size = 5000,
                     .mtime_ns = -7,
                     .ctime_ns = 9};
}

TEST(IndexTest, KeysSortByDevInoChunk) {
  // Big-endian: bytewise order equals numeric order, so a file's chunks are a range.
  EXPECT_LT(EncodeIndexKey({1, 2, 0xffffffff}), EncodeIndexKey({1, 3, 0}));
  EXPECT_LT(EncodeIndexKey({1, 0xffffffffffffffff, 0}), EncodeIndexKey({2, 0, 0}));
  EXPECT_LT(EncodeIndexKey({1, 2, 255}), EncodeIndexKey({1, 2, 256}));
  EXPECT_EQ(EncodeIndexKey({1, 2, 3}).size(), 21u);
  EXPECT_EQ(DecodeIndexKey(EncodeIndexKey({1, 2, 3})), (ChunkKey{1, 2, 3}));
  EXPECT_EQ(DecodeIndexValue(EncodeIndexValue(Record(4, 5))), Record(4, 5));
  EXPECT_FALSE(DecodeIndexValue("short"));
}

TEST(IndexTest, PutGetDeleteAndDeleteFile) {
  TempDir dir;
  Result<std::unique_ptr<Index>> index = Index::Open(dir / "index");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  Index& db = **index;
  EXPECT_TRUE(db.Empty());
  EXPECT_FALSE(db.recreated());

  IndexBatch batch;
  for (uint32_t c = 0; c < 5; ++c) batch.Put({1, 42, c}, Record(1, c * 1000));
  batch.Put({1, 41, 0}, Record(2, 0));
  batch.Put({1, 43, 0}, Record(2, 500));
  ASSERT_TRUE(db.Write(batch).ok());
  EXPECT_FALSE(db.Empty());

  Result<std::optional<IndexRecord>> got = db.Get({1, 42, 3});
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(*got);
  EXPECT_EQ(**got, Record(1, 3000));
  EXPECT_FALSE(*db.Get({1, 42, 5}));

  ASSERT_TRUE(db.Delete({1, 42, 0}).ok());
  EXPECT_FALSE(*db.Get({1, 42, 0}));

  auto deleted = db.DeleteFile(1, 42);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->size(), 4u);  // chunks 1..4
  for (uint32_t c = 0; c < 5; ++c) EXPECT_FALSE(*db.Get({1, 42, c}));
  // The neighbours on either side of the prefix survive.
  EXPECT_TRUE(*db.Get({1, 41, 0}));
  EXPECT_TRUE(*db.Get({1, 43, 0}));

  int seen = 0;
  ASSERT_TRUE(db.ForEach([&](const ChunkKey&, const IndexRecord& r) {
                  EXPECT_EQ(r.pack_id, 2u);
                  ++seen;
                  return true;
                }).ok());
  EXPECT_EQ(seen, 2);
}

TEST(IndexTest, InitialisedMarkerIsNotARecord) {
  TempDir dir;
  {
    auto index = Index::Open(dir / "index");
    ASSERT_TRUE(index.ok());
    EXPECT_FALSE((*index)->initialised());
    ASSERT_TRUE((*index)->MarkInitialised().ok());
    EXPECT_TRUE((*index)->Empty());
    int records = 0;
    ASSERT_TRUE((*index)
                    ->ForEach([&](const ChunkKey&, const IndexRecord&) {
                      ++records;
                      return true;
                    })
                    .ok());
    EXPECT_EQ(records, 0);
  }
  auto index = Index::Open(dir / "index");
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE((*index)->initialised());
}

TEST(IndexTest, RecordsSurviveReopen) {
  TempDir dir;
  {
    auto index = Index::Open(dir / "index");
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE((*index)->Put({3, 4, 5}, Record(6, 7)).ok());
  }
  auto index = Index::Open(dir / "index");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(**(*index)->Get({3, 4, 5}), Record(6, 7));
}

TEST(IndexTest, SecondOpenOfTheSameIndexIsBusy) {
  TempDir dir;
  auto first = Index::Open(dir / "index");
  ASSERT_TRUE(first.ok());
  auto second = Index::Open(dir / "index");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kBusy) << second.status().ToString();
}

TEST(IndexTest, CorruptIndexIsMovedAsideAndRecreated) {
  TempDir dir;
  {
    auto index = Index::Open(dir / "index");
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE((*index)->Put({3, 4, 5}, Record(6, 7)).ok());
  }
  // Point CURRENT at a manifest that does not exist.
  {
    std::ofstream current(dir / "index" / "CURRENT", std::ios::trunc);
    current << "MANIFEST-999999\n";
  }
  auto index = Index::Open(dir / "index");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_TRUE((*index)->recreated());
  EXPECT_FALSE((*index)->initialised());
  EXPECT_TRUE((*index)->Empty());
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    aside += e.path().filename().string().starts_with("index.corrupt-");
  }
  EXPECT_EQ(aside, 1);
}

TEST(IndexTest, GarbageManifestIsMovedAsideToo) {
  TempDir dir;
  {
    auto index = Index::Open(dir / "index");
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE((*index)->Put({3, 4, 5}, Record(6, 7)).ok());
  }
  for (const auto& e : std::filesystem::directory_iterator(dir / "index")) {
    if (e.path().filename().string().starts_with("MANIFEST-")) {
      std::ofstream garbage(e.path(), std::ios::trunc | std::ios::binary);
      garbage << std::string(4096, '\x5a');
    }
  }
  auto index = Index::Open(dir / "index");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_TRUE((*index)->recreated());
  EXPECT_FALSE(*(*index)->Get({3, 4, 5}));
}

}  // namespace
}  // namespace epochfs::cache
