#include "cache/codec.h"

#include <fmt/format.h>
#include <lz4.h>
#include <xxhash.h>
#if EPOCHFS_HAVE_XXH3_DISPATCH
// Makes XXH3_64bits the library's run-time dispatch: the widest vector unit the CPU has,
// the same hash (docs/benchmarks.md, "Checksums with the CPU's vector unit").
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cmath>

namespace epochfs::cache {

uint64_t Checksum(std::span<const char> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

Encoded Encode(std::span<const char> plain, double min_saving) {
  Encoded out;
  if (plain.empty() || plain.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) return out;
  // Give lz4 only as much room as a worthwhile result needs: it gives up (returns 0)
  // as soon as the output would not fit, so incompressible data costs little.
  double keep = std::floor(static_cast<double>(plain.size()) * (1.0 - min_saving));
  if (keep < 1.0) return out;
  int capacity = static_cast<int>(keep);
  out.lz4_bytes.resize(static_cast<size_t>(capacity));
  int n = LZ4_compress_default(plain.data(), out.lz4_bytes.data(), static_cast<int>(plain.size()),
                               capacity);
  if (n <= 0) {
    out.lz4_bytes.clear();
    out.lz4_bytes.shrink_to_fit();
    return out;
  }
  out.lz4_bytes.resize(static_cast<size_t>(n));
  out.lz4_bytes.shrink_to_fit();
  out.codec = Codec::kLz4;
  return out;
}

uint32_t MaxStoredLen(uint32_t plain_len) {
  int bound = LZ4_compressBound(static_cast<int>(plain_len));
  if (bound <= 0) return plain_len;
  return std::max<uint32_t>(plain_len, static_cast<uint32_t>(bound));
}

Status CheckRaw(std::span<const char> stored, uint32_t plain_len, uint64_t checksum) {
  if (stored.size() != plain_len) {
    return Status::Corruption(
        fmt::format("raw entry: stored {} bytes, header says {}", stored.size(), plain_len));
  }
  if (Checksum(stored) != checksum) return Status::Corruption("checksum mismatch");
  return Status::Ok();
}

Result<std::string> Decode(Codec codec, std::span<const char> stored, uint32_t plain_len,
                           uint64_t checksum) {
  std::string plain;
  switch (codec) {
    case Codec::kRaw:
      EPOCHFS_RETURN_IF_ERROR(CheckRaw(stored, plain_len, checksum));
      return std::string(stored.data(), stored.size());
    case Codec::kLz4: {
      if (plain_len > static_cast<uint32_t>(LZ4_MAX_INPUT_SIZE) ||
          stored.size() > MaxStoredLen(plain_len)) {
        return Status::Corruption(
            fmt::format("lz4 entry: implausible lengths {} -> {}", stored.size(), plain_len));
      }
      plain.resize(plain_len);
      int n = LZ4_decompress_safe(stored.data(), plain.data(), static_cast<int>(stored.size()),
                                  static_cast<int>(plain_len));
      if (n < 0 || static_cast<uint32_t>(n) != plain_len) {
        return Status::Corruption(
            fmt::format("lz4 entry: decoded {} bytes, header says {}", n, plain_len));
      }
      break;
    }
    default:
      return Status::Corruption(fmt::format("unknown codec {}", static_cast<int>(codec)));
  }
  if (Checksum(plain) != checksum) return Status::Corruption("checksum mismatch");
  return plain;
}

}  // namespace epochfs::cache
