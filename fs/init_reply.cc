#include "fs/init_reply.h"

#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "fs/fuse_uring.h"

namespace epochfs::fs {
namespace {

// From the kernel's include/uapi/linux/fuse.h (protocol 7.40), newer than bookworm's
// linux-libc-dev: FUSE_PASSTHROUGH is bit 37 of the flags, that is bit 5 of flags2, and
// the reply's max_stack_depth follows flags2.
constexpr uint32_t kPassthroughFlag2 = 1u << (37 - 32);
// FUSE_OVER_IO_URING (protocol 7.42): bit 41, bit 9 of flags2 (fs/fuse_uring.h).
constexpr uint32_t kOverIoUringFlag2 = 1u << (41 - 32);
constexpr size_t kMaxStackDepthOffset = offsetof(fuse_init_out, flags2) + sizeof(uint32_t);
// The mount stacks on the source's filesystem, which must not itself stack on another
// (a backing file's filesystem has to be below this depth).
constexpr uint32_t kMaxStackDepth = 1;

// The INIT request in flight, if any: its id (0: none) and what the kernel offered. INIT
// is the first request on a connection and the kernel sends no other before it is
// answered; a daemon runs one session, so one slot is enough.
std::atomic<uint64_t> init_unique{0};
std::atomic<bool> dirops_offered{false};
std::atomic<bool> passthrough_offered{false};
std::atomic<bool> passthrough_wished{false};
std::atomic<bool> dirops_granted{false};
std::atomic<bool> passthrough_granted{false};
std::atomic<bool> uring_offered{false};
std::atomic<unsigned> uring_threads_wished{0};
std::string mountpoint_wished;
struct fuse_session* hooked_session = nullptr;
// Made while INIT's reply is written, started once it is; ended by StopFuseUring.
std::unique_ptr<FuseUring> fuse_uring;
std::atomic<FuseUring*> fuse_uring_granted{nullptr};

template <typename T>
T Load(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}
template <typename T>
void Store(char* at, T value) {
  std::memcpy(at, &value, sizeof(value));
}

ssize_t ReadRequest(int fd, void* buf, size_t len, void* /*userdata*/) {
  const ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + offsetof(fuse_init_in, flags) +
                                sizeof(uint32_t))) {
    fuse_in_header header;
    std::memcpy(&header, buf, sizeof(header));
    if (header.opcode == FUSE_INIT) {
      fuse_init_in init;
      std::memset(&init, 0, sizeof(init));  // flags2 stays 0 from a kernel before 7.36
      std::memcpy(&init, static_cast<const char*>(buf) + sizeof(header),
                  std::min(sizeof(init), static_cast<size_t>(n) - sizeof(header)));
      dirops_offered.store((init.flags & FUSE_PARALLEL_DIROPS) != 0);
      passthrough_offered.store((init.flags & FUSE_INIT_EXT) != 0 &&
                                (init.flags2 & kPassthroughFlag2) != 0);
      uring_offered.store((init.flags & FUSE_INIT_EXT) != 0 &&
                          (init.flags2 & kOverIoUringFlag2) != 0);
      init_unique.store(header.unique);
    }
  }
  return n;
}

// The rings for FUSE over io_uring, made before the INIT reply asks for them: null where
// not offered, not wished, or they could not be made (the mount then stays on /dev/fuse).
std::unique_ptr<FuseUring> MakeFuseUring(const char* init_out, size_t init_out_size) {
  const unsigned threads = uring_threads_wished.load();
  if (!uring_offered.load() || threads == 0 ||
      init_out_size < offsetof(fuse_init_out, max_pages) + sizeof(uint16_t)) {
    return nullptr;
  }
  const auto max_write = Load<uint32_t>(init_out + offsetof(fuse_init_out, max_write));
  const auto max_pages = Load<uint16_t>(init_out + offsetof(fuse_init_out, max_pages));
  // The kernel wants at least this much for any entry (fuse_uring_create).
  const size_t payload = std::max<size_t>({8192, max_write, size_t{max_pages} * 4096});
  auto made = FuseUring::Create(hooked_session, mountpoint_wished, threads, payload);
  if (!made.ok()) {
    spdlog::warn("FUSE requests stay on /dev/fuse: {}", made.status().ToString());
    return nullptr;
  }
  return std::move(*made);
}

