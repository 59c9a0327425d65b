// FileReader: reads whole sample files (or a byte range of them) into caller memory,
// many at once. Private to loader/.
//
// A request names a file, the size it had when it was listed, and the range to copy.
// Each file is opened, checked with fstat (still a regular file, still the same size:
// otherwise an error naming it, kStale for a size change, never silently cut bytes),
// read in full (short reads and -EAGAIN are resubmitted; hitting the end early is
// kStale too) and closed.
//
// Two implementations: io_uring (open, read and close are all asynchronous, up to
// `queue_depth` files in flight; liburing's negative-errno convention stays inside it)
// and a pread loop, used where io_uring_queue_init fails or when asked for.
//
// Files are opened O_NONBLOCK, so that a FIFO put where a file was cannot block the
// open; the fstat check then refuses it before any read, and the flag is cleared for
// regular files (io_uring would otherwise return -EAGAIN for uncached pages).
//
// Thread-safety: none; one reader thread drives an instance at a time.
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/loader.h"

namespace epochfs::loader {

struct ReadRequest {
  const std::string* path = nullptr;
  uint64_t file_size = 0;  // the size when listed; any other size is kStale
  uint64_t offset = 0;     // first byte to copy
  uint64_t length = 0;     // bytes to copy into dest
  uint8_t* dest = nullptr;
  void* tag = nullptr;  // the caller's
  Status status;        // set on completion
};

class FileReader {
 public:
  virtual ~FileReader() = default;
  virtual const char* name() const = 0;
  // Queues `req`; it must stay valid until Wait() returns it.
  virtual void Add(ReadRequest* req) = 0;
  // Makes progress and appends at least one completed request to `done` (none only when
  // nothing is pending). A request whose status is not ok failed with that status.
  virtual void Wait(std::vector<ReadRequest*>* done) = 0;
  // Requests added and not yet returned by Wait().
  virtual size_t pending() const = 0;
  // Completes every request not yet started with a cancelled status (they come back
  // from Wait()); requests already in flight finish normally.
  virtual void CancelQueued() = 0;
};

// io_uring with up to `queue_depth` files in flight; on failure returns nullptr and
// says why in *why_not.
std::unique_ptr<FileReader> NewUringReader(unsigned queue_depth, Status* why_not);
std::unique_ptr<FileReader> NewPreadReader();
// `readers` (at least one), each driven by a thread of its own, sharing the requests; each
// takes up to `depth_each` at a time. One reader is returned as it is.
std::unique_ptr<FileReader> NewParallelReader(std::vector<std::unique_ptr<FileReader>> readers,
                                              unsigned depth_each);

// The open(2) flags both readers use, and the errors both produce.
constexpr int kSampleOpenFlags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
// Checks a freshly opened sample (regular file, size as listed) and clears O_NONBLOCK.
// A synchronous fstat: the kernel answers it from its attribute cache, on FUSE too.
Status CheckOpened(int fd, const ReadRequest& req);
Status ShortReadError(const ReadRequest& req, uint64_t got);
Status CancelledError(const ReadRequest& req);

}  // namespace epochfs::loader
