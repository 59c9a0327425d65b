// FaultInjectingIoEngine: an IoEngine that wraps a real one and misbehaves on
// request, so tests can show what the cache does with EIO, short reads, ENOSPC and
// flipped bits without waiting for a bad disk.
//
// Thread-safety: all methods are thread-safe; faults may be armed while other
// threads do IO.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/thread_annotations.h"
#include "cache/io_engine.h"

namespace epochfs::cache::testing {

class FaultInjectingIoEngine final : public IoEngine {
 public:
  explicit FaultInjectingIoEngine(std::shared_ptr<IoEngine> base) : base_(std::move(base)) {}

  // The n-th read from now on (1 = the next one) fails with `err`.
  void FailNthRead(uint64_t n, int err = EIO);
  // Every read returns at most `max_bytes` bytes (as if the file ended there);
  // 0 removes the limit.
  void SetMaxReadBytes(size_t max_bytes) { max_read_bytes_ = max_bytes; }
  // Flips one bit in the middle of the data returned by each of the next `count` reads.
  void FlipBitInNextReads(uint64_t count) { flips_left_ = count; }
  // Writes fail with `err` (ENOSPC, EIO, ...) until called with 0.
  void FailWrites(int err) { write_errno_ = err; }
  // fdatasync fails with `err` until called with 0.
  void FailSyncs(int err) { sync_errno_ = err; }

  uint64_t reads() const { return reads_; }
  uint64_t writes() const { return writes_; }
  uint64_t failed_writes() const { return failed_writes_; }

  Result<size_t> ReadAt(int fd, void* buf, size_t len, uint64_t offset) override;
  Status ReadBatch(std::span<ReadOp> ops) override;
  Status WriteAt(int fd, const void* buf, size_t len, uint64_t offset) override;
  Status DataSync(int fd) override;
  bool is_io_uring() const override { return base_->is_io_uring(); }

 private:
  std::shared_ptr<IoEngine> base_;
  Mutex mu_;
  uint64_t fail_read_at_ GUARDED_BY(mu_) = 0;  // absolute read number, 0 = none
  int fail_read_errno_ GUARDED_BY(mu_) = 0;
  std::atomic<size_t> max_read_bytes_{0};
  std::atomic<uint64_t> flips_left_{0};
  std::atomic<int> write_errno_{0};
  std::atomic<int> sync_errno_{0};
  std::atomic<uint64_t> reads_{0}, writes_{0}, failed_writes_{0};
};

}  // namespace epochfs::cache::testing