ssize_t WriteReply(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  // Replies to ring requests go to their entries; on /dev/fuse alone no reply looks.
  if (fuse_uring_granted.load(std::memory_order_relaxed) != nullptr) {
    if (const ssize_t n = FuseUring::CaptureReply(iov, count); n >= 0) return n;
  }
  const uint64_t unique = init_unique.load(std::memory_order_relaxed);
  if (unique == 0 || count < 2 || iov[0].iov_len != sizeof(fuse_out_header)) {
    return FuseUring::WriteNotification(fd, iov, count);
  }
  fuse_out_header header;
  std::memcpy(&header, iov[0].iov_base, sizeof(header));
  constexpr size_t kFlagsEnd = offsetof(fuse_init_out, flags) + sizeof(uint32_t);
  if (header.unique != unique || header.error != 0 || iov[1].iov_len < kFlagsEnd) {
    return ::writev(fd, iov, count);
  }
  init_unique.store(0);
  // A reply as long as protocol 7.36's (libfuse sends the whole struct from 7.23 on)
  // has flags2 and the stacking depth after it.
  const bool passthrough = passthrough_offered.load() && passthrough_wished.load() &&
                           iov[1].iov_len >= kMaxStackDepthOffset + sizeof(uint32_t);
  std::unique_ptr<FuseUring> uring =
      MakeFuseUring(static_cast<const char*>(iov[1].iov_base), iov[1].iov_len);
  if (!dirops_offered.load() && !passthrough && !uring) return ::writev(fd, iov, count);
  // A copy of the reply's body with the flags added; libfuse's own buffer is left alone.
  std::vector<char> body(static_cast<const char*>(iov[1].iov_base),
                         static_cast<const char*>(iov[1].iov_base) + iov[1].iov_len);
  char* const flags_at = body.data() + offsetof(fuse_init_out, flags);
  uint32_t flags = Load<uint32_t>(flags_at);
  if (dirops_offered.load()) flags |= FUSE_PARALLEL_DIROPS;
  const uint32_t flags2 =
      (passthrough ? kPassthroughFlag2 : 0) | (uring ? kOverIoUringFlag2 : 0);
  if (flags2 != 0) {
    flags |= FUSE_INIT_EXT;  // or the kernel reads no flags2
    char* const flags2_at = body.data() + offsetof(fuse_init_out, flags2);
    Store<uint32_t>(flags2_at, Load<uint32_t>(flags2_at) | flags2);
  }
  if (passthrough) Store<uint32_t>(body.data() + kMaxStackDepthOffset, kMaxStackDepth);
  Store<uint32_t>(flags_at, flags);
  std::vector<struct iovec> patched(iov, iov + count);
  patched[1].iov_base = body.data();
  const ssize_t n = ::writev(fd, patched.data(), count);
  if (n >= 0) {
    dirops_granted.store(dirops_offered.load());
    passthrough_granted.store(passthrough);
    if (uring) {
      // Seen by the writev hook before the first reply from a ring can come.
      fuse_uring_granted.store(uring.get());
      // The kernel now holds new requests until every queue has an entry.
      uring->Start();
      fuse_uring = std::move(uring);
    }
  }
  return n;
}

}  // namespace

Status InstallInitReplyHook(struct fuse_session* session, InitWishes wishes) {
  passthrough_wished.store(wishes.passthrough);
  uring_threads_wished.store(wishes.uring_threads_per_queue);
  mountpoint_wished = wishes.mountpoint;
  hooked_session = session;
  // splice_receive/splice_send left empty: libfuse then turns splicing off, which the
  // daemon does not ask for anyway (no write_buf, no FUSE_CAP_SPLICE_*).
  static const struct fuse_custom_io kIo = {
      .writev = WriteReply, .read = ReadRequest, .splice_receive = nullptr, .splice_send = nullptr};
  const int rc = fuse_session_custom_io(session, &kIo, fuse_session_fd(session));
  if (rc != 0) return Status::FromErrno(-rc, "install the INIT reply hook");
  return Status::Ok();
}

bool ParallelDiropsGranted() { return dirops_granted.load(); }
bool PassthroughGranted() { return passthrough_granted.load(); }
bool FuseUringGranted() { return fuse_uring_granted.load() != nullptr; }
uint64_t FuseUringRequests() {
  const FuseUring* uring = fuse_uring_granted.load();
  return uring != nullptr ? uring->requests() : 0;
}
void StopFuseUring() {
  if (fuse_uring) fuse_uring->Stop();
}

}  // namespace epochfs::fs
