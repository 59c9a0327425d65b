// Explicit little- and big-endian encoding of integers for the on-disk formats
// (pack entries are little-endian; index keys are big-endian so that they sort by
// (dev, ino, chunk)). No struct is ever memcpy'd to disk: padding and host byte
// order must not leak into the format.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace epochfs::cache::byte_order {

inline void PutLe(char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline uint64_t GetLe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}
inline void PutBe(char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out[i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xff);
  }
}
inline uint64_t GetBe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

inline void PutLe16(char* out, uint16_t v) { PutLe(out, v, 2); }
inline void PutLe32(char* out, uint32_t v) { PutLe(out, v, 4); }
inline void PutLe64(char* out, uint64_t v) { PutLe(out, v, 8); }
inline uint16_t GetLe16(const char* in) { return static_cast<uint16_t>(GetLe(in, 2)); }
inline uint32_t GetLe32(const char* in) { return static_cast<uint32_t>(GetLe(in, 4)); }
inline uint64_t GetLe64(const char* in) { return GetLe(in, 8); }

}  // namespace epochfs::cache::byte_order
