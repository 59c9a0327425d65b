#include "cache/codec.h"

#include <gtest/gtest.h>

#include "cache/testing/test_files.h"

namespace epochfs::cache {
namespace {

using testing::RandomBytes;
using testing::TextBytes;

TEST(CodecTest, CompressibleTextIsStoredLz4AndRoundTrips) {
  const std::string plain = TextBytes(200'000, 1);
  Encoded e = Encode(plain, 1.0 / 8.0);
  ASSERT_EQ(e.codec, Codec::kLz4);
  EXPECT_LT(e.lz4_bytes.size(), plain.size() / 2);
  Result<std::string> back =
      Decode(Codec::kLz4, e.lz4_bytes, static_cast<uint32_t>(plain.size()), Checksum(plain));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, plain);
}

TEST(CodecTest, RandomBytesStayRaw) {
  const std::string plain = RandomBytes(100'000, 2);
  Encoded e = Encode(plain, 1.0 / 8.0);
  EXPECT_EQ(e.codec, Codec::kRaw);
  EXPECT_TRUE(e.lz4_bytes.empty());
  Result<std::string> back =
      Decode(Codec::kRaw, plain, static_cast<uint32_t>(plain.size()), Checksum(plain));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, plain);
}

TEST(CodecTest, MinimumSavingIsHonoured) {
  // Half random, half text: lz4 saves somewhere between 30% and 50%.
  const std::string plain = RandomBytes(50'000, 3) + TextBytes(50'000, 3);
  Encoded loose = Encode(plain, 0.2);
  ASSERT_EQ(loose.codec, Codec::kLz4);
  const double saving = 1.0 - static_cast<double>(loose.lz4_bytes.size()) / plain.size();
  EXPECT_GE(saving, 0.2);
  // Asking for more than lz4 achieves keeps the bytes raw.
  Encoded strict = Encode(plain, saving + 0.05);
  EXPECT_EQ(strict.codec, Codec::kRaw);
  // A saving of 0 accepts any compression that is not larger than the input.
  EXPECT_EQ(Encode(TextBytes(1000, 4), 0.0).codec, Codec::kLz4);
}

TEST(CodecTest, ChecksumMismatchIsCorruption) {
  const std::string plain = TextBytes(10'000, 5);
  Encoded e = Encode(plain, 0.125);
  ASSERT_EQ(e.codec, Codec::kLz4);
  Result<std::string> bad =
      Decode(Codec::kLz4, e.lz4_bytes, static_cast<uint32_t>(plain.size()), Checksum(plain) ^ 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorruption);

  std::string flipped = plain;
  flipped[5000] ^= 1;
  Status raw = CheckRaw(flipped, static_cast<uint32_t>(flipped.size()), Checksum(plain));
  EXPECT_EQ(raw.code(), Code::kCorruption);
  EXPECT_NE(raw.message().find("checksum mismatch"), std::string::npos);
}

TEST(CodecTest, LengthsFromDiskAreNotTrusted) {
  const std::string plain = TextBytes(10'000, 6);
  Encoded e = Encode(plain, 0.125);
  ASSERT_EQ(e.codec, Codec::kLz4);
  // A plain length that disagrees with the stream fails instead of over-reading.
  EXPECT_EQ(Decode(Codec::kLz4, e.lz4_bytes, 9'999, Checksum(plain)).status().code(),
            Code::kCorruption);
  EXPECT_EQ(Decode(Codec::kLz4, e.lz4_bytes, 20'000, Checksum(plain)).status().code(),
            Code::kCorruption);
  // Truncated compressed bytes.
  std::string truncated = e.lz4_bytes.substr(0, e.lz4_bytes.size() / 2);
  EXPECT_FALSE(Decode(Codec::kLz4, truncated, 10'000, Checksum(plain)).ok());
  // Raw with a wrong length, and an unknown codec.
  EXPECT_FALSE(Decode(Codec::kRaw, plain, 9'000, Checksum(plain)).ok());
  EXPECT_FALSE(Decode(static_cast<Codec>(7), plain, 10'000, Checksum(plain)).ok());
}

// The checksum is stored in every pack entry: it must be XXH3-64 whatever code computes
// it (the library's run-time dispatch to AVX2 or AVX-512, or its SSE2 build), or packs
// written by one build would read as corrupt in another. Reference values from
// XXH3_64bits of libxxhash 0.8.1's plain build, for lengths on each of XXH3's paths
// (0, 1-16, 17-128, 129-240, and long inputs, with and without a partial stripe).
TEST(CodecTest, ChecksumIsXxh3OfEveryLength) {
  const std::pair<size_t, uint64_t> reference[] = {
      {0, 0x2d06800538d394c2ULL},      {1, 0x4c5cca45d0f4811fULL},
      {16, 0x86abf6baccea0858ULL},     {17, 0xb58bf5dc5022d071ULL},
      {128, 0x10d17f72c0ccba41ULL},    {129, 0x1648bdc3db49d1a2ULL},
      {240, 0xb6cfaf343fab81e6ULL},    {241, 0x956cae592c67279eULL},
      {1024, 0x70bd377d9574f4bbULL},   {110000, 0x6232b50b02e6c76cULL},
      {1 << 20, 0x6f7c82505ffbc516ULL},
  };
  for (const auto& [len, want] : reference) {
    std::string bytes(len, '\0');
    for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<char>((i * 131 + 7) & 0xff);
    EXPECT_EQ(Checksum(bytes), want) << len << " bytes";
  }
}

}  // namespace
}  // namespace epochfs::cache
