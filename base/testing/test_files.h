// Test helpers every module's tests share: a temporary directory that removes itself,
// whole-file reads and writes, and file contents (incompressible and compressible).
// Test-only: linked into test binaries, never into a production target.
//
// Thread-safety: TempDir is not thread-safe; the content generators are pure.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace epochfs::testing {

// A fresh directory under /tmp, removed (recursively) on destruction. A mount left
// inside it (a test that failed before unmounting) is detached first, so removal
// never recurses into a mounted source.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes `bytes` to path()/rel, making parent folders; returns the full path.
  std::string Write(const std::string& rel, const std::string& bytes) const;
  // Makes path()/rel and its parents; returns the full path.
  std::string Mkdir(const std::string& rel) const;

 private:
  std::filesystem::path path_;
};

// Replaces `path` with `content`; throws on failure.
void WriteFile(const std::filesystem::path& path, const std::string& content);
// The whole file; throws if it cannot be opened.
std::string ReadFile(const std::filesystem::path& path);

// `n` pseudo-random (incompressible, like JPEG) bytes.
std::string RandomBytes(size_t n, uint64_t seed);
// `n` bytes of repetitive text (lz4 shrinks it a lot, like CSV labels).
std::string TextBytes(size_t n, uint64_t seed);

// Whether `path` is a mountpoint now (/proc/self/mountinfo).
bool IsMounted(const std::filesystem::path& path);

}  // namespace epochfs::testing
