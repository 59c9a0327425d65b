#include "cache/testing/fault_io_engine.h"

#include <fmt/format.h>

namespace epochfs::cache::testing {

void FaultInjectingIoEngine::FailNthRead(uint64_t n, int err) {
  MutexLock lock(mu_);
  fail_read_at_ = reads_ + n;
  fail_read_errno_ = err;
}

Result<size_t> FaultInjectingIoEngine::ReadAt(int fd, void* buf, size_t len, uint64_t offset) {
  const uint64_t number = ++reads_;
  {
    MutexLock lock(mu_);
    if (number == fail_read_at_) {
      return Status::FromErrno(fail_read_errno_,
                               fmt::format("injected read fault fd {} offset {}", fd, offset));
    }
  }
  const size_t limit = max_read_bytes_;
  if (limit != 0 && len > limit) len = limit;
  Result<size_t> n = base_->ReadAt(fd, buf, len, offset);
  if (n.ok() && *n > 0) {
    uint64_t left = flips_left_;
    while (left > 0 && !flips_left_.compare_exchange_weak(left, left - 1)) {
    }
    if (left > 0) static_cast<char*>(buf)[*n / 2] ^= 0x10;
  }
  return n;
}

Status FaultInjectingIoEngine::ReadBatch(std::span<ReadOp> ops) {
  Status first;
  for (ReadOp& op : ops) {
    Result<size_t> n = ReadAt(op.fd, op.buf, op.len, op.offset);
    op.status = n.status();
    op.bytes_read = n.ok() ? *n : 0;
    if (!n.ok() && first.ok()) first = n.status();
  }
  return first;
}

Status FaultInjectingIoEngine::WriteAt(int fd, const void* buf, size_t len, uint64_t offset) {
  ++writes_;
  if (int err = write_errno_; err != 0) {
    ++failed_writes_;
    return Status::FromErrno(err, fmt::format("injected write fault fd {} offset {}", fd, offset));
  }
  return base_->WriteAt(fd, buf, len, offset);
}

Status FaultInjectingIoEngine::DataSync(int fd) {
  if (int err = sync_errno_; err != 0) {
    return Status::FromErrno(err, fmt::format("injected fdatasync fault fd {}", fd));
  }
  return base_->DataSync(fd);
}

}  // namespace epochfs::cache::testing
