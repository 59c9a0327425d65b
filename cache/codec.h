// Codec: checksums and the optional lz4 compression of chunk bytes stored in packs.
//
// An entry is stored lz4-compressed only when that saves at least a configured
// fraction of its plain size; otherwise it is stored raw, so incompressible data
// (JPEG, already-compressed shards) costs no decompression on every read. The
// checksum is always XXH3-64 of the PLAIN bytes, so it checks the decoder as well as
// the disk.
//
// Decode never trusts lengths read from disk: it checks them against each other and
// against the caller's limit before allocating or decompressing.
//
// Thread-safety: stateless functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace epochfs::cache {

enum class Codec : uint8_t { kRaw = 0, kLz4 = 1 };

// XXH3-64 of `bytes`.
uint64_t Checksum(std::span<const char> bytes);

struct Encoded {
  Codec codec = Codec::kRaw;
  // The compressed bytes when codec == kLz4; empty when kRaw (the caller stores the
  // plain bytes it already has, saving a copy).
  std::string lz4_bytes;
};

// Compresses `plain` with LZ4_compress_default and keeps the result only when it is
// at most (1 - min_saving) * plain.size() bytes.
Encoded Encode(std::span<const char> plain, double min_saving);

// Decodes `stored` (as written with `codec`) into `plain_len` bytes and checks them
// against `checksum`. Errors: kCorruption (unknown codec, inconsistent lengths, lz4
// failure, checksum mismatch); the message has no location, the caller adds it.
Result<std::string> Decode(Codec codec, std::span<const char> stored, uint32_t plain_len,
                           uint64_t checksum);

// Checks raw `stored` bytes in place (lengths and checksum) without copying them.
// Decode(kRaw, ...) is this plus a copy.
Status CheckRaw(std::span<const char> stored, uint32_t plain_len, uint64_t checksum);

// The largest stored size an lz4 entry of `plain_len` bytes can have.
uint32_t MaxStoredLen(uint32_t plain_len);

}  // namespace epochfs::cache
