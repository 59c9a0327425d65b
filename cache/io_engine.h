// IoEngine: how the cache reads source files and reads/writes its pack files.
//
// Two implementations behind one interface: io_uring (one ring per calling thread,
// created lazily; batches of reads go through it, a single read or write is a plain
// pread/pwrite, see io_engine.cc) and a pread/pwrite fallback. NewIoEngine() probes
// io_uring once and falls back, with ONE warning in the log, where the kernel refuses
// it (sysctl kernel.io_uring_disabled, seccomp, old kernel). Tests wrap an engine in
// testing/fault_io_engine.h to inject EIO, short reads, ENOSPC and flipped bytes.
//
// Conventions at this interface: Status/Result, never negative errno (liburing's
// convention stays inside io_engine.cc). Reads loop over short reads until `len`
// bytes or end of file, and resubmit EAGAIN/EINTR; a result shorter than `len`
// therefore always means end of file. Writes are all-or-error.
//
// Thread-safety: every method may be called from any thread concurrently; an
// io_uring engine gives each thread its own ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"

namespace epochfs::cache {

// One read of a batch. ReadBatch fills in `bytes_read` and `status`.
struct ReadOp {
  int fd = -1;
  void* buf = nullptr;
  size_t len = 0;
  uint64_t offset = 0;

  size_t bytes_read = 0;  // < len only at end of file
  Status status;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // Reads up to `len` bytes at `offset`; fewer only at end of file.
  virtual Result<size_t> ReadAt(int fd, void* buf, size_t len, uint64_t offset) = 0;

  // Performs all `ops`, submitted together where the engine can (one io_uring_enter
  // for a whole batch), each with its own result. Returns Ok when every op succeeded,
  // else the first failed op's status.
  virtual Status ReadBatch(std::span<ReadOp> ops) = 0;

  // Writes all `len` bytes at `offset`, or fails (kNoSpace for ENOSPC/EDQUOT).
  virtual Status WriteAt(int fd, const void* buf, size_t len, uint64_t offset) = 0;

  // fdatasync(fd).
  virtual Status DataSync(int fd) = 0;

  // Whether reads go through io_uring (reported in CacheStats::io_uring).
  virtual bool is_io_uring() const = 0;
};

// The pread/pwrite engine.
std::unique_ptr<IoEngine> NewPreadIoEngine();

// An io_uring engine, or why there cannot be one (kUnsupported, kPermission).
Result<std::unique_ptr<IoEngine>> NewIoUringIoEngine();

// io_uring when `prefer_io_uring` and the kernel allows it, else pread (logged once
// per process).
std::unique_ptr<IoEngine> NewIoEngine(bool prefer_io_uring);

}  // namespace epochfs::cache
