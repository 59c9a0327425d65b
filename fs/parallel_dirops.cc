#include "fs/parallel_dirops.h"

#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <vector>

namespace epochfs::fs {
namespace {

// The INIT request in flight, if any: its id (0: none) and whether the kernel offered
// parallel directory operations. INIT is the first request on a connection and the
// kernel sends no other before it is answered; a daemon runs one session, so one slot
// is enough.
std::atomic<uint64_t> init_unique{0};
std::atomic<bool> init_offered{false};
std::atomic<bool> granted{false};

ssize_t ReadRequest(int fd, void* buf, size_t len, void* /*userdata*/) {
  const ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + offsetof(fuse_init_in, flags) +
                                sizeof(uint32_t))) {
    fuse_in_header header;
    std::memcpy(&header, buf, sizeof(header));
    if (header.opcode == FUSE_INIT) {
      fuse_init_in init;
      std::memset(&init, 0, sizeof(init));
      std::memcpy(&init, static_cast<const char*>(buf) + sizeof(header),
                  std::min(sizeof(init), static_cast<size_t>(n) - sizeof(header)));
      init_offered.store((init.flags & FUSE_PARALLEL_DIROPS) != 0);
      init_unique.store(header.unique);
    }
  }
  return n;
}

ssize_t WriteReply(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  const uint64_t unique = init_unique.load(std::memory_order_relaxed);
  if (unique == 0 || count < 2 || iov[0].iov_len != sizeof(fuse_out_header)) {
    return ::writev(fd, iov, count);
  }
  fuse_out_header header;
  std::memcpy(&header, iov[0].iov_base, sizeof(header));
  constexpr size_t kFlagsEnd = offsetof(fuse_init_out, flags) + sizeof(uint32_t);
  if (header.unique != unique || header.error != 0 || iov[1].iov_len < kFlagsEnd) {
    return ::writev(fd, iov, count);
  }
  init_unique.store(0);
  if (!init_offered.load()) return ::writev(fd, iov, count);
  // A copy of the reply's body with the flag added; libfuse's own buffer is left alone.
  std::vector<char> body(static_cast<const char*>(iov[1].iov_base),
                         static_cast<const char*>(iov[1].iov_base) + iov[1].iov_len);
  uint32_t flags;
  std::memcpy(&flags, body.data() + offsetof(fuse_init_out, flags), sizeof(flags));
  flags |= FUSE_PARALLEL_DIROPS;
  std::memcpy(body.data() + offsetof(fuse_init_out, flags), &flags, sizeof(flags));
  std::vector<struct iovec> patched(iov, iov + count);
  patched[1].iov_base = body.data();
  const ssize_t n = ::writev(fd, patched.data(), count);
  if (n >= 0) granted.store(true);
  return n;
}

}  // namespace

Status EnableParallelDirops(struct fuse_session* session) {
  // splice_receive/splice_send left empty: libfuse then turns splicing off, which the
  // daemon does not ask for anyway (no write_buf, no FUSE_CAP_SPLICE_*).
  static const struct fuse_custom_io kIo = {
      .writev = WriteReply, .read = ReadRequest, .splice_receive = nullptr, .splice_send = nullptr};
  const int rc = fuse_session_custom_io(session, &kIo, fuse_session_fd(session));
  if (rc != 0) return Status::FromErrno(-rc, "install the INIT reply hook");
  return Status::Ok();
}

bool ParallelDiropsGranted() { return granted.load(); }

}  // namespace epochfs::fs
