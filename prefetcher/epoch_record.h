// EpochRecord: what the prefetcher remembers across a daemon restart, in one small
// file under the cache dir: every file it has seen (dev, ino, relative path, in
// first-seen order) and the last complete epoch's order (indices into that list).
// With it a restarted daemon recognises a replayed order in its first epoch and can
// keep the RAM tier filled with unread files (which needs the list of all files)
// without first watching a whole epoch.
//
// Why a file and not the cache's RocksDB: the index is private to cache/ and its
// recovery scans every key as a chunk key; this record is rewritten whole once per
// epoch (write to a temporary, fsync, rename), so a crash leaves the old or the new one.
// Format: text, "epochfs-epochs 1", "files N", N lines "dev ino path", "order M", M
// lines of indices, then optionally "pattern NAME" (the pattern that epoch was read in;
// a restarted daemon predicts it before it has seen an access, and so starts streaming
// the SSD tier into RAM at mount). Paths holding a newline are left out.
//
// Thread-safety: none; pure functions on values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "prefetcher/prefetcher.h"

namespace epochfs::prefetch {

struct EpochRecord {
  std::vector<std::pair<FileKey, std::string>> files;
  std::vector<uint32_t> order;  // indices into files
  Pattern pattern = Pattern::kUnknown;  // how `order` was read
};

Status SaveEpochRecord(const std::filesystem::path& path, const EpochRecord& record);
// kNotFound when there is none; kCorruption when it cannot be parsed (then ignore it).
Result<EpochRecord> LoadEpochRecord(const std::filesystem::path& path);

}  // namespace epochfs::prefetch
